#include "core/flag_check.h"

namespace moet {

void check_flag_choice(std::string_view flag, const std::string& v,
                       std::initializer_list<std::string_view> choices) {
  std::string names;
  for (std::string_view c : choices) {
    if (v == c) return;
    names += (names.empty() ? "" : ", ") + std::string(c);
  }
  MOET_FAIL(flag, " '", v, "' is not one of ", names);
}

}  // namespace moet
