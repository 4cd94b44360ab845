#include "motley/tune/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tune_test_util.h"

namespace motley::tune_internal::tune_testing {
namespace {

constexpr double kBig = 1e15;  // bytes: a budget that never binds

PartitionRequest request(int layers, const std::vector<int>& devices) {
  PartitionRequest r;
  r.num_layers = layers;
  for (int d : devices) {
    r.stage_groups.push_back(DeviceGroup{{d}});
    r.memory_budget.push_back(Bytes(kBig));
    r.in_flight.push_back(1);
  }
  return r;
}

TEST(BalancedPartitionTest, HeavyLastLayerGetsItsOwnStage) {
  // Forward times 1, 1, 1, 1, 1, 4 ms on three stages: the bottleneck is the 4 ms layer alone,
  // and every earlier stage takes as much as fits under it.
  FixedCostSpec spec;
  for (double f : {1, 1, 1, 1, 1, 4}) spec.layers.push_back(layer_ms(f, 0, 0));
  FixedCostModel cost(fixed_cluster({"H100-SXM"}, 4), spec);
  Result<Partition> p = balanced_partition(request(6, {0, 1, 2}), cost);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->bounds, (std::vector<int>{0, 4, 5, 6}));
  EXPECT_EQ(p->recompute, std::vector<RecomputePolicy>(3, RecomputePolicy::kNone));
  EXPECT_DOUBLE_EQ(p->bottleneck.value(), 4e-3);
}

TEST(BalancedPartitionTest, AFusedBackwardIsBalancedAtItsOwnTime) {
  // Six layers of F = B = W = 1 ms; a fused backward of the last four takes 0.5 ms instead of
  // 2 (a measured profile's backward_s). Split, every layer costs 3 ms and three go to each of
  // two stages; fused, the last four cost 1.5 ms each and the first two balance them.
  FixedCostSpec spec;
  for (int l = 0; l < 6; ++l) {
    FixedLayer layer = layer_ms(1, 1, 1);
    if (l >= 2) layer.times.fused_backward_saving = Seconds(1.5e-3);
    spec.layers.push_back(layer);
  }
  FixedCostModel cost(fixed_cluster({"H100-SXM"}, 2), spec);
  PartitionRequest req = request(6, {0, 1});
  Result<Partition> split = balanced_partition(req, cost);
  ASSERT_TRUE(split.is_ok()) << split.status().message();
  EXPECT_EQ(split->bounds, (std::vector<int>{0, 3, 6}));
  EXPECT_DOUBLE_EQ(split->bottleneck.value(), 9e-3);
  req.fused_backward = true;
  Result<Partition> fused = balanced_partition(req, cost);
  ASSERT_TRUE(fused.is_ok()) << fused.status().message();
  EXPECT_EQ(fused->bounds, (std::vector<int>{0, 2, 6}));
  EXPECT_NEAR(fused->bottleneck.value(), 6e-3, 1e-12);
}

TEST(BalancedPartitionTest, SlowerDeviceGetsFewerLayers) {
  // Six 1 ms layers (F + B + W = 0.5 + 0.3 + 0.2) on an H100 then an A100 that is twice as slow:
  // k layers on the H100 cost k ms, the rest 2(6 - k) ms, balanced at k = 4.
  FixedCostSpec spec;
  for (int i = 0; i < 6; ++i) spec.layers.push_back(layer_ms(0.5, 0.3, 0.2));
  spec = slower_on(std::move(spec), "A100-80GB", 2);
  FixedCostModel cost(fixed_cluster({"H100-SXM", "A100-80GB"}, 1), spec);
  Result<Partition> p = balanced_partition(request(6, {0, 1}), cost);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->bounds, (std::vector<int>{0, 4, 6}));
  EXPECT_NEAR(p->bottleneck.value(), 4e-3, 1e-15);
  // The other order: the A100 first takes two layers (4 ms), the H100 four.
  p = balanced_partition(request(6, {1, 0}), cost);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->bounds, (std::vector<int>{0, 2, 6}));
}

// Four layers of 1 ms forward each, with 1 ms of recompute and 10 GB of activations per
// micro-batch without recompute, 1 GB with full recompute.
FixedCostSpec memory_spec() {
  FixedCostSpec spec;
  for (int i = 0; i < 4; ++i) {
    FixedLayer l = layer_ms(1, 0, 0);
    l.times.recompute = milliseconds(1);
    l.activations = {Bytes(10e9), Bytes(10e9), Bytes(1e9)};
    spec.layers.push_back(l);
  }
  return spec;
}

TEST(BalancedPartitionTest, AvoidsRecomputeWhenAnotherSplitIsFaster) {
  // Stage 0 holds 2 micro-batches in 25 GB: one layer without recompute (20 GB) or two with
  // full recompute (4 GB, 4 ms). Stage 1 has room: 1 + 3 layers (bottleneck 3 ms) beats 2 + 2
  // with recompute on stage 0 (4 ms).
  FixedCostModel cost(fixed_cluster({"H100-SXM"}, 2), memory_spec());
  PartitionRequest r = request(4, {0, 1});
  r.memory_budget = {Bytes(25e9), Bytes(kBig)};
  r.in_flight = {2, 1};
  Result<Partition> p = balanced_partition(r, cost);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->bounds, (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(p->recompute, std::vector<RecomputePolicy>(2, RecomputePolicy::kNone));
  EXPECT_DOUBLE_EQ(p->bottleneck.value(), 3e-3);
}

TEST(BalancedPartitionTest, RecomputesWhereMemoryIsShort) {
  // Now stage 1 holds at most two layers without recompute (25 GB, one micro-batch): 1 + 3 needs
  // full recompute on stage 1 (6 ms); 2 + 2 with full recompute on stage 0 costs 4 ms.
  FixedCostModel cost(fixed_cluster({"H100-SXM"}, 2), memory_spec());
  PartitionRequest r = request(4, {0, 1});
  r.memory_budget = {Bytes(25e9), Bytes(25e9)};
  r.in_flight = {2, 1};
  Result<Partition> p = balanced_partition(r, cost);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->bounds, (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(p->recompute,
            (std::vector<RecomputePolicy>{RecomputePolicy::kFull, RecomputePolicy::kNone}));
  EXPECT_DOUBLE_EQ(p->bottleneck.value(), 4e-3);
  // Without recompute allowed it cannot fit at all.
  r.policies = {RecomputePolicy::kNone};
  p = balanced_partition(r, cost);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInfeasible);
  EXPECT_EQ(p.status().message(),
            "partition: no partition of 4 layers over 2 stages fits memory: stage 1 (devices 1, "
            "budget 23.283064 GiB) cannot take the layers left to it");
}

TEST(BalancedPartitionTest, BalancesGroupTotalsOfAVShape) {
  // Sixteen 3 ms layers, the last 6 ms, on a V over two devices: device 0 runs stages 0 and 3,
  // device 1 stages 1 and 2. Balancing each stage alone leaves 5, 5, 5, 1 layers (30 ms on
  // device 1); balancing the devices' totals reaches 27 ms, the best integer split of 51 ms.
  FixedCostSpec spec;
  for (int i = 0; i < 16; ++i) spec.layers.push_back(layer_ms(i == 15 ? 6 : 3, 0, 0));
  FixedCostModel cost(fixed_cluster({"H100-SXM"}, 2), spec);
  PartitionRequest r = request(16, {0, 1, 1, 0});
  Result<Partition> alone = balanced_partition(r, cost);
  ASSERT_TRUE(alone.is_ok());
  EXPECT_EQ(alone->bounds, (std::vector<int>{0, 5, 10, 15, 16}));
  r.stage_owner = {0, 1, 1, 0};
  Result<Partition> p = balanced_partition(r, cost);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_NEAR(p->bottleneck.value(), 27e-3, 1e-12);
  const std::vector<int>& b = p->bounds;
  const int device0 = 3 * (b[1] - b[0]) + 3 * (b[4] - b[3]) + 3;  // the last layer costs 6
  const int device1 = 3 * (b[3] - b[1]);
  EXPECT_EQ(device0 + device1, 51);
  EXPECT_LE(std::max(device0, device1), 27) << b[1] << " " << b[2] << " " << b[3];
}

// A zigzag of six chunks over four devices (24 stages), 57 layers of 1 ms and a 12 ms head.
// Bisection alone fills the first stages up to the head's time and leaves the last ones a
// layer each, so the last device waits for 27 ms of forwards before its first stage; starting
// also from the stages closest to equal keeps the devices as balanced (18 ms each, the head's
// device taking small stages elsewhere) and that wait under one and a half mean stages per hop.
TEST(BalancedPartitionTest, ManyStagesPerGroupStayEven) {
  FixedCostSpec spec;
  for (int i = 0; i < 58; ++i) spec.layers.push_back(layer_ms(i == 57 ? 12 : 1, 0, 0));
  FixedCostModel cost(fixed_cluster({"H100-SXM"}, 4), spec);
  std::vector<int> owner;
  for (int s = 0; s < 24; ++s) owner.push_back((s / 4) % 2 == 0 ? s % 4 : 3 - s % 4);
  PartitionRequest r = request(58, owner);
  r.stage_owner = owner;
  Result<Partition> p = balanced_partition(r, cost);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_NEAR(p->bottleneck.value(), 18e-3, 1e-12);
  const double mean_stage_ms = 69.0 / 24;
  const int warm_up_ms = p->bounds[3];  // stages 0-2, all 1 ms layers
  EXPECT_LE(warm_up_ms, 3 * 1.5 * mean_stage_ms);
}

// Llama-3-70B's 80 decoder layers on a zigzag of three chunks over sixteen devices (48 stages),
// the embedding and the head spread over all stages (vocabulary parallelism), with per-layer
// times of a measured profile (F 5.60, B 6.84, W 4.37 ms) and a memory budget that holds two
// layers a stage without recompute (16 micro-batches in flight). Five layers on every device is
// possible (stages of 2, 2 and 1). Greedy filling leaves the middle stages one layer each, and
// moving one boundary at a time stops with three devices at six layers and three at four: their
// neighbours' stages are full, so a layer can reach a light device only through stages that hand
// one on each. Chain moves do that and reach the even split.
TEST(BalancedPartitionTest, ChainMovesEvenOutAZigzagOfManyGroups) {
  constexpr int kGroups = 16, kStages = 48, kLayers = 80;
  FixedCostSpec spec;
  FixedLayer embedding = layer_ms(4.3716, 2.0871, 0);
  embedding.weights = Bytes(18.9e9);
  spec.layers.push_back(embedding);
  for (int i = 0; i < kLayers; ++i) {
    FixedLayer l = layer_ms(5.5991, 6.8438, 4.366);
    l.times.recompute = milliseconds(5.5991);
    l.weights = Bytes(15.4e9);
    l.activations = {Bytes(183.9e6), Bytes(183.9e6), Bytes(67e6)};
    spec.layers.push_back(l);
  }
  FixedLayer head = layer_ms(11.4474, 18.6069, 7.4338);
  head.weights = Bytes(18.9e9);
  spec.layers.push_back(head);
  FixedCostModel cost(fixed_cluster({"H100-SXM"}, kGroups), spec);
  std::vector<int> owner;
  for (int s = 0; s < kStages; ++s) {
    owner.push_back((s / kGroups) % 2 == 0 ? s % kGroups : kGroups - 1 - s % kGroups);
  }
  PartitionRequest r = request(kLayers + 2, owner);
  r.stage_owner = owner;
  r.memory_budget.assign(kStages, Bytes(50.466e9));
  r.in_flight.assign(kStages, 16);
  r.policies = {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull};
  r.spread_embedding = true;
  r.spread_head = true;
  r.shard_time.assign(kStages, milliseconds(0.92));
  r.shard_memory.assign(kStages, Bytes(0.79e9));
  Result<Partition> p = balanced_partition(r, cost);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  std::vector<int> decoder_layers(kGroups, 0);
  for (int s = 0; s < kStages; ++s) {
    decoder_layers[owner[s]] += std::min(p->bounds[s + 1], kLayers + 1) - std::max(p->bounds[s], 1);
  }
  EXPECT_EQ(decoder_layers, std::vector<int>(kGroups, 5));
  EXPECT_EQ(p->recompute, std::vector<RecomputePolicy>(kStages, RecomputePolicy::kNone));
  EXPECT_NEAR(p->bottleneck.value(), 5 * 16.8089e-3 + 3 * 0.92e-3, 1e-9);
}

TEST(BalancedPartitionTest, RejectsMoreStagesThanLayers) {
  FixedCostSpec spec;
  spec.layers = {layer_ms(1, 1, 1), layer_ms(1, 1, 1)};
  FixedCostModel cost(fixed_cluster({"H100-SXM"}, 4), spec);
  Result<Partition> p = balanced_partition(request(2, {0, 1, 2}), cost);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.status().message(), "partition: 3 stages but only 2 layers");
}

}  // namespace
}  // namespace motley::tune_internal::tune_testing
