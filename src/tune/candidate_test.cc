// What the search keeps of a candidate: its cache key and its per-group loads.
#include "candidate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tune_test_util.h"

namespace motley::tune_internal::tune_testing {
namespace {

Candidate two_stages() {
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  c.replicas = {PipelineSpec{{{0}, {1}}, {0, 2, 4}, std::vector<RecomputePolicy>(2), 8}};
  return c;
}

// Every field is kept but the replicas, which are the ones given: with the candidate's own
// replicas given back it is the candidate again.
TEST(CandidateTest, WithReplicasKeepsEveryOtherField) {
  Candidate c = two_stages();
  c.micro_batch_size = 2;
  c.schedule = ScheduleSpec::adaptive_on(StageShape::kV, 2, AdaptivePriority::kAlternate,
                                         WeightFill::kIfItFits);
  c.zero_stage = 2;
  c.expert_parallel = 4;
  c.context_parallel = 2;
  c.sequence_parallel = true;
  c.vocab_parallel = true;
  c.vocab_embedding = true;
  c.head_shares = {1.0, 2.0};
  c.recompute_layers = {1, 3};
  const Candidate copy = with_replicas(c, c.replicas);
  EXPECT_EQ(copy, c);
  const Candidate none = with_replicas(c, {});
  EXPECT_TRUE(none.replicas.empty());
  Candidate back = none;
  back.replicas = c.replicas;
  EXPECT_EQ(back, c);
}

TEST(CandidateTest, KeyTellsApartEveryDecision) {
  const Candidate c = two_stages();
  EXPECT_EQ(candidate_key(c), candidate_key(two_stages()));
  EXPECT_EQ(candidate_key(c), "1|1f1b|m8:[0,][1,]b0,2,4,r00;");
  std::vector<Candidate> changed(6, c);
  changed[0].micro_batch_size = 2;
  changed[1].schedule = ScheduleSpec::named(ScheduleKind::kZbH1);
  changed[2].schedule.limit_in_flight = false;
  changed[3].replicas[0].bounds = {0, 1, 4};
  changed[4].replicas[0].recompute[1] = RecomputePolicy::kFull;
  changed[5].replicas[0].micro_batches = 7;
  std::vector<std::string> keys{candidate_key(c)};
  for (const Candidate& x : changed) {
    const std::string k = candidate_key(x);
    EXPECT_EQ(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
    keys.push_back(k);
  }
}

// Replicas each the one before moved by one offset are written as a run, and the key still
// tells apart every replica's devices, layers and micro-batches.
TEST(CandidateTest, KeyWritesRunsOfMovedReplicasShortAndStillTellsThemApart) {
  Candidate c = two_stages();
  const PipelineSpec first = c.replicas[0];
  for (int r = 1; r < 1000; ++r) {
    PipelineSpec moved = first;
    for (auto& g : moved.groups) {
      for (int& d : g) d += 2 * r;
    }
    c.replicas.push_back(moved);
  }
  const std::string key = candidate_key(c);
  EXPECT_EQ(key, "1|1f1b|m8:[0,][1,]b0,2,4,r00;*2,999;");
  std::vector<Candidate> changed(5, c);
  changed[0].replicas[500].groups[1][0] = 5000;  // one device elsewhere
  changed[1].replicas[999].micro_batches = 7;
  changed[2].replicas[3].bounds = {0, 1, 4};
  changed[3].replicas.pop_back();
  // The second half moved by 4 from the first: the same devices in another order of runs.
  for (int r = 500; r < 1000; ++r) {
    for (auto& g : changed[4].replicas[r].groups) {
      for (int& d : g) d += 2 * (r - 499);
    }
  }
  std::vector<std::string> keys{key};
  for (const Candidate& x : changed) {
    const std::string k = candidate_key(x);
    EXPECT_EQ(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
    keys.push_back(k);
  }
  EXPECT_EQ(keys[5], "1|1f1b|m8:[0,][1,]b0,2,4,r00;*2,499;*4,500;");
}

TEST(CandidateTest, GroupLoadsSumEachGroupsStages) {
  // A V over two groups: group 0 runs stages 0 and 3 (1 + 4 layers), group 1 stages 1 and 2
  // (2 + 1 layers); stage 3 recomputes at 0.5 ms a layer, counted with the backward pass.
  FixedCostSpec spec;
  for (int i = 0; i < 8; ++i) {
    FixedLayer l = layer_ms(1, 2, 3);
    l.times.recompute = milliseconds(0.5);
    spec.layers.push_back(l);
  }
  Fixture fx(8, {"H100-SXM"}, 2, 16, spec);
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::kZbV);
  c.replicas = {PipelineSpec{{{0}, {1}},
                             {0, 1, 3, 4, 8},
                             {RecomputePolicy::kNone, RecomputePolicy::kNone,
                              RecomputePolicy::kNone, RecomputePolicy::kFull},
                             16}};
  const std::vector<std::vector<GroupLoad>> loads = group_loads(*fx.ctx, c);
  ASSERT_EQ(loads.size(), 1u);
  ASSERT_EQ(loads[0].size(), 2u);
  EXPECT_NEAR(loads[0][0].forward, 5e-3, 1e-15);
  EXPECT_NEAR(loads[0][0].backward, 10e-3 + 2e-3, 1e-15);
  EXPECT_NEAR(loads[0][0].weight, 15e-3, 1e-15);
  EXPECT_NEAR(loads[0][1].total(), 3 * 6e-3, 1e-15);
  // A second replica of other bounds: asked for alone, its loads are those of the whole call,
  // and the first's are left empty.
  c.replicas.push_back(PipelineSpec{
      {{1}, {0}}, {0, 2, 4, 6, 8}, std::vector<RecomputePolicy>(4, RecomputePolicy::kNone), 16});
  const std::vector<std::vector<GroupLoad>> both = group_loads(*fx.ctx, c);
  const std::vector<size_t> second{1};
  const std::vector<std::vector<GroupLoad>> alone = group_loads(*fx.ctx, c, nullptr, &second);
  ASSERT_EQ(both.size(), 2u);
  ASSERT_EQ(alone.size(), 2u);
  EXPECT_TRUE(alone[0].empty());
  ASSERT_EQ(alone[1].size(), 2u);
  for (size_t g = 0; g < 2; ++g) {
    EXPECT_EQ(alone[1][g].forward, both[1][g].forward);
    EXPECT_EQ(alone[1][g].backward, both[1][g].backward);
    EXPECT_EQ(alone[1][g].weight, both[1][g].weight);
  }
  EXPECT_NEAR(both[1][0].total(), 4 * 6e-3, 1e-15);
}

// `c` assembled into a plan, and the plan's structure read back, is `c` again.
void expect_reads_back(const Fixture& fx, const Candidate& c) {
  SCOPED_TRACE(c.schedule.name());
  Result<Plan> plan = assemble(*fx.ctx, c);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  Result<Candidate> back = candidate_from_plan(*plan);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(candidate_key(*back), candidate_key(c));
}

// A plan's structure read back as a candidate is the candidate it was assembled from: linear
// replicas of other bounds (the plan's stages are their common refinement, so a recompute
// policy would be shared), interleaved, V, and the adaptive scheduler with recompute.
TEST(CandidateTest, APlansStructureReadsBackAsItsCandidate) {
  Fixture fx(8, {"H100-SXM", "H100-SXM"}, 2, 16, uniform_spec(8));
  const auto none = [](int n) { return std::vector<RecomputePolicy>(n, RecomputePolicy::kNone); };
  std::vector<Candidate> cases(4);
  cases[0].schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  cases[0].replicas = {PipelineSpec{{{0}, {1}}, {0, 3, 8}, none(2), 10},
                       PipelineSpec{{{2}, {3}}, {0, 5, 8}, none(2), 6}};
  cases[1].schedule = ScheduleSpec::named(ScheduleKind::kInterleaved, 2);
  cases[1].replicas = {PipelineSpec{{{0, 1}, {2, 3}}, {0, 2, 4, 6, 8}, none(4), 16}};
  cases[2].schedule = ScheduleSpec::named(ScheduleKind::kZbV);
  cases[2].replicas = {PipelineSpec{{{0}, {1}, {2}}, {0, 1, 2, 4, 5, 7, 8}, none(6), 16}};
  cases[3].schedule = ScheduleSpec::adaptive_on(
      StageShape::kLinear, 1, AdaptivePriority::kForwardFirst, WeightFill::kAlways);
  cases[3].replicas = {PipelineSpec{{{0}, {1}, {2}, {3}},
                                    {0, 1, 3, 6, 8},
                                    {RecomputePolicy::kNone, RecomputePolicy::kFull,
                                     RecomputePolicy::kSelective, RecomputePolicy::kNone},
                                    16}};
  for (const Candidate& c : cases) expect_reads_back(fx, c);
}

// Zigzags of three and four chunks over three groups (out, back, out, back), each turn split
// where its two coarse stages were, under the alternating priority.
TEST(CandidateTest, AZigzagPlanReadsBackAsItsCandidate) {
  Fixture fx(16, {"H100-SXM", "H100-SXM"}, 2, 16, uniform_spec(16));
  std::vector<Candidate> cases(2);
  for (int chunks : {3, 4}) {
    Candidate& c = cases[chunks - 3];
    c.schedule = ScheduleSpec::adaptive_on(StageShape::kV, chunks, AdaptivePriority::kAlternate,
                                           WeightFill::kAlways);
    std::vector<int> bounds;
    for (int s = 0; s <= 3 * chunks; ++s) bounds.push_back(s * 16 / (3 * chunks));
    c.replicas = {PipelineSpec{{{0}, {1}, {2}},
                               bounds,
                               std::vector<RecomputePolicy>(3 * chunks, RecomputePolicy::kNone),
                               16}};
    EXPECT_EQ(shape_stage_group(c.schedule, 3),
              chunks == 3 ? (std::vector<int>{0, 1, 2, 2, 1, 0, 0, 1, 2})
                          : (std::vector<int>{0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0}));
  }
  for (const Candidate& c : cases) expect_reads_back(fx, c);
}

TEST(CandidateTest, AStageMapOfNoShapeIsNotACandidate) {
  Fixture fx(8, {"H100-SXM"}, 2, 16, uniform_spec(8));
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  c.replicas = {PipelineSpec{{{0}, {1}}, {0, 4, 8}, std::vector<RecomputePolicy>(2), 16}};
  Result<Plan> plan = assemble(*fx.ctx, c);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  Plan swapped = *plan;
  swapped.replicas[0].stage_group = {1, 0};  // the pipeline runs its groups out of order
  EXPECT_EQ(
      candidate_from_plan(swapped).status().message(),
      "replica 0: its stages are not a linear, interleaved, V or zigzag map over its 2 groups "
      "in order");
}

}  // namespace
}  // namespace motley::tune_internal::tune_testing
