// The one-line message of the moet::Error a call throws ("" when it throws none): what tests of
// bad input assert on.
#pragma once
#include <string>
#include <utility>

#include "core/error.h"

namespace moet::test {

template <typename F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace moet::test
