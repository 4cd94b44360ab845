#include "motley/report/units_format.h"

#include <gtest/gtest.h>

#include <limits>

namespace motley {
namespace {

TEST(UnitsFormatTest, TimesPickTheLargestUnitWithThreeDigits) {
  EXPECT_EQ(format_time(Seconds(0)), "0 s");
  EXPECT_EQ(format_time(Seconds(830e-9)), "830 ns");
  EXPECT_EQ(format_time(microseconds(12.34)), "12.3 us");
  EXPECT_EQ(format_time(milliseconds(45.6)), "45.6 ms");
  EXPECT_EQ(format_time(milliseconds(123.4)), "123 ms");
  EXPECT_EQ(format_time(Seconds(4.5)), "4.50 s");
  EXPECT_EQ(format_time(Seconds(1234)), "1234 s");
  EXPECT_EQ(format_time(milliseconds(-2.5)), "-2.50 ms");
}

TEST(UnitsFormatTest, RoundingCarriesIntoTheNextDigitAndUnit) {
  EXPECT_EQ(format_time(Seconds(0.99996)), "1.00 s");       // not "1000 ms"
  EXPECT_EQ(format_time(milliseconds(99.996)), "100 ms");   // not "100.0 ms"
  EXPECT_EQ(format_time(milliseconds(9.9996)), "10.0 ms");  // not "10.00 ms"
  EXPECT_EQ(format_bytes(Bytes(1023.999 * 1024)), "1.00 MiB");
}

TEST(UnitsFormatTest, BytesUseBinaryPrefixes) {
  EXPECT_EQ(format_bytes(Bytes(0)), "0 B");
  EXPECT_EQ(format_bytes(Bytes(512)), "512 B");
  EXPECT_EQ(format_bytes(Bytes(1536)), "1.50 KiB");
  EXPECT_EQ(format_bytes(Bytes(12 * 1024 * 1024)), "12.0 MiB");
  EXPECT_EQ(format_bytes(Bytes(61.2 * kGiB)), "61.2 GiB");
  EXPECT_EQ(format_bytes(Bytes(80 * kGiB)), "80.0 GiB");
}

TEST(UnitsFormatTest, CountsRatesAndPercentages) {
  EXPECT_EQ(format_count(12), "12");
  EXPECT_EQ(format_count(4100), "4.10 K");
  EXPECT_EQ(format_count(512e6), "512 M");
  EXPECT_EQ(format_count(8.03e9), "8.03 B");
  EXPECT_EQ(format_tokens_per_second(45600), "45.6 K tokens/s");
  EXPECT_EQ(format_bandwidth(gigabytes_per_second(450)), "450 GB/s");
  EXPECT_EQ(format_bandwidth(BytesPerSecond(std::numeric_limits<double>::infinity())), "inf");
  EXPECT_EQ(format_flops(Flops(1.234e12)), "1.23 TFLOP");
  EXPECT_EQ(format_flops_rate(teraflops(989)), "989 TFLOP/s");
  EXPECT_EQ(format_percent(0.1234), "12.3%");
  EXPECT_EQ(format_percent(0.75, 0), "75%");
  EXPECT_EQ(format_percent(1.1, 0), "110%");
}

TEST(UnitsFormatTest, MillisecondsForAxisLabels) {
  EXPECT_EQ(format_milliseconds(milliseconds(12.5), 1), "12.5");
  EXPECT_EQ(format_milliseconds(milliseconds(120), 0), "120");
  EXPECT_EQ(format_milliseconds(milliseconds(0.2), 2), "0.20");
  EXPECT_EQ(format_milliseconds(Seconds(-1e-15), 1), "0.0");  // no "-0.0" on an axis
}

}  // namespace
}  // namespace motley
