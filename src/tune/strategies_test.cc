// Each baseline's rule on a small case: what Megatron-LM's rule picks (and when it turns to
// recompute), and what the single-dimension baselines keep of megatron-1f1b's plan.
#include "strategies.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "../plan/test_plans.h"
#include "motley/model/presets.h"
#include "tune_test_util.h"

namespace motley::tune_internal::tune_testing {
namespace {

using Groups = std::vector<std::vector<int>>;

// Eight layers of 15 GB (no H100 holds them all), the last three times as slow; 4 H100s.
FixedCostSpec heavy_head() {
  FixedCostSpec spec;
  for (int i = 0; i < 8; ++i) {
    const double k = i == 7 ? 3 : 1;
    spec.layers.push_back(layer_ms(k, k, k, 15, 1));
  }
  return spec;
}

// A Searcher over `fx` with a budget it never reaches.
struct Search {
  explicit Search(const Fixture& fx)
      : evaluator(*fx.ctx, fx.ctx->now() + Seconds(3600)), searcher(*fx.ctx, evaluator, nullptr) {}
  Evaluator evaluator;
  Searcher searcher;
};

// tiny-llama on one node of eight H100s, eight micro-batches of one.
std::unique_ptr<Fixture> tiny_llama_on_h100x8() {
  Result<ModelSpec> model = model_preset("tiny-llama");
  Result<ClusterSpec> cluster = cluster_preset("h100x8");
  MOTLEY_CHECK(model.is_ok() && cluster.is_ok(), "the tiny-llama and h100x8 presets");
  TuneOptions options;
  options.global_batch = 8;
  options.micro_batch_size = 1;
  return std::make_unique<Fixture>(model.value(), cluster.value(), options);
}

std::vector<Groups> groups_of(const Candidate& c) {
  std::vector<Groups> out;
  for (const PipelineSpec& r : c.replicas) out.push_back(r.groups);
  return out;
}

// tiny-llama (embedding, 4 blocks, head) on two H100s with the head split: group 0 runs the
// embedding and one block, group 1 three blocks, and each half the head's rows (by speed).
Candidate head_split_over_two_groups() {
  Candidate c;
  c.schedule = ScheduleSpec::adaptive_on(StageShape::kLinear, 1, AdaptivePriority::kBackwardFirst,
                                         WeightFill::kIfItFits);
  c.replicas = {PipelineSpec{{{0}, {1}}, {0, 2, 6}, std::vector<RecomputePolicy>(2), 8}};
  c.vocab_parallel = true;
  return c;
}

// A split head whose shards follow the groups' speed leaves a pipeline as uneven as its layers;
// the local search moves the rows to the group with less other work, and the pipeline is faster.
TEST(StrategiesTest, TheHeadsRowsEvenOutTheGroupsLoad) {
  const std::unique_ptr<Fixture> tiny = tiny_llama_on_h100x8();
  const Fixture& fx = *tiny;
  Search s(fx);
  const Candidate c = head_split_over_two_groups();
  const Found start = s.searcher.given(c, "start");
  ASSERT_TRUE(start.ok) << start.why_not;
  const Found better = s.searcher.improve(start, kMoveVocab, 0);
  ASSERT_TRUE(better.ok) << better.why_not;
  ASSERT_EQ(better.candidate.head_shares.size(), 2u);
  EXPECT_GT(better.candidate.head_shares[0], better.candidate.head_shares[1]);
  EXPECT_LT(better.eval->iteration_time, start.eval->iteration_time);
  // Group 1's layers alone outweigh group 0's and the whole head: it keeps its one row.
  EXPECT_NEAR(better.candidate.head_shares[1], 1.0 / 256, 1e-12);
}

// A candidate with the head split over TP-2 groups builds into one that held four-device groups
// before exactly as it builds afresh (the vocabulary path of build_candidate_into; its shards'
// row granule comes from the layout, not from what the candidate held).
TEST(StrategiesTest, AHeadSplitCandidateBuildsAlikeIntoAUsedOne) {
  const std::unique_ptr<Fixture> tiny = tiny_llama_on_h100x8();
  const Fixture& fx = *tiny;
  const ScheduleSpec adaptive = ScheduleSpec::adaptive_on(
      StageShape::kLinear, 1, AdaptivePriority::kBackwardFirst, WeightFill::kIfItFits);
  BuildOptions split;
  split.vocab_parallel = true;
  Layout pairs, fours;
  pairs.replicas = {{{0, 1}, {2, 3}}};
  fours.replicas = {{{0, 1, 2, 3}, {4, 5, 6, 7}}};
  const Result<Candidate> fresh = build_candidate(*fx.ctx, pairs, adaptive, 1, split);
  ASSERT_TRUE(fresh.is_ok()) << fresh.status().message();
  Candidate used;
  ASSERT_TRUE(build_candidate_into(*fx.ctx, fours, adaptive, 1, split, used).is_ok());
  ASSERT_TRUE(build_candidate_into(*fx.ctx, pairs, adaptive, 1, split, used).is_ok());
  EXPECT_EQ(used, fresh.value());
}

// A head split over two TP-2 groups, one twice as slow, over a vocabulary of 8 rows: the plan
// splits the rows in multiples of 2 (6 and 2 by speed, where rows one at a time would give 5
// and 3), and the partition of the other layers is balanced on the shards' loads the plan will
// have: no other cut of the blocks gives a smaller busiest group (22 ms, blocks 1-6 on the
// H100s; balanced for 5 rows and 3 they would be blocks 1-9, and the H100 group 24.2 ms).
TEST(StrategiesTest, AHeadSplitOverTensorParallelGroupsIsBalancedOnTheRowsItWillHave) {
  FixedCostSpec spec;
  spec.layers.push_back(layer_ms(0.1, 0.05, 0.05));  // the embedding
  for (int i = 0; i < 12; ++i) spec.layers.push_back(layer_ms(0.5, 0.25, 0.25));
  spec.layers.push_back(layer_ms(10, 5, 5));  // the head
  Fixture fx(motley::testing::model_with_head(12, 8), fixed_cluster({"H100-SXM", "A100-80GB"}, 4),
             fixed_options(8, slower_on(std::move(spec), "A100-80GB", 2)));
  Layout pairs;
  pairs.replicas = {{{0, 1}, {4, 5}}};
  BuildOptions split;
  split.vocab_parallel = true;
  const ScheduleSpec adaptive = ScheduleSpec::adaptive_on(
      StageShape::kLinear, 1, AdaptivePriority::kBackwardFirst, WeightFill::kIfItFits);
  const Result<Candidate> built = build_candidate(*fx.ctx, pairs, adaptive, 1, split);
  ASSERT_TRUE(built.is_ok()) << built.status().message();
  auto busiest = [&](const Candidate& c) {
    double worst = 0;
    const std::vector<std::vector<GroupLoad>> loads = group_loads(*fx.ctx, c);
    for (const GroupLoad& g : loads[0]) worst = std::max(worst, g.total());
    return worst;
  };
  double best = std::numeric_limits<double>::infinity();
  const std::vector<int>& bounds = built->replicas[0].bounds;
  ASSERT_EQ(bounds.size(), 3u);
  for (int cut = 1; cut < bounds.back(); ++cut) {
    Candidate other = built.value();
    other.replicas[0].bounds[1] = cut;
    best = std::min(best, busiest(other));
  }
  EXPECT_DOUBLE_EQ(busiest(built.value()), best);
  EXPECT_LT(best, busiest([&] {
              Candidate c = built.value();
              c.replicas[0].bounds[1] = 10;  // balanced for 5 rows and 3
              return c;
            }()));
}

// The move offers the balanced shares and the step halfway to them from the shares by speed
// (half the rows each on two H100s), in case the schedule's answer to the moved work makes the
// whole step overshoot.
TEST(StrategiesTest, TheHeadsRowsMoveAlsoStopsHalfway) {
  const std::unique_ptr<Fixture> tiny = tiny_llama_on_h100x8();
  const Fixture& fx = *tiny;
  Search s(fx);
  const Candidate c = head_split_over_two_groups();
  const Found start = s.searcher.given(c, "start");
  ASSERT_TRUE(start.ok) << start.why_not;
  std::vector<std::vector<double>> shares;
  for (const Candidate& x : s.searcher.neighbors(c, *start.eval, kMoveVocab)) {
    if (!x.head_shares.empty()) shares.push_back(x.head_shares);
  }
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_NEAR(shares[1][0], 0.5 * (0.5 + shares[0][0]), 1e-12);
  EXPECT_NEAR(shares[1][1], 0.5 * (0.5 + shares[0][1]), 1e-12);
  EXPECT_NEAR(shares[1][0] + shares[1][1], 1.0, 1e-12);
  EXPECT_NEAR(shares[0][1], 1.0 / 256, 1e-12);
}

// Two 1F1B replicas of the whole model, on devices 0 and 1, running `micro_batches` each.
Candidate two_whole_model_replicas(int layers, int64_t micro_batches) {
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  c.replicas = {PipelineSpec{{{0}}, {0, layers}, {RecomputePolicy::kNone}, micro_batches},
                PipelineSpec{{{1}}, {0, layers}, {RecomputePolicy::kNone}, micro_batches}};
  return c;
}

// Short sequences split over two replicas expose the ring's every step: the local search's
// context move takes them whole again, each replica then running half the micro-batches.
TEST(StrategiesTest, TheContextMoveChangesTheDegreeAndKeepsTheBatch) {
  const std::unique_ptr<Fixture> tiny = tiny_llama_on_h100x8();
  const Fixture& fx = *tiny;
  ASSERT_FALSE(fx.ctx->context_degrees().empty());
  Search s(fx);
  Candidate c = two_whole_model_replicas(fx.ctx->num_layers(), 8);
  c.zero_stage = 1;
  c.context_parallel = 2;
  const Found start = s.searcher.given(c, "start");
  ASSERT_TRUE(start.ok) << start.why_not;
  const Found better = s.searcher.improve(start, kMoveContext, 0);
  ASSERT_TRUE(better.ok) << better.why_not;
  EXPECT_EQ(better.candidate.context_parallel, 1);
  EXPECT_EQ(better.candidate.replicas[0].micro_batches, 4);
  EXPECT_EQ(better.candidate.replicas[1].micro_batches, 4);
  EXPECT_LT(better.eval->iteration_time, start.eval->iteration_time);
}

// Context parallelism is started only where memory is short: two whole-model replicas with
// recompute get a neighbor splitting each sequence over both (the distributed optimizer on,
// each replica running all eight micro-batches' halves); without recompute, on devices far
// from full, none.
TEST(StrategiesTest, TheContextMoveStartsWhereMemoryIsShort) {
  const std::unique_ptr<Fixture> tiny = tiny_llama_on_h100x8();
  const Fixture& fx = *tiny;
  ASSERT_FALSE(fx.ctx->context_degrees().empty());
  Search s(fx);
  Candidate c = two_whole_model_replicas(fx.ctx->num_layers(), 4);
  auto context_neighbors = [&](const Candidate& from) {
    const Found f = s.searcher.given(from, "start");
    EXPECT_TRUE(f.ok) << f.why_not;
    std::vector<Candidate> out;
    for (const Candidate& x : s.searcher.neighbors(from, *f.eval, kMoveContext)) {
      if (x.context_parallel > 1) out.push_back(x);
    }
    return out;
  };
  EXPECT_TRUE(context_neighbors(c).empty());
  for (PipelineSpec& r : c.replicas) r.recompute = {RecomputePolicy::kSelective};
  const std::vector<Candidate> started = context_neighbors(c);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].context_parallel, 2);
  EXPECT_EQ(started[0].zero_stage, 1);
  EXPECT_EQ(started[0].replicas[0].micro_batches, 8);
  EXPECT_EQ(started[0].replicas[1].micro_batches, 8);
}

TEST(StrategiesTest, MegatronTakesTheSmallestTpAndPpThatFit) {
  // TP 1: one stage of 120 GB does not fit, two stages of 60 GB do: TP 1 x PP 2 x DP 2,
  // Megatron-LM's 4 + 4 layers, 8 micro-batches per replica. Two plans were tried.
  Fixture fx(8, {"H100-SXM"}, 4, 16, heavy_head());
  Search s(fx);
  const Found f = s.searcher.megatron(ScheduleSpec::named(ScheduleKind::k1f1b));
  ASSERT_TRUE(f.ok) << f.why_not;
  EXPECT_EQ(f.detail,
            "TP 1 x PP 2 x DP 2, 1f1b, Megatron-LM's layer split, devices in Megatron-LM's rank "
            "order, recompute none, 8 micro-batches of 1 per replica");
  // Megatron-LM's rank order: the two replicas' first stages on devices 0 and 1.
  EXPECT_EQ(groups_of(f.candidate), (std::vector<Groups>{{{0}, {2}}, {{1}, {3}}}));
  for (const PipelineSpec& r : f.candidate.replicas) {
    EXPECT_EQ(r.bounds, (std::vector<int>{0, 4, 8}));
    EXPECT_EQ(r.recompute, std::vector<RecomputePolicy>(2, RecomputePolicy::kNone));
    EXPECT_EQ(r.micro_batches, 8);
  }
  EXPECT_EQ(f.candidate.schedule.name(), "1f1b");
  EXPECT_EQ(f.simulated, 2);
  EXPECT_TRUE(f.eval->ok);
}

TEST(StrategiesTest, MegatronRecomputesAtFullTpWhenNothingElseFits) {
  // 400 GB of activations per layer without recompute never fit, even split four ways;
  // selective recompute keeps 10 GB: the rule turns to TP = the node's 4 GPUs with selective
  // recompute, on one stage.
  FixedCostSpec spec;
  for (int i = 0; i < 4; ++i) {
    FixedLayer l = layer_ms(1, 1, 1, 10, 0);
    l.times.recompute = milliseconds(1);
    l.activations = {Bytes(400e9), Bytes(10e9), Bytes(1e9)};
    spec.layers.push_back(l);
  }
  Fixture fx(4, {"H100-SXM"}, 4, 16, spec);
  Search s(fx);
  const Found f = s.searcher.megatron(ScheduleSpec::named(ScheduleKind::k1f1b));
  ASSERT_TRUE(f.ok) << f.why_not;
  EXPECT_EQ(f.detail,
            "TP 4 x PP 1 x DP 1, 1f1b, Megatron-LM's layer split, devices in Megatron-LM's rank "
            "order, recompute selective, 16 micro-batches of 1 per replica");
  EXPECT_EQ(groups_of(f.candidate), (std::vector<Groups>{{{0, 1, 2, 3}}}));
  // With no recompute allowed to help, it says what it tried.
  for (FixedLayer& l : spec.layers) l.activations = {Bytes(400e9), Bytes(400e9), Bytes(400e9)};
  Fixture none(4, {"H100-SXM"}, 4, 16, spec);
  Search t(none);
  const Found g = t.searcher.megatron(ScheduleSpec::named(ScheduleKind::k1f1b));
  EXPECT_FALSE(g.ok);
  EXPECT_EQ(g.why_not, "no TP x PP x DP of Megatron-LM's rule fits memory with 1f1b");
}

// The heavy-head case with its megatron-1f1b plan, where the single-dimension baselines start.
struct FromMegatron {
  Fixture fx{8, {"H100-SXM"}, 4, 16, heavy_head()};
  Search s{fx};
  const Found base = s.searcher.megatron(ScheduleSpec::named(ScheduleKind::k1f1b));
};

TEST(StrategiesTest, PartitionOnlyKeepsMegatronsPlacementAndSchedule) {
  // The balanced split gives the heavy head's stage 3 layers: 5 x 3 ms against 2 x 3 + 9 ms.
  FromMegatron m;
  const Found& base = m.base;
  ASSERT_TRUE(base.ok);
  const Found f = m.s.searcher.partition_only(base);
  ASSERT_TRUE(f.ok) << f.why_not;
  EXPECT_EQ(groups_of(f.candidate), groups_of(base.candidate));
  EXPECT_EQ(f.candidate.schedule, base.candidate.schedule);
  EXPECT_EQ(f.candidate.micro_batch_size, base.candidate.micro_batch_size);
  for (const PipelineSpec& r : f.candidate.replicas) {
    EXPECT_EQ(r.bounds, (std::vector<int>{0, 5, 8}));
    EXPECT_EQ(r.micro_batches, 8);
  }
  EXPECT_EQ(f.detail.rfind("megatron-1f1b's placement and schedule with a balanced partition: ", 0),
            0u)
      << f.detail;
  EXPECT_LT(f.eval->iteration_time, base.eval->iteration_time);
  // Without a megatron-1f1b plan there is nothing to keep.
  Found missing;
  missing.why_not = "no plan";
  EXPECT_EQ(m.s.searcher.partition_only(missing).why_not, "no plan");
}

TEST(StrategiesTest, ScheduleOnlyKeepsMegatronsPartitionAndPlacement) {
  FromMegatron m;
  const Found& base = m.base;
  ASSERT_TRUE(base.ok);
  const Found f = m.s.searcher.schedule_only(base);
  ASSERT_TRUE(f.ok) << f.why_not;
  EXPECT_EQ(groups_of(f.candidate), groups_of(base.candidate));
  for (size_t r = 0; r < f.candidate.replicas.size(); ++r) {
    const PipelineSpec& rep = f.candidate.replicas[r];
    // The named shape's chunks may split each group's stage, Megatron-LM's way.
    const int stages = static_cast<int>(rep.bounds.size()) - 1;
    EXPECT_EQ(rep.bounds, split_bounds(LayerSplit::kMegatron, m.fx.model, stages));
    EXPECT_EQ(rep.micro_batches, 8);
  }
  EXPECT_EQ(f.detail.rfind("megatron-1f1b's partition and placement with the best schedule: ", 0),
            0u)
      << f.detail;
  EXPECT_LE(f.eval->iteration_time, base.eval->iteration_time);
}

TEST(StrategiesTest, PlacementOnlyKeepsMegatronsLayerSplitAndOneF1B) {
  Fixture fx(8, {"H100-SXM"}, 4, 16, heavy_head());
  Search s(fx);
  const Found f = s.searcher.placement_only();
  ASSERT_TRUE(f.ok) << f.why_not;
  EXPECT_EQ(f.candidate.schedule.name(), "1f1b");
  int64_t micro_batches = 0;
  for (const PipelineSpec& r : f.candidate.replicas) {
    const int stages = static_cast<int>(r.bounds.size()) - 1;
    EXPECT_EQ(r.bounds, split_bounds(LayerSplit::kMegatron, fx.model, stages));
    micro_batches += r.micro_batches;
  }
  EXPECT_EQ(micro_batches, 16);
  EXPECT_EQ(f.detail.rfind("Megatron-LM's layer split with 1F1B on the best placement: ", 0), 0u)
      << f.detail;
}

TEST(StrategiesTest, MetisBalancesLayersWithOneF1BAndEqualMicroBatches) {
  Fixture fx(8, {"H100-SXM"}, 4, 16, heavy_head());
  Search s(fx);
  const Found f = s.searcher.metis();
  ASSERT_TRUE(f.ok) << f.why_not;
  EXPECT_EQ(f.candidate.schedule.name(), "1f1b");
  int devices = 0;
  for (const PipelineSpec& r : f.candidate.replicas) {
    EXPECT_EQ(r.micro_batches, 16 / static_cast<int64_t>(f.candidate.replicas.size()));
    for (const auto& g : r.groups) devices += static_cast<int>(g.size());
  }
  EXPECT_EQ(devices, 4);  // every device
  // Its cost model balances the head: the last stage holds fewer layers than the others.
  const PipelineSpec& r = f.candidate.replicas[0];
  ASSERT_GE(r.bounds.size(), 3u);
  EXPECT_LT(r.bounds.back() - r.bounds[r.bounds.size() - 2], r.bounds[1] - r.bounds[0]);
  EXPECT_NE(f.detail.find(", layers balanced by its cost model"), std::string::npos) << f.detail;
}

}  // namespace
}  // namespace motley::tune_internal::tune_testing
