// Errors (src/core/error.h): a user error is an Error with the message alone; a broken internal
// invariant (MOET_ASSERT) is an InternalError, not an Error, located [file:line], and the line a
// failed command ends with says which one it was.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "core/error.h"

namespace moet {
namespace {

void assert_positive(int n) { MOET_ASSERT(n > 0); }
void check_positive(int n) { MOET_CHECK(n > 0, "n must be positive, got ", n); }

TEST(Errors, UserErrorIsAnErrorWithTheMessageAlone) {
  try {
    check_positive(-2);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "n must be positive, got -2");
    EXPECT_EQ(failure_line(e), "error: n must be positive, got -2");
  }
}

TEST(Errors, BrokenInvariantIsAnInternalErrorNotAUserError) {
  bool caught_as_user_error = false, caught_as_internal = false;
  std::string what;
  try {
    try {
      assert_positive(0);
    } catch (const Error&) {
      caught_as_user_error = true;  // code handling user errors must not swallow a bug
    }
  } catch (const InternalError& e) {
    caught_as_internal = true;
    what = e.what();
    EXPECT_EQ(failure_line(e), "internal error: " + what);
  }
  EXPECT_FALSE(caught_as_user_error);
  ASSERT_TRUE(caught_as_internal);
  EXPECT_EQ(what.rfind("check failed: n > 0 [test_error.cpp:", 0), 0u) << what;
  EXPECT_EQ(what.back(), ']') << what;
}

TEST(Errors, AssertWithAMessageCarriesItAndTheLocation) {
  try {
    MOET_ASSERT_MSG(1 + 1 == 3, "sample ", 7, " is outside the planned index");
    FAIL() << "no throw";
  } catch (const InternalError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("sample 7 is outside the planned index [test_error.cpp:", 0), 0u) << what;
  }
}

TEST(Errors, AnyOtherExceptionIsReportedAsABug) {
  EXPECT_EQ(failure_line(std::out_of_range("vector::at")), "internal error: vector::at");
}

}  // namespace
}  // namespace moet
