#include "motley/schedule/assemble.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "motley/plan/spec_hash.h"
#include "motley/plan/validate.h"
#include "motley/sim/simulator.h"
#include "test_util.h"

// In the test helpers' namespace, so they need no using-declarations.
namespace motley::schedule_testing {
namespace {

AssembleOptions options_for(const ModelSpec& model, const ClusterSpec& cluster) {
  AssembleOptions o;
  o.model = model_ref(model);
  o.cluster = cluster_ref(cluster);
  o.num_layers = static_cast<int>(model.layers.size());
  o.seq_len = model.default_seq_len;
  return o;
}

FixedCostSpec uniform_spec(int layers, double weights_gb = 1) {
  FixedCostSpec spec;
  for (int i = 0; i < layers; ++i) spec.layers.push_back(layer_ms(1, 1, 1, weights_gb, 1));
  return spec;
}

// Four layers of 1 ms each way with 1 GB of activations per micro-batch, and weights that leave
// 5 GB of a device beside two of them.
FixedCostSpec two_layers_per_group_leaving_5gb(const ClusterSpec& cluster) {
  const double capacity = Topology(cluster).device_type(0).memory.value();
  FixedCostSpec spec;
  for (int i = 0; i < 4; ++i) {
    spec.layers.push_back(layer_ms(1, 1, 1, (capacity - 5e9) / 2 / kGiga, 1));
  }
  return spec;
}

TEST(AssembleTest, ReplicasWithDifferentPartitionsShareTheCommonRefinement) {
  const ModelSpec model = tiny_model(6);
  const ClusterSpec cluster = fixed_cluster({"H100-SXM", "H100-SXM"}, 2);
  FixedCostModel cost(cluster, uniform_spec(6));
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  c.replicas = {
      PipelineSpec{{{0}, {1}}, {0, 3, 6}, {RecomputePolicy::kNone, RecomputePolicy::kNone}, 2},
      PipelineSpec{
          {{2}, {3}}, {0, 2, 6}, {RecomputePolicy::kNone, RecomputePolicy::kSelective}, 2}};
  AssembleOptions options = options_for(model, cluster);
  options.global_batch = 4;
  Result<Plan> plan = assemble_plan(options, c, cost);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  ASSERT_EQ(plan->stages.size(), 3u);
  EXPECT_EQ(plan->stages[0], (Stage{0, 2, RecomputePolicy::kNone}));
  // Layers 2-3 are recomputed in replica 1, so in every replica.
  EXPECT_EQ(plan->stages[1], (Stage{2, 3, RecomputePolicy::kSelective}));
  EXPECT_EQ(plan->stages[2], (Stage{3, 6, RecomputePolicy::kSelective}));
  EXPECT_EQ(plan->replicas[0].stage_group, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(plan->replicas[1].stage_group, (std::vector<int>{0, 1, 1}));
  // 1F1B on two coarse stages, expanded: forwards in pipeline order, backwards in reverse.
  EXPECT_EQ(order_text(plan->replicas[0].groups[0].actions), "0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1");
  EXPECT_EQ(order_text(plan->replicas[1].groups[1].actions), "1F0 2F0 2B0 1B0 1F1 2F1 2B1 1B1");
  EXPECT_EQ(plan->global_batch, 4);
  EXPECT_EQ(plan->schedule, "1f1b");
  ValidateOptions validate;
  validate.check_spec_hashes = true;
  Status valid = validate_plan(plan.value(), model, cluster, validate);
  EXPECT_TRUE(valid.is_ok()) << valid.message();
  Result<SimResult> sim = simulate(SimOptions{}, plan.value(), cost);
  ASSERT_TRUE(sim.is_ok()) << sim.status().message();
  // A global batch the replicas do not run is the caller's bug.
  options.global_batch = 8;
  EXPECT_EQ(assemble_plan(options, c, cost).status().code(), StatusCode::kInternal);
}

TEST(AssembleTest, RejectsPlansThatExceedMemoryUnlessTheCheckIsOff) {
  // 30 GB of weights per layer: three layers on one 80 GB H100 do not fit.
  const ModelSpec model = tiny_model(6);
  const ClusterSpec cluster = fixed_cluster({"H100-SXM"}, 2);
  FixedCostModel cost(cluster, uniform_spec(6, 30));
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  c.replicas = {PipelineSpec{{{0}, {1}}, {0, 3, 6}, std::vector<RecomputePolicy>(2), 2}};
  AssembleOptions options = options_for(model, cluster);
  Result<Plan> plan = assemble_plan(options, c, cost);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInfeasible);
  EXPECT_EQ(plan.status().message().rfind("memory: replica 0 group 0 (H100-SXM) needs", 0), 0u)
      << plan.status().message();
  options.check_memory = false;
  plan = assemble_plan(options, c, cost);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(order_text(plan->replicas[0].groups[1].actions), "1F0 1B0 1F1 1B1");
}

TEST(AssembleTest, RefusesTheFirstReplicaWhosePeakUnderItsOrdersDoesNotFit) {
  // GPipe holds every micro-batch's activations at once: with 1 GB per layer and 5 GB left
  // beside the weights, replica 0's two micro-batches (4 GB on group 0) fit and replica 1's
  // three (6 GB) do not, though one micro-batch (2 GB) fits everywhere.
  const ModelSpec model = tiny_model(4);
  const ClusterSpec cluster = fixed_cluster({"H100-SXM", "H100-SXM"}, 2);
  FixedCostModel cost(cluster, two_layers_per_group_leaving_5gb(cluster));
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::kGpipe);
  c.replicas = {PipelineSpec{{{0}, {1}}, {0, 2, 4}, std::vector<RecomputePolicy>(2), 2},
                PipelineSpec{{{2}, {3}}, {0, 2, 4}, std::vector<RecomputePolicy>(2), 3}};
  AssembleOptions options = options_for(model, cluster);
  Result<Plan> plan = assemble_plan(options, c, cost);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInfeasible);
  EXPECT_EQ(plan.status().message().rfind("memory: replica 1 group 0 peaks at", 0), 0u)
      << plan.status().message();
  c.replicas[1].micro_batches = 2;
  plan = assemble_plan(options, c, cost);
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
}

TEST(AssembleTest, AdaptiveScheduleRunsOnTheFineStagesWithinBudget) {
  // Two layers per group with 1 GB of activations each and 5 GB left beside the weights: room
  // for two micro-batches, so forward-first warms up with two, runs the backwards that become
  // ready while the third forward waits for memory, and frees room with W0 before it.
  const ModelSpec model = tiny_model(4);
  const ClusterSpec cluster = fixed_cluster({"H100-SXM"}, 2);
  FixedCostModel cost(cluster, two_layers_per_group_leaving_5gb(cluster));
  Candidate c;
  c.schedule = ScheduleSpec::adaptive_on(StageShape::kLinear, 1, AdaptivePriority::kForwardFirst,
                                         WeightFill::kIfItFits);
  c.replicas = {PipelineSpec{{{0}, {1}}, {0, 2, 4}, std::vector<RecomputePolicy>(2), 6}};
  Result<Plan> plan = assemble_plan(options_for(model, cluster), c, cost);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->schedule, "adaptive(forward-first)");
  ASSERT_EQ(plan->stages.size(), 2u);
  GroupOrders orders;
  for (const DeviceGroupSchedule& g : plan->replicas[0].groups) orders.push_back(g.actions);
  EXPECT_EQ(peak_in_flight_per_group(orders), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(order_text(orders[0]).rfind("0F0 0F1 0I0 0I1 0W0 0F2", 0), 0u) << order_text(orders[0]);
}

TEST(AssembleTest, ReplicasShareAdaptiveOrdersOnlyWithEqualRequests) {
  // Replicas 0 and 1 are alike; replica 2 runs fewer micro-batches and replica 3 another
  // partition. Each replica's orders must be those it gets assembled alone.
  const ModelSpec model = tiny_model(4);
  const ClusterSpec cluster = fixed_cluster({"H100-SXM", "H100-SXM", "H100-SXM", "H100-SXM"}, 2);
  FixedCostSpec spec;
  for (int i = 0; i < 4; ++i) spec.layers.push_back(layer_ms(1 + i, 2, 1, 1, 1));
  FixedCostModel cost(cluster, spec);
  const std::vector<RecomputePolicy> none(2);
  Candidate c;
  c.schedule = ScheduleSpec::adaptive_on(StageShape::kLinear, 1, AdaptivePriority::kBackwardFirst,
                                         WeightFill::kIfItFits);
  c.replicas = {
      PipelineSpec{{{0}, {1}}, {0, 2, 4}, none, 4}, PipelineSpec{{{2}, {3}}, {0, 2, 4}, none, 4},
      PipelineSpec{{{4}, {5}}, {0, 2, 4}, none, 3}, PipelineSpec{{{6}, {7}}, {0, 3, 4}, none, 4}};
  AssembleOptions options = options_for(model, cluster);
  options.check_memory = false;
  Result<Plan> plan = assemble_plan(options, c, cost);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  auto orders_of = [](const Replica& r) {
    std::string text;
    for (const DeviceGroupSchedule& g : r.groups) text += order_text(g.actions) + " | ";
    return text;
  };
  for (size_t r = 0; r < c.replicas.size(); ++r) {
    Candidate alone = c;
    alone.replicas = {c.replicas[r]};
    // The common refinement of all four partitions, so that stages are numbered alike.
    alone.replicas.push_back(c.replicas[r == 3 ? 0 : 3]);
    Result<Plan> single = assemble_plan(options, alone, cost);
    ASSERT_TRUE(single.is_ok()) << single.status().message();
    EXPECT_EQ(orders_of(plan->replicas[r]), orders_of(single->replicas[0])) << "replica " << r;
  }
  EXPECT_EQ(orders_of(plan->replicas[0]), orders_of(plan->replicas[1]));
  EXPECT_NE(orders_of(plan->replicas[0]), orders_of(plan->replicas[2]));
  EXPECT_NE(orders_of(plan->replicas[0]), orders_of(plan->replicas[3]));
}

// Vocabulary parallelism: the head becomes a stage of its own split into one shard per group,
// rows by each group's speed on the head (the A100 takes three times the H100's time here).
TEST(AssembleTest, VocabularyParallelismSplitsTheHeadBySpeed) {
  ModelSpec model = tiny_model(3);
  Layer head;
  head.name = "head";
  head.kind = LayerKind::kHead;
  head.head = HeadShape{1000, 64, false};
  model.layers.push_back(head);
  const ClusterSpec cluster = fixed_cluster({"H100-SXM", "A100-80GB"}, 1);
  FixedCostSpec spec = uniform_spec(4);
  std::vector<FixedLayerTimes> a100;
  for (const FixedLayer& l : spec.layers) a100.push_back(l.times);
  for (Seconds* t : {&a100[3].forward, &a100[3].backward_input, &a100[3].backward_weight}) {
    *t = *t * 3.0;
  }
  spec.device_times = {{"A100-80GB", a100}};
  FixedCostModel cost(cluster, spec);
  Candidate c;
  c.schedule = ScheduleSpec::adaptive_on(StageShape::kLinear, 1, AdaptivePriority::kBackwardFirst,
                                         WeightFill::kIfItFits);
  c.replicas = {PipelineSpec{{{0}, {1}}, {0, 2, 4}, std::vector<RecomputePolicy>(2), 3}};
  c.vocab_parallel = true;
  AssembleOptions options = options_for(model, cluster);
  options.head_vocab = 1000;
  Result<Plan> plan = assemble_plan(options, c, cost);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  ASSERT_EQ(plan->stages.size(), 4u);
  EXPECT_EQ(plan->stages[1], (Stage{2, 3, RecomputePolicy::kNone}));
  EXPECT_EQ(plan->stages[2], (Stage{3, 4, RecomputePolicy::kNone, 0, 750}));
  EXPECT_EQ(plan->stages[3], (Stage{3, 4, RecomputePolicy::kNone, 750, 1000}));
  EXPECT_EQ(plan->replicas[0].stage_group, (std::vector<int>{0, 1, 0, 1}));
  Status valid = validate_plan(plan.value(), model, cluster, ValidateOptions{});
  EXPECT_TRUE(valid.is_ok()) << valid.message();
  Result<SimResult> sim = simulate(SimOptions{}, plan.value(), cost);
  ASSERT_TRUE(sim.is_ok()) << sim.status().message();
  // Named schedules place no shards; a model without a head has nothing to split.
  c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  EXPECT_EQ(assemble_plan(options, c, cost).status().code(), StatusCode::kInvalidArgument);
  options.head_vocab = 0;
  c.schedule = ScheduleSpec::adaptive_on(StageShape::kLinear, 1, AdaptivePriority::kBackwardFirst,
                                         WeightFill::kIfItFits);
  EXPECT_EQ(assemble_plan(options, c, cost).status().code(), StatusCode::kInvalidArgument);
  // The rows themselves: by speed, at least one each, the last ending at the vocabulary.
  EXPECT_EQ(vocab_shard_ends(1000, {3, 9}), (std::vector<int64_t>{750, 1000}));
  EXPECT_EQ(vocab_shard_ends(3, {1, 1000, 1000}), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(vocab_shard_ends(10, {1, 1, 1, 1}), (std::vector<int64_t>{3, 5, 8, 10}));
  // Rows in multiples of a group's tensor-parallel degree where every group can have some.
  EXPECT_EQ(vocab_shard_ends(1000, {3, 9}, 8), (std::vector<int64_t>{752, 1000}));
  EXPECT_EQ(vocab_shard_ends(256, {1, 1, 1}, 2), (std::vector<int64_t>{86, 170, 256}));
  EXPECT_EQ(vocab_shard_ends(10, {1, 1, 1, 1}, 4), (std::vector<int64_t>{3, 5, 8, 10}));

  // Explicit head shares replace the speeds: a quarter to the H100, the rest to the A100.
  c.schedule = ScheduleSpec::adaptive_on(StageShape::kLinear, 1, AdaptivePriority::kBackwardFirst,
                                         WeightFill::kIfItFits);
  options.head_vocab = 1000;
  c.head_shares = {0.25, 0.75};
  plan = assemble_plan(options, c, cost);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->stages[2], (Stage{3, 4, RecomputePolicy::kNone, 0, 250}));
  EXPECT_EQ(plan->stages[3], (Stage{3, 4, RecomputePolicy::kNone, 250, 1000}));
  EXPECT_EQ(vocab_shard_ends_by_weight(1000, {1, 3}), (std::vector<int64_t>{250, 1000}));
  c.head_shares = {1.0};
  EXPECT_EQ(assemble_plan(options, c, cost).status().message(),
            "candidate: vocabulary parallelism needs one positive, finite head share per group: "
            "2 groups, 1 shares");
  c.head_shares = {1.0, 0.0};
  EXPECT_EQ(assemble_plan(options, c, cost).status().code(), StatusCode::kInvalidArgument);
}

// The head's shares that even out the groups' loads: water filling over the whole-head times.
TEST(AssembleTest, BalancedHeadSharesLevelTheGroups) {
  // Equal other work and equal heads: equal shares.
  std::vector<double> x = balanced_head_shares({10, 10}, {4, 4}, 0);
  EXPECT_DOUBLE_EQ(x[0], 0.5);
  EXPECT_DOUBLE_EQ(x[1], 0.5);
  // Group 0 has 2 s less other work and the same 4 s head: it takes 0.75 (both end at 13).
  x = balanced_head_shares({8, 10}, {4, 4}, 0);
  EXPECT_DOUBLE_EQ(x[0], 0.75);
  EXPECT_DOUBLE_EQ(x[1], 0.25);
  EXPECT_DOUBLE_EQ(8 + 4 * x[0], 10 + 4 * x[1]);
  // A group far above the others takes none (or only the minimum); the rest share the head by
  // their speed on it: 1 / 2 and 1 / 6 of a second per share, so three to one.
  x = balanced_head_shares({0, 0, 100}, {2, 6, 1}, 0);
  EXPECT_DOUBLE_EQ(x[0], 0.75);
  EXPECT_DOUBLE_EQ(x[1], 0.25);
  EXPECT_DOUBLE_EQ(x[2], 0.0);
  x = balanced_head_shares({0, 0, 100}, {2, 6, 1}, 0.01);
  EXPECT_DOUBLE_EQ(x[2], 0.01);
  EXPECT_NEAR(x[0] + x[1] + x[2], 1.0, 1e-12);
  EXPECT_NEAR(2 * x[0], 6 * x[1], 1e-12);
  // No other work anywhere: the speed-proportional split.
  x = balanced_head_shares({0, 0}, {1, 3}, 0);
  EXPECT_DOUBLE_EQ(x[0], 0.75);
}

TEST(AssembleTest, RejectsMalformedCandidates) {
  const ModelSpec model = tiny_model(4);
  const ClusterSpec cluster = fixed_cluster({"H100-SXM"}, 2);
  FixedCostModel cost(cluster, uniform_spec(4));
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  c.replicas = {PipelineSpec{{{0}, {1}}, {0, 2, 3}, std::vector<RecomputePolicy>(2), 2}};
  Result<Plan> plan = assemble_plan(options_for(model, cluster), c, cost);
  EXPECT_EQ(plan.status().message(), "candidate: replica 0 does not cover the model's layers");
  c.replicas[0].bounds = {0, 4, 4};
  plan = assemble_plan(options_for(model, cluster), c, cost);
  EXPECT_EQ(plan.status().message(), "candidate: replica 0 stage 1 is empty");
  c.schedule = ScheduleSpec::named(ScheduleKind::kZbV);
  plan = assemble_plan(options_for(model, cluster), c, cost);
  EXPECT_EQ(plan.status().message(), "candidate: replica 0 needs 4 stages");
}

}  // namespace
}  // namespace motley::schedule_testing
