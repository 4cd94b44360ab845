#include "motley/core/status.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

Result<int> half(int x) {
  if (x % 2 != 0) return invalid_argument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> quarter(int x) {
  MOTLEY_ASSIGN_OR_RETURN(int h, half(x));
  return half(h);
}

Status check_even(int x) {
  MOTLEY_RETURN_IF_ERROR(half(x).status());
  return Status::ok();
}

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_EQ(s.to_string(), "ok");
  EXPECT_EQ(exit_code_for(s), 0);
}

TEST(StatusTest, UserErrorsExitWithTwoOthersWithOne) {
  EXPECT_EQ(exit_code_for(invalid_argument("x")), 2);
  EXPECT_EQ(exit_code_for(not_found("x")), 2);
  EXPECT_EQ(exit_code_for(infeasible("x")), 2);
  EXPECT_EQ(exit_code_for(io_error("x")), 1);
  EXPECT_EQ(exit_code_for(internal_error("x")), 1);
}

TEST(StatusTest, ContextPrefixesTheMessage) {
  Status s = invalid_argument("field 'a': bad").with_context("f.yaml");
  EXPECT_EQ(s.message(), "f.yaml: field 'a': bad");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Status::ok().with_context("f").is_ok());
}

TEST(StatusTest, MessagesStayOnOneLine) {
  // User input brings these in: a key with a newline, a file name with a terminal escape.
  Status s = invalid_argument("field 'a\nb': bad\r\t\x1b[31m").with_context("f\n.yaml");
  EXPECT_EQ(s.message(), "f\\n.yaml: field 'a\\nb': bad\\r\\t\\x1b[31m");
  EXPECT_EQ(Status(StatusCode::kInternal, "caf\xc3\xa9").message(), "caf\xc3\xa9");
}

TEST(ResultTest, PropagatesValuesAndErrors) {
  ASSERT_TRUE(quarter(8).is_ok());
  EXPECT_EQ(quarter(8).value(), 2);
  Result<int> r = quarter(6);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "odd: 3");
  EXPECT_TRUE(check_even(4).is_ok());
  EXPECT_EQ(check_even(5).message(), "odd: 5");
}

TEST(ResultDeathTest, ValueOfAnErrorIsABug) {
  Result<int> r = half(3);
  EXPECT_DEATH((void)r.value(), "value\\(\\) on an error Result: odd: 3");
}

}  // namespace
}  // namespace motley
