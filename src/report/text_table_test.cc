#include "motley/report/text_table.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(TextTable, HeaderRuleNumericColumnsRightAndNoTrailingSpace) {
  TextTable t({"name", "count", "note"});
  t.add_row({"a", "12", "x"});
  t.add_row({"longer", "3", ""});
  t.add_separator();
  t.add_row({"sum", "$15", "total"});
  EXPECT_EQ(t.to_string(),
            "name    count  note\n"
            "--------------------\n"
            "a          12  x\n"
            "longer      3\n"
            "--------------------\n"
            "sum       $15  total\n");
}

TEST(TextTable, WithoutHeaderColumnsAreLeftUnlessToldOtherwise) {
  TextTable t;
  t.add_row({"  busy", "12 ms"});
  t.add_row({"  exposed comm", "3 ms"});
  EXPECT_EQ(t.to_string(), "  busy          12 ms\n  exposed comm  3 ms\n");
  t.set_alignment({TextTable::Align::kLeft, TextTable::Align::kRight});
  EXPECT_EQ(t.to_string(), "  busy          12 ms\n  exposed comm   3 ms\n");
}

TEST(TextTable, ATextColumnStaysLeftEvenWithSomeNumbers) {
  TextTable t({"id", "kind"});
  t.add_row({"1", "7"});
  t.add_row({"2", "head"});
  EXPECT_EQ(t.to_string(), "id  kind\n--------\n 1  7\n 2  head\n");
}

}  // namespace
}  // namespace motley
