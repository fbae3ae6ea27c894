#include "core/flag_check.h"

#include "core/warning.h"

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

void check_flag_threads(int v) {
  check_flag_in_range("--threads", v, 0, kMaxThreads);
  const int cores = usable_cores();
  if (v > cores)
    warn(str("--threads ", v, " is more than the ", cores, cores == 1 ? " core" : " cores",
             " this process may use: the threads will take turns on them"));
}

}  // namespace moet
