// Expert parallelism: the replicas of an expert-parallel group each hold 1/e of every MoE
// layer's routed experts and exchange tokens in every forward and backward. Every rank's
// parameters must be the reference's rows, each expert held by exactly one member of a group,
// and the losses the reference's. Ranks run as threads over the in-process transport.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>

#include "motley/exec/executor.h"
#include "motley/exec/rank_layout.h"
#include "test_util.h"

namespace motley {
namespace {

using testing::expect_matches_reference;
using testing::preset;
using testing::uniform_plan;

Plan with_experts_split(Plan plan, int e) {
  plan.expert_parallel = e;
  return plan;
}

TEST(ExpertParallel, OneFOneBOverTwoReplicasMatchesReference) {
  const ModelSpec model = preset("tiny-moe");  // 4 routed experts (top 2), 1 shared
  const Plan plan = with_experts_split(uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 2}), 2);
  ASSERT_TRUE(exchanges_experts(plan));
  expect_matches_reference(plan, model);
}

TEST(ExpertParallel, InterleavedChunksOnEveryRankMatchReference) {
  // Two chunks per device group: each rank runs two stages' MoE layers, exchanging for each.
  const ModelSpec model = preset("tiny-moe");
  const Plan plan =
      with_experts_split(uniform_plan(model, {ScheduleKind::kInterleaved, 2, 2, 4, 2}), 2);
  ASSERT_TRUE(exchanges_experts(plan));
  expect_matches_reference(plan, model, testing::kSteps);
}

TEST(ExpertParallel, ZeroBubbleWithTensorParallelismMatchesReference) {
  // ZB-H1 splits every backward into I and W, each of which passes through the exchanges again;
  // each expert's width is split over the group of two as well.
  const ModelSpec model = preset("tiny-moe");
  const Plan plan = with_experts_split(
      uniform_plan(model, {ScheduleKind::kZbH1, 2, 1, 4, 2, RecomputePolicy::kNone, 2}), 2);
  ASSERT_TRUE(exchanges_experts(plan));
  expect_matches_reference(plan, model);
}

TEST(ExpertParallel, FourMembersWithRecomputeAndSharedExpertsMatchReference) {
  // Four replicas in one group, two experts each; every forward is recomputed before its
  // backward, exchanging again.
  const ModelSpec model = testing::deepseek_v2_lite_miniature();  // 8 experts, 2 shared
  const Plan plan = with_experts_split(
      uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 4, RecomputePolicy::kFull}), 4);
  ASSERT_TRUE(exchanges_experts(plan));
  expect_matches_reference(plan, model, testing::kSteps);
}

TEST(ExpertParallel, EachMemberHoldsItsShareOfTheExperts) {
  // Two groups of two replicas: ranks of members 0 hold experts 0 and 1, of members 1 experts 2
  // and 3; gradients of an expert are summed over the two groups' holders only, which also
  // share its optimizer state under ZeRO-1.
  const ModelSpec model = preset("tiny-moe");
  Plan plan = with_experts_split(uniform_plan(model, {ScheduleKind::k1f1b, 1, 1, 2, 4}), 2);
  plan.zero_stage = 1;  // each expert's moments split between its two holders
  ASSERT_TRUE(exchanges_experts(plan));
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  ASSERT_TRUE(tokens.is_ok());
  const std::vector<testing::RankRun> ranks =
      testing::run_ranks(plan, model, *tokens, testing::kSteps);
  ASSERT_EQ(ranks.size(), 4u);
  for (int rank = 0; rank < 4; ++rank) {
    std::set<int> experts;
    for (const NamedTensor& p : ranks[rank].parameters) {
      const auto at = p.name.find(".experts.");
      if (at != std::string::npos) experts.insert(std::stoi(p.name.substr(at + 9)));
    }
    const std::set<int> expected = rank % 2 == 0 ? std::set<int>{0, 1} : std::set<int>{2, 3};
    EXPECT_EQ(experts, expected) << "rank " << rank;
  }
  // The same expert on the two groups' holders: the same bits after the steps.
  for (int member = 0; member < 2; ++member) {
    for (size_t i = 0; i < ranks[member].parameters.size(); ++i) {
      const NamedTensor& a = ranks[member].parameters[i];
      const NamedTensor& b = ranks[member + 2].parameters[i];
      ASSERT_EQ(a.name, b.name);
      EXPECT_TRUE(at::equal(a.tensor, b.tensor)) << a.name;
    }
  }
  expect_matches_reference(plan, model, testing::kSteps);
}

TEST(ExpertParallel, ReplicasThatDifferKeepEveryExpert) {
  // Replica 1 runs its micro-batches in another order: the members could not exchange in
  // lockstep, so every replica holds every expert, and the numbers are the same.
  const ModelSpec model = preset("tiny-moe");
  Plan plan = with_experts_split(uniform_plan(model, {ScheduleKind::kGpipe, 1, 1, 2, 2}), 2);
  std::vector<Action>& order = plan.replicas[1].groups[0].actions;
  std::swap(order[0], order[1]);
  EXPECT_FALSE(exchanges_experts(plan));
  EXPECT_FALSE(exchanges_experts(uniform_plan(model, {ScheduleKind::k1f1b, 1, 1, 2, 2})));
  expect_matches_reference(plan, model, 2);
}

TEST(ExpertParallel, StageRefusesAGroupTheExpertsDoNotDivide) {
  const ModelSpec model = preset("tiny-moe");
  ParameterStore store;
  StageModuleOptions options{0, 16, {}};
  options.expert_parallel.size = 3;
  options.expert_parallel.all_reduce = [](at::Tensor&) {};
  options.expert_parallel.all_to_all = [](const std::vector<at::Tensor>&,
                                          const std::vector<at::Tensor>&) {};
  auto stage = make_transformer_stage(model, 1, 2, options, store);
  ASSERT_FALSE(stage.is_ok());
  EXPECT_EQ(stage.status().message(),
            "model 'tiny-moe': layer 1 ('layers.0', decoder_block): 4 routed experts do not split "
            "over an expert-parallel group of 3 (as member 0)");
}

// A checkpoint of an expert-parallel run holds every expert whole: resuming it without expert
// parallelism (and the other way round) continues as the uninterrupted run does.
TEST(ExpertParallel, CheckpointsResumeWithAndWithoutTheSplit) {
  const ModelSpec model = preset("tiny-moe");
  // Four replicas in two groups, with ZeRO-1: the first group's members assemble the experts
  // and their moments from wherever they live.
  const Plan split = [&] {
    Plan p = with_experts_split(uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 4}), 2);
    p.zero_stage = 1;
    return p;
  }();
  const Plan whole = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 4});
  testing::expect_checkpoints_resume_across(split, whole, model, "motley-ep-checkpoint");
}

}  // namespace
}  // namespace motley
