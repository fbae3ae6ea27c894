#include "core/error.h"

#include <cstring>

namespace moet {

[[noreturn]] void fail(const std::string& msg) { throw Error(msg); }

[[noreturn]] void fail_internal(const char* file, int line, const std::string& msg) {
  const char* base = std::strrchr(file, '/');
  throw Error(str(msg, " [", base ? base + 1 : file, ":", line, "]"));
}

}  // namespace moet
