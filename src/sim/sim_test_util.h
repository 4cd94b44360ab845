// What the simulator's test files share: exact comparisons and links that cost nothing. Header
// only; tests only.
#pragma once

#include <gtest/gtest.h>

#include <cmath>

#include "motley/cluster/cluster.h"

namespace motley::sim_testing {

// Links that move a terabyte a second with no latency: transfers take no time to speak of.
inline constexpr LinkSpec kFreeIntra{LinkKind::kNvlink, BytesPerSecond(1e12), Seconds(0)};
inline constexpr LinkSpec kFreeInter{LinkKind::kInfiniband, BytesPerSecond(1e12), Seconds(0)};

// `actual` equals `expected` to twelve significant digits (closed forms in doubles).
inline void expect_relative(double actual, double expected) {
  EXPECT_NEAR(actual, expected, 1e-12 * std::abs(expected)) << "expected " << expected;
}

}  // namespace motley::sim_testing
