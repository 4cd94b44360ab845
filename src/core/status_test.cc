#include "motley/core/status.h"

#include <gtest/gtest.h>

#include "motley/core/utf8.h"

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

TEST(StatusTest, BytesThatAreNotUtf8AreEscapedAndUtf8IsKept) {
  // Valid UTF-8 of two, three and four bytes stays as it is.
  EXPECT_EQ(invalid_argument("\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80").message(),
            "\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  // A lone continuation byte, a truncated sequence, bytes no sequence starts with.
  EXPECT_EQ(invalid_argument("a\x80"
                             "b")
                .message(),
            "a\\x80b");
  EXPECT_EQ(invalid_argument("a\xe2\x82").message(), "a\\xe2\\x82");
  EXPECT_EQ(invalid_argument("\xff\xfe").message(), "\\xff\\xfe");
  // An overlong '/', a UTF-16 surrogate, a code point past U+10FFFF.
  EXPECT_EQ(invalid_argument("\xc0\xaf").message(), "\\xc0\\xaf");
  EXPECT_EQ(invalid_argument("\xed\xa0\x80").message(), "\\xed\\xa0\\x80");
  EXPECT_EQ(invalid_argument("\xf4\x90\x80\x80").message(), "\\xf4\\x90\\x80\\x80");
  // C1 controls (U+0080 to U+009F: U+009B is a terminal's CSI) are escaped byte by byte;
  // U+00A0 is the first printable character after them.
  EXPECT_EQ(invalid_argument("\xc2\x9b"
                             "31m")
                .message(),
            "\\xc2\\x9b31m");
  EXPECT_EQ(invalid_argument("\xc2\xa0").message(), "\xc2\xa0");
}

TEST(Utf8Test, PrintableCharLengthIsTheLengthOfOneCharacter) {
  EXPECT_EQ(printable_char_length("ab"), 1u);
  EXPECT_EQ(printable_char_length("\x7f"), 0u);
  EXPECT_EQ(printable_char_length("\xc3\xa9x"), 2u);
  EXPECT_EQ(printable_char_length("\xe2\x82\xac"), 3u);
  EXPECT_EQ(printable_char_length("\xf0\x9f\x98\x80"), 4u);
  EXPECT_EQ(printable_char_length("\xe0\x80\x80"), 0u);  // overlong NUL
  EXPECT_EQ(printable_char_length(std::string_view("\xc3", 1)), 0u);
  EXPECT_EQ(printable_char_length("\n"), 0u);
  EXPECT_EQ(utf8_sequence_length("\n"), 1u);
  EXPECT_EQ(utf8_sequence_length("\xc2\x85"), 2u);  // U+0085: valid, but a control
  EXPECT_EQ(printable_char_length("\xc2\x85"), 0u);
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9\n"));
  EXPECT_FALSE(is_valid_utf8("caf\xc3"));
  EXPECT_TRUE(is_valid_utf8(""));
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
