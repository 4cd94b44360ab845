#include "motley/cost/collectives.h"

#include <gtest/gtest.h>

#include "motley/cluster/measured_links.h"

namespace motley {
namespace {

const AlphaBeta kNvlink{microseconds(1), gigabytes_per_second(450)};
const AlphaBeta kNic{microseconds(5), gigabytes_per_second(50)};
const Bytes kGigabyte(1e9);

TEST(Collectives, RingAllReduceFormula) {
  // 2(k-1) alpha + 2(k-1)/k n / beta with k = 8: 14 latencies and 1.75 n over the link.
  const double expected = 14 * 1e-6 + 1.75 * 1e9 / 450e9;
  EXPECT_DOUBLE_EQ(ring_all_reduce_time(8, kGigabyte, kNvlink).value(), expected);
}

TEST(Collectives, ReduceScatterAllGatherAndAllToAllFormulas) {
  // (k-1) alpha + (k-1)/k n / beta with k = 4: 3 latencies and 0.75 n over the link.
  const double expected = 3 * 5e-6 + 0.75 * 1e9 / 50e9;
  EXPECT_DOUBLE_EQ(ring_reduce_scatter_time(4, kGigabyte, kNic).value(), expected);
  EXPECT_DOUBLE_EQ(ring_all_gather_time(4, kGigabyte, kNic).value(), expected);
  EXPECT_DOUBLE_EQ(pairwise_all_to_all_time(4, kGigabyte, kNic).value(), expected);
}

TEST(Collectives, OneParticipantCostsNothing) {
  for (Collective c : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
                       Collective::kAllToAll}) {
    EXPECT_EQ(flat_collective_time(c, 1, kGigabyte, kNic).value(), 0.0) << collective_name(c);
    EXPECT_EQ(flat_collective_time(c, 0, kGigabyte, kNic).value(), 0.0) << collective_name(c);
    EXPECT_EQ(hierarchical_collective_time(c, 1, 1, kGigabyte, kNvlink, kNic).value(), 0.0);
  }
}

TEST(Collectives, ZeroBytesStillPaysLatency) {
  EXPECT_DOUBLE_EQ(ring_all_reduce_time(2, Bytes(0), kNic).value(), 2 * 5e-6);
  EXPECT_DOUBLE_EQ(ring_all_gather_time(3, Bytes(0), kNic).value(), 2 * 5e-6);
}

TEST(Collectives, MeasuredSweepIsInterpolatedAndItsLastBandwidthHeld) {
  const std::vector<CollectiveSample> sweep = {{Bytes(1024), microseconds(50), {}, {}},
                                               {Bytes(4096), microseconds(80), {}, {}},
                                               {Bytes(1 << 20), microseconds(1080), {}, {}}};
  // At a measured size, its time; a quarter of the way from 1 KiB to 4 KiB, a quarter of the
  // way from 50 to 80 us.
  EXPECT_DOUBLE_EQ(measured_collective_time(sweep, Bytes(4096)).value(), 80e-6);
  EXPECT_DOUBLE_EQ(measured_collective_time(sweep, Bytes(1792)).value(), 57.5e-6);
  // Below the sweep: the smallest size's time; above it: 1080 us per MiB.
  EXPECT_DOUBLE_EQ(measured_collective_time(sweep, Bytes(0)).value(), 50e-6);
  EXPECT_DOUBLE_EQ(measured_collective_time(sweep, Bytes(3 << 20)).value(), 3 * 1080e-6);
  // A lone empty message: its time, whatever the size.
  const std::vector<CollectiveSample> empty = {{Bytes(0), microseconds(7), {}, {}}};
  EXPECT_DOUBLE_EQ(measured_collective_time(empty, Bytes(1e6)).value(), 7e-6);
}

TEST(Collectives, LinksFileOpNames) {
  EXPECT_EQ(collective_from_op("all_reduce"), Collective::kAllReduce);
  EXPECT_EQ(collective_from_op("reduce_scatter"), Collective::kReduceScatter);
  EXPECT_EQ(collective_from_op("all_gather"), Collective::kAllGather);
  EXPECT_EQ(collective_from_op("all_to_all"), Collective::kAllToAll);
  EXPECT_EQ(collective_from_op("all-reduce"), std::nullopt);
}

TEST(Collectives, FlatDispatchesToTheRingFormulas) {
  EXPECT_EQ(flat_collective_time(Collective::kAllReduce, 6, kGigabyte, kNic),
            ring_all_reduce_time(6, kGigabyte, kNic));
  EXPECT_EQ(flat_collective_time(Collective::kReduceScatter, 6, kGigabyte, kNic),
            ring_reduce_scatter_time(6, kGigabyte, kNic));
  EXPECT_EQ(flat_collective_time(Collective::kAllGather, 6, kGigabyte, kNic),
            ring_all_gather_time(6, kGigabyte, kNic));
  EXPECT_EQ(flat_collective_time(Collective::kAllToAll, 6, kGigabyte, kNic),
            pairwise_all_to_all_time(6, kGigabyte, kNic));
}

TEST(Collectives, HierarchicalAllReduceFormula) {
  // 2 nodes x 8: reduce-scatter of n in the node, all-reduce of n/8 across the two nodes,
  // all-gather of n in the node.
  const double intra_phase = 7 * 1e-6 + (7.0 / 8) * 1e9 / 450e9;
  const double inter_phase = 2 * 5e-6 + 1.0 * (1e9 / 8) / 50e9;
  EXPECT_DOUBLE_EQ(
      hierarchical_collective_time(Collective::kAllReduce, 2, 8, kGigabyte, kNvlink, kNic).value(),
      intra_phase + inter_phase + intra_phase);
}

TEST(Collectives, HierarchicalReduceScatterAndAllGatherFormulas) {
  // 4 nodes x 2: intra (1 step, n/2) and inter (3 steps, 3/4 of n/2).
  const double intra_phase = 1e-6 + 0.5 * 1e9 / 450e9;
  const double inter_phase = 3 * 5e-6 + 0.75 * (1e9 / 2) / 50e9;
  EXPECT_DOUBLE_EQ(
      hierarchical_collective_time(Collective::kReduceScatter, 4, 2, kGigabyte, kNvlink, kNic)
          .value(),
      intra_phase + inter_phase);
  EXPECT_DOUBLE_EQ(
      hierarchical_collective_time(Collective::kAllGather, 4, 2, kGigabyte, kNvlink, kNic).value(),
      inter_phase + intra_phase);
}

TEST(Collectives, HierarchicalDegeneratesToTheRing) {
  // One node: the inter-node all-reduce of one participant is free, RS + AG is the ring.
  EXPECT_DOUBLE_EQ(
      hierarchical_collective_time(Collective::kAllReduce, 1, 8, kGigabyte, kNvlink, kNic).value(),
      ring_all_reduce_time(8, kGigabyte, kNvlink).value());
  // One participant per node: only the inter-node ring is left.
  EXPECT_DOUBLE_EQ(
      hierarchical_collective_time(Collective::kAllReduce, 4, 1, kGigabyte, kNvlink, kNic).value(),
      ring_all_reduce_time(4, kGigabyte, kNic).value());
}

TEST(Collectives, HierarchicalAllToAllIsThePairwiseExchangeOnTheSlowerLevel) {
  EXPECT_EQ(hierarchical_collective_time(Collective::kAllToAll, 2, 4, kGigabyte, kNvlink, kNic),
            pairwise_all_to_all_time(8, kGigabyte, kNic));
}

TEST(Collectives, BusBandwidthFactorsAsNcclTests) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kReduceScatter, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kAllGather, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kAllToAll, 2), 0.5);
  EXPECT_EQ(bus_bandwidth_factor(Collective::kAllReduce, 1), 0.0);
}

TEST(Collectives, BusBandwidthOfALatencyFreeRingIsTheLinkBandwidth) {
  // The point of busbw: size / time * factor recovers beta for every k.
  const AlphaBeta link{Seconds(0), gigabytes_per_second(80)};
  for (int k : {2, 3, 8, 64}) {
    for (Collective c : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
                         Collective::kAllToAll}) {
      const Seconds t = flat_collective_time(c, k, kGigabyte, link);
      const BytesPerSecond algbw(kGigabyte.value() / t.value());
      EXPECT_NEAR(bus_bandwidth(c, k, algbw).value(), 80e9, 80e9 * 1e-12)
          << collective_name(c) << " k=" << k;
    }
  }
}

TEST(Collectives, AlgorithmBandwidthInvertsBusBandwidth) {
  const BytesPerSecond busbw = gigabytes_per_second(460);
  EXPECT_DOUBLE_EQ(algorithm_bandwidth(Collective::kAllReduce, 8, busbw).value(), 460e9 / 1.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth(Collective::kAllGather, 5,
                                 algorithm_bandwidth(Collective::kAllGather, 5, busbw))
                       .value(),
                   460e9);
}

TEST(Collectives, Names) {
  EXPECT_STREQ(collective_name(Collective::kAllReduce), "all-reduce");
  EXPECT_STREQ(collective_name(Collective::kReduceScatter), "reduce-scatter");
  EXPECT_STREQ(collective_name(Collective::kAllGather), "all-gather");
  EXPECT_STREQ(collective_name(Collective::kAllToAll), "all-to-all");
}

}  // namespace
}  // namespace motley
