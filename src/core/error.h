// Errors: user errors say what is wrong in one line (no source location); broken internal
// invariants carry file:line for the developers.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace moet {

// An error the user can act on (bad config, bad flag, bad file). `main` prints what() and
// exits non-zero.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A broken internal invariant: a bug in moet, not something the user did. Deliberately not an
// Error, so code that handles user errors (a bad file, a plan that does not fit) never swallows
// one; `main` prints "moet: internal error: what() " and exits non-zero.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Throws Error(msg): a user error, the message alone.
[[noreturn]] void fail(const std::string& msg);
// Throws InternalError(msg + " [file:line]"), located for the developers.
[[noreturn]] void fail_internal(const char* file, int line, const std::string& msg);

// The line a failed command ends with (after "moet: "): "error: what" for a user error; anything
// else — a broken invariant (InternalError, with its [file:line]) or another exception — is a bug
// in moet and says "internal error: what".
std::string failure_line(const std::exception& e);

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... R>
void append(std::ostringstream& os, const T& v, const R&... rest) {
  os << v;
  append(os, rest...);
}
}  // namespace detail

template <typename... A>
std::string str(const A&... a) {
  std::ostringstream os;
  detail::append(os, a...);
  return os.str();
}

}  // namespace moet

// Throws moet::Error with the message built from the arguments (streamed).
#define MOET_FAIL(...) ::moet::fail(::moet::str(__VA_ARGS__))
// Checks a condition that the caller's input must satisfy; message says what is wrong.
#define MOET_CHECK(cond, ...)                            \
  do {                                                   \
    if (!(cond)) ::moet::fail(::moet::str(__VA_ARGS__)); \
  } while (0)
// Internal invariant (shape contract of an op); throws InternalError naming the condition.
#define MOET_ASSERT(cond)                                                           \
  do {                                                                              \
    if (!(cond)) ::moet::fail_internal(__FILE__, __LINE__, "check failed: " #cond); \
  } while (0)
// Internal invariant with a message built from the arguments (streamed); throws InternalError.
#define MOET_ASSERT_MSG(cond, ...)                                                    \
  do {                                                                                \
    if (!(cond)) ::moet::fail_internal(__FILE__, __LINE__, ::moet::str(__VA_ARGS__)); \
  } while (0)
