// Choices among a few words (flags such as --precision, --recompute-granularity): each word and
// the value it names, listed once where the enum is defined.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace moet {

template <typename E>
using Choices = std::vector<std::pair<std::string, E>>;

// The word of `value` among `choices` ("?" when none names it).
template <typename E>
const char* choice_name(const Choices<E>& choices, E value) {
  for (const auto& [name, v] : choices)
    if (v == value) return name.c_str();
  return "?";
}

}  // namespace moet
