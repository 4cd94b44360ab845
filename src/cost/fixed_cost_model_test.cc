#include "motley/cost/fixed_cost_model.h"

#include <gtest/gtest.h>

#include <limits>

namespace motley {
namespace {

constexpr LinkSpec kIntra{LinkKind::kNvlink, BytesPerSecond(4e9), Seconds(0.5)};
constexpr LinkSpec kInter{LinkKind::kInfiniband, BytesPerSecond(1e9), Seconds(2)};

FixedCostSpec two_layer_spec() {
  FixedCostSpec spec;
  FixedLayer a;
  a.times = {Seconds(1), Seconds(2), Seconds(3), Seconds(0.5)};
  a.boundary = Bytes(100);
  a.weights = Bytes(40);
  a.gradients = Bytes(80);
  a.optimizer_state = Bytes(120);
  a.activations = {Bytes(1000), Bytes(600), Bytes(200)};
  FixedLayer b = a;
  b.times = {Seconds(10), Seconds(20), Seconds(30), Seconds(5)};
  b.boundary = Bytes(300);
  spec.layers = {a, b};
  return spec;
}

TEST(FixedCostModel, SumsLayerTimesAndAddsRecomputeOnlyUnderAPolicy) {
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 2, kIntra, kInter), two_layer_spec());
  const ComputeTimes t = cost.compute({0, 2}, DeviceGroup{{0}}, RecomputePolicy::kNone);
  EXPECT_EQ(t.forward, Seconds(11));
  EXPECT_EQ(t.backward_input, Seconds(22));
  EXPECT_EQ(t.backward_weight, Seconds(33));
  EXPECT_EQ(t.recompute, Seconds(0));
  EXPECT_EQ(cost.compute({1, 2}, DeviceGroup{{1}}, RecomputePolicy::kFull).recompute, Seconds(5));
  // The TP degree does not scale the given times.
  EXPECT_EQ(cost.compute({0, 1}, DeviceGroup{{0, 1}}, RecomputePolicy::kSelective).forward,
            Seconds(1));
}

TEST(FixedCostModel, PerDeviceTypeTimesReplaceTheDefault) {
  FixedCostSpec spec = two_layer_spec();
  spec.device_times.push_back(
      {"A100-80GB",
       {FixedLayerTimes{Seconds(7), Seconds(8), Seconds(9), Seconds(1)},
        FixedLayerTimes{Seconds(70), Seconds(80), Seconds(90), Seconds(10)}}});
  // Device 0 is an H100 (node 0), device 1 an A100 (node 1).
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM", "A100-80GB"}, 1, kIntra, kInter), spec);
  EXPECT_EQ(cost.compute({0, 2}, DeviceGroup{{0}}, RecomputePolicy::kNone).forward, Seconds(11));
  EXPECT_EQ(cost.compute({0, 2}, DeviceGroup{{1}}, RecomputePolicy::kNone).forward, Seconds(77));
  EXPECT_EQ(cost.compute({1, 2}, DeviceGroup{{1}}, RecomputePolicy::kFull).recompute, Seconds(10));
}

TEST(FixedCostModel, StageMemorySplitsAcrossTensorParallelAndZero1) {
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 2, kIntra, kInter), two_layer_spec());
  MemoryOptions options;
  options.recompute = RecomputePolicy::kSelective;
  options.in_flight_micro_batches = 3;
  StageMemory m = cost.stage_memory({0, 2}, DeviceGroup{{0}}, options);
  EXPECT_EQ(m.weights, Bytes(80));
  EXPECT_EQ(m.gradients, Bytes(160));
  EXPECT_EQ(m.optimizer_state, Bytes(240));
  EXPECT_EQ(m.activations_per_micro_batch, Bytes(1200));
  EXPECT_EQ(m.activations, Bytes(3600));
  EXPECT_EQ(m.total(), Bytes(80 + 160 + 240 + 3600));

  options.zero_stage = 1;
  options.data_parallel = 4;
  options.recompute = RecomputePolicy::kFull;
  m = cost.stage_memory({0, 2}, DeviceGroup{{0, 1}}, options);
  EXPECT_EQ(m.weights, Bytes(40));
  EXPECT_EQ(m.gradients, Bytes(80));
  EXPECT_EQ(m.optimizer_state, Bytes(30));  // 240 / (2 * 4)
  EXPECT_EQ(m.activations_per_micro_batch, Bytes(200));
  // ZeRO-2 also shards the gradients, ZeRO-3 the weights too.
  options.zero_stage = 2;
  m = cost.stage_memory({0, 2}, DeviceGroup{{0, 1}}, options);
  EXPECT_EQ(m.weights, Bytes(40));
  EXPECT_EQ(m.gradients, Bytes(20));
  EXPECT_EQ(m.optimizer_state, Bytes(30));
  options.zero_stage = 3;
  m = cost.stage_memory({0, 2}, DeviceGroup{{0, 1}}, options);
  EXPECT_EQ(m.weights, Bytes(10));
  EXPECT_EQ(m.gradients, Bytes(20));
  EXPECT_EQ(m.optimizer_state, Bytes(30));
}

TEST(FixedCostModel, TransfersArePricedOnTheClustersPaths) {
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM", "H100-SXM"}, 2, kIntra, kInter),
                            two_layer_spec());
  EXPECT_EQ(cost.boundary_bytes(1), Bytes(300));
  EXPECT_EQ(cost.p2p_time(0, 0, Bytes(1e9)), Seconds(0));
  // Same node: latency 0.5 + 2e9 / 4e9.
  EXPECT_DOUBLE_EQ(cost.p2p_time(0, 1, Bytes(2e9)).value(), 1.0);
  // Across nodes: exactly the inter link, 2 + 3e9 / 1e9.
  EXPECT_DOUBLE_EQ(cost.p2p_time(1, 2, Bytes(3e9)).value(), 5.0);
  EXPECT_EQ(cost.topology().path(1, 2).latency, Seconds(2));
  EXPECT_EQ(cost.topology().path(1, 2).links.size(), 2u);
}

TEST(FixedCostModel, CollectivesRunOneRingOnTheSlowestPath) {
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM", "H100-SXM"}, 2, kIntra, kInter),
                            two_layer_spec());
  // Ring 0-1-2-3: the 1-2 and 3-0 hops cross nodes: alpha 2, beta 1e9.
  // All-reduce: 2(k-1) alpha + 2(k-1)/k n / beta = 12 + 1.5 * 4e9 / 1e9.
  EXPECT_DOUBLE_EQ(cost.collective_time(Collective::kAllReduce, {3, 1, 0, 2}, Bytes(4e9),
                                        CollectiveAlgorithm::kAuto)
                       .value(),
                   18.0);
  // Inside a node: 2 * 0.5 + 1 * 4e9 / 4e9.
  EXPECT_DOUBLE_EQ(
      cost.collective_time(Collective::kAllReduce, {0, 1}, Bytes(4e9), CollectiveAlgorithm::kRing)
          .value(),
      2.0);
  EXPECT_EQ(
      cost.collective_time(Collective::kAllReduce, {2}, Bytes(4e9), CollectiveAlgorithm::kRing),
      Seconds(0));
}

TEST(FixedCostModel, ValidateNamesTheSourceAndField) {
  FixedCostSpec spec = two_layer_spec();
  spec.layers[1].times.backward_weight = Seconds(-1);
  Status s = FixedCostModel::validate(spec, "whatif");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "whatif: field 'layers[1].times.backward_weight': expected a finite non-negative "
            "time in seconds, got -1");

  spec = two_layer_spec();
  spec.layers[0].activations[2] = Bytes(std::numeric_limits<double>::quiet_NaN());
  s = FixedCostModel::validate(spec, "whatif");
  EXPECT_NE(s.message().find("field 'layers[0].activations[2]'"), std::string::npos) << s.message();

  spec = two_layer_spec();
  spec.device_times.push_back({"A100-80GB", {FixedLayerTimes{}}});
  s = FixedCostModel::validate(spec, "whatif");
  EXPECT_EQ(s.message(),
            "whatif: field 'device_times[0].times': expected one entry per layer (2), got 1");

  spec = two_layer_spec();
  spec.device_times.push_back({"a100", {FixedLayerTimes{}, FixedLayerTimes{}}});
  s = FixedCostModel::validate(spec, "whatif");
  EXPECT_EQ(s.message(),
            "whatif: field 'device_times[0].name': expected a canonical device type name, got "
            "'a100' (write 'A100-80GB')");

  EXPECT_EQ(FixedCostModel::validate(FixedCostSpec{}, "whatif").message(),
            "whatif: field 'layers': expected at least one layer, got none");
  EXPECT_TRUE(FixedCostModel::validate(two_layer_spec(), "whatif").is_ok());
}

}  // namespace
}  // namespace motley
