#include "motley/core/units.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(UnitsTest, RatesDivideIntoTime) {
  EXPECT_DOUBLE_EQ((Flops(2e12) / teraflops(1.0)).value(), 2.0);
  EXPECT_DOUBLE_EQ((Bytes(5e9) / gigabytes_per_second(10.0)).value(), 0.5);
  EXPECT_DOUBLE_EQ((gigabytes_per_second(2.0) * Seconds(3.0)).value(), 6e9);
}

TEST(UnitsTest, LikeQuantitiesAddCompareAndDivide) {
  Seconds a(1.5), b(0.5);
  EXPECT_EQ(a + b, Seconds(2.0));
  EXPECT_EQ(a - b, Seconds(1.0));
  EXPECT_DOUBLE_EQ(a / b, 3.0);
  EXPECT_LT(b, a);
  EXPECT_EQ(2.0 * b, Seconds(1.0));
  EXPECT_EQ(microseconds(5.0), Seconds(5e-6));
}

}  // namespace
}  // namespace motley
