// The emulation's factors as motley hands them to motley-run: their JSON round trip (and the
// error document), the rank sets they price, and the times EmulatedNetwork reads from them.
#include "motley/exec/emulation_factors.h"

#include <gtest/gtest.h>

#include <cmath>

#include "test_plans.h"

namespace motley {
namespace {

using testing::preset;
using testing::uniform_plan;

TEST(EmulationFactors, AllReducesArePricedEveryQuarterOctaveFromOneByteToOneTebibyte) {
  const std::vector<double> grid = all_reduce_grid();
  ASSERT_EQ(grid.size(), 162u);
  EXPECT_EQ(grid[0], 0);
  EXPECT_EQ(grid[1], 1);
  EXPECT_EQ(grid[5], 2);
  EXPECT_EQ(grid.back(), std::exp2(40));
}

// Two stages, two replicas, one device per group: ranks 0 and 1 are replica 0's stages.
TEST(EmulationFactors, RankSetsAreTheReplicasOfAStageTheTiedPairAndTheLoss) {
  const Plan plan = uniform_plan(preset("tiny-llama"), {ScheduleKind::k1f1b, 2, 1, 4, 2});
  EXPECT_EQ(emulated_rank_sets(plan),
            (std::vector<std::vector<int>>{{0, 1, 2, 3}, {0, 2}, {1, 3}}));
}

TEST(EmulationFactors, RankSetsWithTensorParallelismAddGroupsAndShards) {
  // Groups of two: replica 0 is ranks 0-1 (stage 0) and 2-3 (stage 1), replica 1 ranks 4-7.
  const Plan plan = uniform_plan(preset("tiny-llama"),
                                 {ScheduleKind::k1f1b, 2, 1, 4, 2, RecomputePolicy::kNone, 2});
  EXPECT_EQ(emulated_rank_sets(plan),
            (std::vector<std::vector<int>>{{0, 1},                    // tensor-parallel group
                                           {0, 1, 2, 3, 4, 5, 6, 7},  // tied pair, full size
                                           {0, 1, 4, 5},              // stage 0, full size
                                           {0, 2, 4, 6},              // tied pair, shards
                                           {0, 4},                    // stage 0, shards
                                           {1, 3, 5, 7},
                                           {1, 5},
                                           {2, 3},
                                           {2, 3, 6, 7},  // stage 1 full size, and the loss
                                           {2, 6},
                                           {3, 7},
                                           {4, 5},
                                           {6, 7}}));
}

EmulationFactors two_rank_factors() {
  EmulationFactors f;
  f.speeds = "cost";
  f.device_types = {"H100-SXM", "A100-80GB"};
  f.compute_slowdown = {1.0, 66.9 / 19.5};
  f.cluster_step = Seconds(0.0123);
  f.simulated_iteration = Seconds(0.0456);
  f.wire_bytes_per_byte = 0.5;
  f.links = {EmulatedLink{0, 1, Seconds(1e-5), BytesPerSecond(2.5e10)},
             EmulatedLink{1, 0, Seconds(3e-6), BytesPerSecond(1e9 / 3)}};
  EmulatedAllReduce a;
  a.ranks = {0, 1};
  a.bytes = all_reduce_grid();
  for (double x : a.bytes) a.seconds.push_back(2e-5 + x / 7e9);  // one ring: affine in size
  f.all_reduces = {a};
  return f;
}

TEST(EmulationFactors, JsonRoundTripKeepsEveryNumberExactly) {
  const EmulationFactors f = two_rank_factors();
  const std::string text = emulation_factors_to_json(f).dump();
  auto json = parse_json(text, "factors");
  ASSERT_TRUE(json.is_ok());
  auto back = emulation_factors_from_json(*json, "factors");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->speeds, f.speeds);
  EXPECT_EQ(back->device_types, f.device_types);
  EXPECT_EQ(back->compute_slowdown, f.compute_slowdown);
  EXPECT_EQ(back->cluster_step, f.cluster_step);
  EXPECT_EQ(back->simulated_iteration, f.simulated_iteration);
  EXPECT_EQ(back->wire_bytes_per_byte, f.wire_bytes_per_byte);
  ASSERT_EQ(back->links.size(), 2u);
  EXPECT_EQ(back->links[1].src, 1);
  EXPECT_EQ(back->links[1].latency, f.links[1].latency);
  EXPECT_EQ(back->links[1].bandwidth, f.links[1].bandwidth);
  ASSERT_EQ(back->all_reduces.size(), 1u);
  EXPECT_EQ(back->all_reduces[0].ranks, f.all_reduces[0].ranks);
  EXPECT_EQ(back->all_reduces[0].bytes, f.all_reduces[0].bytes);
  EXPECT_EQ(back->all_reduces[0].seconds, f.all_reduces[0].seconds);
}

TEST(EmulationFactors, AnErrorDocumentGivesBackTheError) {
  const Status error = not_found("plan.json: no such file");
  auto json = parse_json(emulation_error_to_json(error).dump(), "handed over");
  ASSERT_TRUE(json.is_ok());
  auto back = emulation_factors_from_json(*json, "handed over");
  ASSERT_FALSE(back.is_ok());
  EXPECT_EQ(back.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(back.status().message(), "plan.json: no such file");
}

TEST(EmulationFactors, AMalformedDocumentNamesTheField) {
  Json doc = emulation_factors_to_json(two_rank_factors());
  doc["format"] = "motley.emulation/0";
  auto wrong = emulation_factors_from_json(doc, "handed over");
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("handed over: field 'format'"), std::string::npos)
      << wrong.status().message();
  doc = emulation_factors_to_json(two_rank_factors());
  doc["links"][0]["dst"] = 2;  // no such rank
  auto bad_rank = emulation_factors_from_json(doc, "handed over");
  ASSERT_FALSE(bad_rank.is_ok());
  EXPECT_NE(bad_rank.status().message().find("links[0].dst"), std::string::npos)
      << bad_rank.status().message();
}

TEST(EmulatedNetwork, MessagesTakeTheLinksLatencyPlusWireBytesOverBandwidth) {
  const EmulatedNetwork network(two_rank_factors());
  // 4000 executor bytes are 2000 on the wire (bf16 for fp32).
  EXPECT_EQ(network.message_time(0, 1, 4000).value(), 1e-5 + 2000 / 2.5e10);
  EXPECT_EQ(network.message_time(1, 0, 4000).value(), 3e-6 + 2000 / (1e9 / 3));
  EXPECT_EQ(network.message_time(0, 0, 4000).value(), 0);  // one device
}

TEST(EmulatedNetwork, AllReducesInterpolateThePricedSizes) {
  EmulationFactors f = two_rank_factors();
  const EmulatedNetwork affine(f);
  // An affine time is reproduced at any size (to rounding), past the last size too.
  for (int64_t bytes : {int64_t{4}, int64_t{1000}, int64_t{12345678}, int64_t{1} << 42}) {
    const double wire = static_cast<double>(bytes) * 0.5;
    const double want = 2e-5 + wire / 7e9;
    EXPECT_NEAR(affine.all_reduce_time({0, 1}, bytes).value(), want, 1e-12 * want) << bytes;
  }
  // A kink (another algorithm takes over) between two priced sizes: exact at the priced sizes,
  // within a quarter of the slope change times the interval in between.
  EmulatedAllReduce& a = f.all_reduces[0];
  a.seconds.clear();
  const double s1 = 1 / 7e9, s2 = 1 / 2e10, c1 = 2e-5, c2 = 1e-3;  // lines meet at ~2.3e7 bytes
  for (double x : a.bytes) a.seconds.push_back(std::min(c1 + s1 * x, c2 + s2 * x));
  const EmulatedNetwork kinked(f);
  auto time = [&](double x) { return std::min(c1 + s1 * x, c2 + s2 * x); };
  ASSERT_EQ(a.bytes[81], std::exp2(20));  // a priced size below the kink
  EXPECT_EQ(kinked.all_reduce_time({0, 1}, int64_t{2} << 20).value(), a.seconds[81]);
  const double kink = (c2 - c1) / (s1 - s2);
  size_t i = 1;
  while (a.bytes[i] < kink) ++i;
  const int64_t bytes = static_cast<int64_t>(2 * kink);
  const double want = time(static_cast<double>(bytes) * 0.5);
  const double got = kinked.all_reduce_time({0, 1}, bytes).value();
  EXPECT_LE(std::abs(got - want), (s1 - s2) * (a.bytes[i] - a.bytes[i - 1]) / 4 * (1 + 1e-9));
  EXPECT_GT(std::abs(got - want), 0);  // interpolated, not exact
}

}  // namespace
}  // namespace motley
