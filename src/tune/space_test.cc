// The search space before simulation: the layouts enumerated for small clusters (exact counts
// and members), candidates built from them (partitions, micro-batch counts per replica), and
// the cheap estimate in a closed-form case.
#include "space.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tune_test_util.h"

namespace motley::tune_internal::tune_testing {
namespace {

using Groups = std::vector<std::vector<int>>;
using Replicas = std::vector<Groups>;

std::vector<std::string> descriptions(const std::vector<Layout>& layouts) {
  std::vector<std::string> out;
  for (const Layout& l : layouts) out.push_back(l.description);
  return out;
}

TEST(SpaceTest, TypeGroupsAreConsecutiveDevicesOfOneNode) {
  Fixture fx(8, {"H100-SXM", "H100-SXM"}, 4, 16, uniform_spec(8));
  const TypeInfo& h100 = fx.ctx->types()[0];
  EXPECT_EQ(type_groups(h100, 1), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(type_groups(h100, 2), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(type_groups(h100, 4), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(SpaceTest, ClusterOrderIsMegatronsLayout) {
  Fixture fx(8, {"H100-SXM", "H100-SXM"}, 4, 16, uniform_spec(8));
  Result<Layout> l = cluster_order_layout(*fx.ctx, 2, 2, 2);
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(l->replicas, (Replicas{{{0, 1}, {2, 3}}, {{4, 5}, {6, 7}}}));
  EXPECT_EQ(l->description, "TP 2 x PP 2 x DP 2, devices in cluster order");
  l = cluster_order_layout(*fx.ctx, 4, 1, 4);
  ASSERT_FALSE(l.is_ok());
  EXPECT_EQ(l.status().message(), "layout: 4 x 1 x 4 devices exceed the cluster's 8");
  Fixture pairs(8, {"H100-SXM", "H100-SXM"}, 2, 16, uniform_spec(8));
  l = cluster_order_layout(*pairs.ctx, 4, 1, 1);
  ASSERT_FALSE(l.is_ok());
  EXPECT_EQ(l.status().message(), "layout: devices 0-3 span nodes or device types");
}

TEST(SpaceTest, MixedLayoutsOfOneNodeAreEveryTpDegreeTimesEveryReplicaCount) {
  // Four H100s, TP 1, 2 or 4 (the tiny model's 4 heads allow them all), and every replica
  // count dividing the groups.
  Fixture fx(8, {"H100-SXM"}, 4, 16, uniform_spec(8));
  const std::vector<Layout> layouts = mixed_layouts(*fx.ctx);
  EXPECT_EQ(descriptions(layouts),
            (std::vector<std::string>{"DP 1 x [H100-SXM x4 TP1]", "DP 2 x [H100-SXM x2 TP1]",
                                      "DP 4 x [H100-SXM x1 TP1]", "DP 1 x [H100-SXM x2 TP2]",
                                      "DP 2 x [H100-SXM x1 TP2]", "DP 1 x [H100-SXM x1 TP4]"}));
  EXPECT_EQ(layouts[1].replicas, (Replicas{{{0}, {1}}, {{2}, {3}}}));
  EXPECT_EQ(layouts[3].replicas, (Replicas{{{0, 1}, {2, 3}}}));
  // A pipeline never has more stages than the model has layers: with two layers the
  // four-stage pipeline is gone.
  Fixture short_model(2, {"H100-SXM"}, 4, 16, uniform_spec(2));
  EXPECT_EQ(mixed_layouts(*short_model.ctx).size(), 5u);
}

TEST(SpaceTest, MixedLayoutsOfTwoTypesCoverSubsetsTpCombinationsAndOrders) {
  // Two H100s and two A100s, one node each: H100 alone (TP1 x DP 1 or 2, TP2) and A100 alone
  // (the same, 3 + 3), and both: TP (1,1) with DP 1 or 2 and (1,2), (2,1), (2,2) with DP 1,
  // each in both type orders (2 x 2 + 2 + 2 + 2 = 10).
  Fixture fx(8, {"H100-SXM", "A100-80GB"}, 2, 16, two_speeds(8));
  const std::vector<Layout> layouts = mixed_layouts(*fx.ctx);
  EXPECT_EQ(layouts.size(), 16u);
  int both = 0;
  for (const Layout& l : layouts) {
    if (l.description.find('|') != std::string::npos) ++both;
  }
  EXPECT_EQ(both, 10);
  // Two replicas, each an H100 stage then an A100 stage.
  auto it = std::find_if(layouts.begin(), layouts.end(), [](const Layout& l) {
    return l.description == "DP 2 x [H100-SXM x1 TP1 | A100-80GB x1 TP1]";
  });
  ASSERT_NE(it, layouts.end());
  EXPECT_EQ(it->replicas, (Replicas{{{0}, {2}}, {{1}, {3}}}));
  it = std::find_if(layouts.begin(), layouts.end(), [](const Layout& l) {
    return l.description == "DP 1 x [A100-80GB x2 TP1 | H100-SXM x1 TP2]";
  });
  ASSERT_NE(it, layouts.end());
  EXPECT_EQ(it->replicas, (Replicas{{{2}, {3}, {0, 1}}}));
}

TEST(SpaceTest, ReplicasAcrossNodesComeBothWays) {
  // One type over two nodes: with d > 1 replicas, each replica either keeps to a node
  // (contiguous groups) or takes every d-th group (its all-reduces stay inside a node).
  Fixture fx(8, {"H100-SXM", "H100-SXM"}, 2, 16, uniform_spec(8));
  const std::vector<Layout> layouts = mixed_layouts(*fx.ctx);
  EXPECT_EQ(
      descriptions(layouts),
      (std::vector<std::string>{"DP 1 x [H100-SXM x4 TP1]", "DP 2 x [H100-SXM x2 TP1]",
                                "DP 2 x [H100-SXM x2 TP1], replicas interleaved across nodes",
                                "DP 4 x [H100-SXM x1 TP1]",
                                "DP 4 x [H100-SXM x1 TP1], replicas interleaved across nodes",
                                "DP 1 x [H100-SXM x2 TP2]", "DP 2 x [H100-SXM x1 TP2]",
                                "DP 2 x [H100-SXM x1 TP2], replicas interleaved across nodes"}));
  EXPECT_EQ(layouts[1].replicas, (Replicas{{{0}, {1}}, {{2}, {3}}}));
  EXPECT_EQ(layouts[2].replicas, (Replicas{{{0}, {2}}, {{1}, {3}}}));
}

TEST(SpaceTest, SeparateLayoutsGiveEachTypeItsOwnPipelines) {
  Fixture one(8, {"H100-SXM"}, 4, 16, uniform_spec(8));
  EXPECT_TRUE(separate_layouts(*one.ctx).empty());
  // Per type the three options of two devices (TP1 x PP2, TP1 x DP2, TP2), combined: 3 x 3.
  Fixture fx(8, {"H100-SXM", "A100-80GB"}, 2, 16, two_speeds(8));
  const std::vector<Layout> layouts = separate_layouts(*fx.ctx);
  ASSERT_EQ(layouts.size(), 9u);
  for (const Layout& l : layouts) {
    EXPECT_EQ(l.description, "separate pipelines per device type");
    int devices = 0;
    for (const Groups& replica : l.replicas) {
      for (const auto& g : replica) {
        devices += static_cast<int>(g.size());
        EXPECT_EQ(fx.ctx->type_of(g[0]), fx.ctx->type_of(replica[0][0]));
      }
    }
    EXPECT_EQ(devices, 4);
  }
}

TEST(SpaceTest, ReplicasOfDifferentSpeedGetProportionalMicroBatches) {
  // One H100 replica and one A100 replica of one stage each: 24 ms and 48 ms per micro-batch.
  // Sixteen micro-batches split 11 + 5 (264 ms and 240 ms; 10 + 6 would end at 288 ms).
  Fixture fx(8, {"H100-SXM", "A100-80GB"}, 2, 16, two_speeds(8));
  Layout layout;
  layout.replicas = {{{0}}, {{2}}};
  const ScheduleSpec spec = ScheduleSpec::named(ScheduleKind::k1f1b);
  Result<Candidate> c = build_candidate(*fx.ctx, layout, spec, 1, BuildOptions{});
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  ASSERT_EQ(c->replicas.size(), 2u);
  EXPECT_EQ(c->replicas[0].micro_batches, 11);
  EXPECT_EQ(c->replicas[1].micro_batches, 5);
  EXPECT_EQ(c->replicas[0].bounds, (std::vector<int>{0, 8}));
  EXPECT_NEAR(replica_estimate(*fx.ctx, c.value(), 1, 5), 5 * 48e-3, 1e-12);
  // Without proportional counts, or with replicas of one make, the counts are equal (the
  // remainder to the first replicas).
  BuildOptions equal;
  equal.proportional_micro_batches = false;
  c = build_candidate(*fx.ctx, layout, spec, 1, equal);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->replicas[0].micro_batches, 8);
  EXPECT_EQ(c->replicas[1].micro_batches, 8);
  Fixture three(8, {"H100-SXM"}, 3, 16, uniform_spec(8));
  layout.replicas = {{{0}}, {{1}}, {{2}}};
  c = build_candidate(*three.ctx, layout, spec, 1, BuildOptions{});
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->replicas[0].micro_batches, 6);
  EXPECT_EQ(c->replicas[1].micro_batches, 5);
  EXPECT_EQ(c->replicas[2].micro_batches, 5);
}

// build_candidate_into reuses what its candidate (or scratch) held and leaves nothing of it
// behind: each build equals a fresh one, whether the one before had more replicas, fewer, the
// same layout, or failed; and the estimates with the scratch's layout facts are the same.
TEST(SpaceTest, BuildingIntoAUsedCandidateEqualsBuildingAfresh) {
  Fixture fx(8, {"H100-SXM", "A100-80GB"}, 4, 16, two_speeds(8));
  Layout four, two, deep;
  four.replicas = {{{0}}, {{1}}, {{4}}, {{5}}};
  two.replicas = {{{0, 1}}, {{4, 5}}};
  deep.replicas = {{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {0}}};  // nine stages: refused
  const ScheduleSpec linear = ScheduleSpec::named(ScheduleKind::k1f1b);
  const ScheduleSpec interleaved = ScheduleSpec::named(ScheduleKind::kInterleaved, 2);
  BuildOptions zero;
  zero.zero_stage = 1;
  Candidate used;
  BuildScratch scratch;
  struct Step {
    const Layout* layout;
    const ScheduleSpec* spec;
    int64_t b;
    BuildOptions options;
  };
  for (const Step& s : {Step{&four, &linear, 1, BuildOptions{}}, Step{&two, &interleaved, 1, zero},
                        Step{&deep, &linear, 1, BuildOptions{}}, Step{&four, &linear, 1, zero},
                        Step{&four, &interleaved, 1, BuildOptions{}}, Step{&four, &linear, 1, zero},
                        Step{&two, &linear, 1, BuildOptions{}}}) {
    const Result<Candidate> fresh = build_candidate(*fx.ctx, *s.layout, *s.spec, s.b, s.options);
    const Status into = build_candidate_into(*fx.ctx, *s.layout, *s.spec, s.b, s.options, used);
    const Status with_scratch =
        build_candidate_into(*fx.ctx, *s.layout, *s.spec, s.b, s.options, scratch);
    ASSERT_EQ(into.is_ok(), fresh.is_ok()) << into.message();
    ASSERT_EQ(with_scratch.is_ok(), fresh.is_ok()) << with_scratch.message();
    if (!fresh.is_ok()) {
      EXPECT_EQ(into.message(), fresh.status().message());
      EXPECT_EQ(with_scratch.message(), fresh.status().message());
      continue;
    }
    EXPECT_EQ(used, fresh.value());
    EXPECT_EQ(used.replicas.size(), s.layout->replicas.size());
    EXPECT_EQ(scratch.candidate, fresh.value());
    EXPECT_EQ(estimated_replicas(*fx.ctx, fresh.value()),
              estimated_replicas(*fx.ctx, scratch.candidate, &scratch.facts));
    EXPECT_EQ(estimate(*fx.ctx, fresh.value()),
              estimate(*fx.ctx, scratch.candidate, &scratch.facts));
    EXPECT_EQ(objective_estimate(*fx.ctx, fresh.value()),
              objective_estimate(*fx.ctx, scratch.candidate, &scratch.facts));
  }
}

TEST(SpaceTest, CandidatesThatDoNotFitTheShapeAreRefused) {
  Fixture fx(2, {"H100-SXM"}, 4, 16, uniform_spec(2));
  Layout four_stages;
  four_stages.replicas = {{{0}, {1}, {2}, {3}}};
  Result<Candidate> c = build_candidate(
      *fx.ctx, four_stages, ScheduleSpec::named(ScheduleKind::k1f1b), 1, BuildOptions{});
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().message(), "candidate: 4 stages for 2 layers");
  Fixture small_batch(8, {"H100-SXM"}, 4, 1, uniform_spec(8));
  Layout two;
  two.replicas = {{{0}}, {{1}}};
  c = build_candidate(*small_batch.ctx, two, ScheduleSpec::named(ScheduleKind::k1f1b), 1,
                      BuildOptions{});
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().message(), "candidate: 1 micro-batches for 2 replicas");
}

// A zigzag's stages share their group's memory: a layer holding more than a third of a device
// still goes on a zigzag of three chunks, alone in its stage, since the group's other stages
// hold little (the assembler checks the group as a whole).
TEST(SpaceTest, ALayerLargerThanAStagesShareOfItsGroupStillFitsAZigzag) {
  FixedCostSpec spec = uniform_spec(8);
  spec.layers[3].weights = Bytes(40e9);  // an 80 GB device: more than its third
  Fixture fx(8, {"H100-SXM"}, 2, 16, spec);
  Layout two;
  two.replicas = {{{0}, {1}}};
  const ScheduleSpec zigzag = ScheduleSpec::adaptive_on(
      StageShape::kV, 3, AdaptivePriority::kAlternate, WeightFill::kAlways);
  Result<Candidate> c = build_candidate(*fx.ctx, two, zigzag, 1, BuildOptions{});
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  const std::vector<int>& bounds = c->replicas[0].bounds;
  ASSERT_EQ(bounds.size(), 7u);
  const auto big = std::upper_bound(bounds.begin(), bounds.end(), 3) - 1;
  EXPECT_EQ(*big, 3);
  EXPECT_EQ(*(big + 1), 4);
}

TEST(SpaceTest, CountedPartitionsTakeTheirRuleAndOneRecompute) {
  Fixture fx(8, {"H100-SXM"}, 4, 16, uniform_spec(8));
  Layout layout;
  layout.replicas = {{{0}, {1}, {2}}};
  BuildOptions megatron;
  megatron.split = LayerSplit::kMegatron;
  megatron.uniform_recompute = RecomputePolicy::kSelective;
  Result<Candidate> c =
      build_candidate(*fx.ctx, layout, ScheduleSpec::named(ScheduleKind::k1f1b), 1, megatron);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->replicas[0].bounds, split_bounds(LayerSplit::kMegatron, fx.model, 3));
  EXPECT_EQ(c->replicas[0].recompute, std::vector<RecomputePolicy>(3, RecomputePolicy::kSelective));
}

TEST(SpaceTest, SplitMicroBatchesEvensOutTheReplicasTimes) {
  // Times m and 2m: nine micro-batches split 6 + 3, both finishing at 6.
  EXPECT_EQ(split_micro_batches({1, 2}, {0, 0}, 9), (std::vector<int64_t>{6, 3}));
  // Every replica gets at least one, whatever its speed.
  EXPECT_EQ(split_micro_batches({1, 100}, {0, 0}, 5), (std::vector<int64_t>{4, 1}));
  // Equal replicas: the earlier one first on ties.
  EXPECT_EQ(split_micro_batches({1, 1, 1}, {0, 0, 0}, 7), (std::vector<int64_t>{3, 2, 2}));
}

TEST(SpaceTest, EstimateOfOneF1BIsMetisFormula) {
  // Two H100 stages of 3 and 5 layers (9 ms and 15 ms per micro-batch), free transfers, no
  // state to update: 1F1B leaves all of the other group's time as bubble, so four
  // micro-batches take (m - 1) max + sum = 3 x 15 + 24 = 69 ms.
  Fixture fx(8, {"H100-SXM"}, 2, 4, two_speeds(8));
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  c.replicas = {PipelineSpec{{{0}, {1}}, {0, 3, 8}, std::vector<RecomputePolicy>(2), 4}};
  EXPECT_NEAR(replica_estimate(*fx.ctx, c, 0, 4), 69e-3, 1e-12);
  EXPECT_NEAR(estimate(*fx.ctx, c), 69e-3, 1e-12);
  // ZB-H1 leaves max(f + b - w, f, b) / (f + b + w) = 1/3 of it: 60 + 9 / 3 = 63 ms.
  c.schedule = ScheduleSpec::named(ScheduleKind::kZbH1);
  EXPECT_NEAR(estimate(*fx.ctx, c), 63e-3, 1e-12);
}

TEST(SpaceTest, ZeroRingsPricedOnceServeEveryReplica) {
  // Four ZeRO-2 replicas of two groups over two nodes, with three different splits: a cache
  // shared across their stages gives each pass exactly what pricing it alone gives.
  TuneOptions o;
  o.global_batch = 16;
  o.zero_stage = 2;
  // Links of 1 ms latency, so that the reduce-scatters outlast the tiny layers' passes.
  Fixture fx(tiny_model(8), fixed_cluster({"H100-SXM", "H100-SXM"}, 4, milliseconds(1)), o);
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  c.zero_stage = 2;
  const std::vector<std::vector<int>> bounds = {{0, 3, 8}, {0, 4, 8}, {0, 3, 8}, {0, 6, 8}};
  for (int r = 0; r < 4; ++r) {
    c.replicas.push_back(PipelineSpec{{{2 * r}, {2 * r + 1}},
                                      bounds[static_cast<size_t>(r)],
                                      std::vector<RecomputePolicy>(2),
                                      4});
  }
  const CostModel& cost = fx.ctx->cost(1, false, 1);
  PassOverheadCache shared;
  double total = 0;
  for (int r = 0; r < 4; ++r) {
    for (size_t s = 0; s < 2; ++s) {
      const PipelineSpec& rep = c.replicas[static_cast<size_t>(r)];
      const ComputeTimes t = cost.compute(LayerRange{rep.bounds[s], rep.bounds[s + 1]},
                                          DeviceGroup{rep.groups[s]}, RecomputePolicy::kNone);
      const PassOverhead alone = pass_overhead(*fx.ctx, cost, c, r, s, t);
      const PassOverhead cached = pass_overhead(*fx.ctx, cost, c, r, s, t, &shared);
      EXPECT_EQ(cached.forward, alone.forward);
      EXPECT_EQ(cached.backward, alone.backward);
      EXPECT_EQ(cached.weight, alone.weight);
      total += alone.total();
    }
  }
  EXPECT_GT(total, 0);
  EXPECT_EQ(shared.zero_sync.size(), 6u);  // three distinct splits of two groups each
  EXPECT_EQ(replica_estimate(*fx.ctx, c, 3, 4, &shared), replica_estimate(*fx.ctx, c, 3, 4));
}

TEST(SpaceTest, TheEstimatePricesTheFirstReplicaOrGroupOfReplicasOfEachMake) {
  Fixture fx(8, {"H100-SXM", "A100-80GB"}, 2, 16, two_speeds(8));
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  const std::vector<RecomputePolicy> none(1);
  // Two H100 replicas alike, an A100 one, and an H100 one with another micro-batch count.
  c.replicas = {PipelineSpec{{{0}}, {0, 8}, none, 4}, PipelineSpec{{{1}}, {0, 8}, none, 4},
                PipelineSpec{{{2}}, {0, 8}, none, 4}, PipelineSpec{{{0}}, {0, 8}, none, 3}};
  EXPECT_EQ(estimated_replicas(*fx.ctx, c), (std::vector<size_t>{0, 2, 3}));
  c.replicas[1].recompute = {RecomputePolicy::kFull};
  EXPECT_EQ(estimated_replicas(*fx.ctx, c), (std::vector<size_t>{0, 1, 2, 3}));
  // Expert parallelism prices each replica with its own group of replicas, here the pairs
  // {0, 1} and {2, 3}: every replica of the first pair of each make.
  c.replicas[1].recompute = none;
  c.expert_parallel = 2;
  EXPECT_EQ(estimated_replicas(*fx.ctx, c), (std::vector<size_t>{0, 1, 2, 3}));
  c.replicas[2] = PipelineSpec{{{1}}, {0, 8}, none, 4};
  c.replicas[3] = PipelineSpec{{{0}}, {0, 8}, none, 4};
  EXPECT_EQ(estimated_replicas(*fx.ctx, c), (std::vector<size_t>{0, 1}));
  // A pair's make is its replicas' in order.
  c.replicas[3].micro_batches = 3;
  EXPECT_EQ(estimated_replicas(*fx.ctx, c), (std::vector<size_t>{0, 1, 2, 3}));
  c.replicas[1].micro_batches = 3;
  c.replicas[3].micro_batches = 4;
  c.replicas[2].micro_batches = 3;
  EXPECT_EQ(estimated_replicas(*fx.ctx, c), (std::vector<size_t>{0, 1, 2, 3}));
  // Context parallelism likewise, and both together by their common period (here 4).
  c.replicas[2].micro_batches = 4;
  c.replicas[3].micro_batches = 3;
  c.expert_parallel = 1;
  c.context_parallel = 2;
  EXPECT_EQ(estimated_replicas(*fx.ctx, c), (std::vector<size_t>{0, 1}));
  c.expert_parallel = 4;
  EXPECT_EQ(estimated_replicas(*fx.ctx, c), (std::vector<size_t>{0, 1, 2, 3}));
}

TEST(SpaceTest, DescribeLayoutCountsReplicasOfOneMake) {
  Fixture fx(8, {"H100-SXM", "A100-80GB"}, 2, 16, two_speeds(8));
  std::vector<PipelineSpec> replicas = {
      PipelineSpec{{{0}, {2}}, {0, 4, 8}, std::vector<RecomputePolicy>(2), 8},
      PipelineSpec{{{1}, {3}}, {0, 4, 8}, std::vector<RecomputePolicy>(2), 8}};
  EXPECT_EQ(describe_layout(*fx.ctx, replicas), "2 x [H100-SXM x1 TP1 | A100-80GB x1 TP1]");
  replicas = {PipelineSpec{{{0, 1}}, {0, 8}, std::vector<RecomputePolicy>(1), 11},
              PipelineSpec{{{2}, {3}}, {0, 4, 8}, std::vector<RecomputePolicy>(2), 5}};
  EXPECT_EQ(describe_layout(*fx.ctx, replicas), "1 x [H100-SXM x1 TP2] + 1 x [A100-80GB x2 TP1]");
}

}  // namespace
}  // namespace motley::tune_internal::tune_testing
