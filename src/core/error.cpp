#include "core/error.h"

#include <cstring>

namespace moet {

[[noreturn]] void fail(const std::string& msg) { throw Error(msg); }

[[noreturn]] void fail_internal(const char* file, int line, const std::string& msg) {
  const char* base = std::strrchr(file, '/');
  throw InternalError(str(msg, " [", base ? base + 1 : file, ":", line, "]"));
}

std::string failure_line(const std::exception& e) {
  if (dynamic_cast<const Error*>(&e)) return std::string("error: ") + e.what();
  return std::string("internal error: ") + e.what();
}

}  // namespace moet
