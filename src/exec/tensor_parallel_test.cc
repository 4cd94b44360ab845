// Tensor parallelism: a device group of t devices runs as t ranks, each holding 1/t of its
// stages' heads, widths and vocabulary. Every rank's slice must equal the same rows of the
// sequential reference's parameters, rows that several ranks hold must be identical bits, and
// the losses must be the reference's. Ranks run as threads over the in-process transport.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "motley/exec/rank_layout.h"
#include "motley/plan/spec_hash.h"
#include "motley/plan/validate.h"
#include "test_util.h"

namespace motley {
namespace {

using testing::cluster_of;
using testing::exec_options;
using testing::expect_matches_reference;
using testing::preset;
using testing::uniform_plan;

TEST(TensorParallel, LayoutNumbersDevicesAndPairsPipelinePeers) {
  Plan plan = uniform_plan(preset("tiny-llama"),
                           {ScheduleKind::k1f1b, 2, 1, 4, 1, RecomputePolicy::kNone, 2});
  // Make the second group a single device: messages fan out from a group of 2 to 1 and back.
  plan.replicas[0].groups[1].devices.resize(1);
  const RankLayout layout(plan);
  ASSERT_EQ(layout.world_size(), 3);
  EXPECT_EQ(layout.rank_of(0, 0, 1), 1);
  EXPECT_EQ(layout.rank_of(0, 1), 2);
  EXPECT_EQ(layout.place_of(1).tp_rank, 1);
  EXPECT_EQ(layout.place_of(1).tp_size, 2);
  EXPECT_EQ(layout.place_of(2).tp_size, 1);
  EXPECT_EQ(layout.group_ranks(0, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(layout.stage_ranks(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(layout.stages_of(1), (std::vector<int>{0}));
  // Group 1 (one rank) takes its copy from group 0's rank 0; group 0's ranks both take theirs
  // from it.
  EXPECT_EQ(layout.pipeline_source(2, 0), 0);
  EXPECT_EQ(layout.pipeline_destinations(0, 1), (std::vector<int>{2}));
  EXPECT_TRUE(layout.pipeline_destinations(1, 1).empty());
  EXPECT_EQ(layout.pipeline_source(0, 1), 2);
  EXPECT_EQ(layout.pipeline_source(1, 1), 2);
  EXPECT_EQ(layout.pipeline_destinations(2, 0), (std::vector<int>{0, 1}));
}

TEST(TensorParallel, OneFOneBOverTwoGroupsOfTwoMatchesReference) {
  const ModelSpec model = preset("tiny-llama");
  expect_matches_reference(
      uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 1, RecomputePolicy::kNone, 2}), model);
}

TEST(TensorParallel, ZeroBubbleMoeMatchesReference) {
  const ModelSpec model = preset("tiny-moe");
  expect_matches_reference(
      uniform_plan(model, {ScheduleKind::kZbH1, 2, 1, 4, 1, RecomputePolicy::kNone, 2}), model);
}

TEST(TensorParallel, MambaWithSharedGroupsAndRecomputeMatchesReference) {
  // One B/C group read by both ranks' heads: rows held by both, their gradients partial.
  const ModelSpec model = preset("tiny-hybrid");
  expect_matches_reference(
      uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 1, RecomputePolicy::kFull, 2}), model);
}

TEST(TensorParallel, Mamba1SplitByChannelsMatchesReference) {
  // x_proj's partial products (dt, B and C) summed over the group in both passes; the inner
  // norms' weights replicated with partial gradients.
  for (bool inner_norms : {true, false}) {
    SCOPED_TRACE(inner_norms ? "inner norms" : "no inner norms");
    const ModelSpec model = testing::mamba1_hybrid(inner_norms);
    const ScheduleKind kind = inner_norms ? ScheduleKind::k1f1b : ScheduleKind::kZbH1;
    expect_matches_reference(uniform_plan(model, {kind, 2, 1, 4, 1, RecomputePolicy::kNone, 2}),
                             model);
  }
}

TEST(TensorParallel, TiedVocabularyParallelHeadWithReplicasMatchesReference) {
  // Gemma-style: tied embedding and head on different groups, four norms, sliding windows;
  // two replicas of two groups of two.
  const ModelSpec model = preset("tiny-gemma");
  expect_matches_reference(
      uniform_plan(model, {ScheduleKind::kInterleaved, 2, 2, 4, 2, RecomputePolicy::kNone, 2}),
      model);
}

TEST(TensorParallel, LatentAttentionMatchesReference) {
  // Split by heads; the down projections and latent norms are replicated with partial
  // gradients, and the hidden state's gradient sums every path through them.
  {
    SCOPED_TRACE("queries projected directly");
    const ModelSpec model = testing::mla_model(0);
    expect_matches_reference(
        uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 1, RecomputePolicy::kNone, 2}), model);
  }
  {
    SCOPED_TRACE("query bottleneck, biases, sinks");
    ModelSpec model = testing::mla_model(24, /*bias=*/true);
    for (int i = 1; i <= 4; ++i) model.layers[i].attention->sinks = true;
    expect_matches_reference(
        uniform_plan(model, {ScheduleKind::kZbH1, 2, 1, 4, 1, RecomputePolicy::kNone, 2}), model);
  }
  {
    SCOPED_TRACE("deepseek-v2-lite in miniature");
    const ModelSpec model = testing::deepseek_v2_lite_miniature();
    expect_matches_reference(
        uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 1, RecomputePolicy::kFull, 2}), model);
  }
}

// Replica 0 on groups of two devices, replica 1 on single devices, with 3 and 5 micro-batches:
// gradients of differently split replicas are summed at full size.
TEST(TensorParallel, ReplicasOfDifferentDegreesMatchReference) {
  const ModelSpec model = preset("tiny-llama");
  const Plan base = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 2});
  Plan plan = base;
  plan.replicas[0].groups[0].devices = {0, 1};
  plan.replicas[0].groups[1].devices = {2, 3};
  plan.replicas[1].groups[0].devices = {4};
  plan.replicas[1].groups[1].devices = {5};
  plan.replicas[0].micro_batches = 3;
  plan.replicas[1].micro_batches = 5;
  const Plan r0 = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 3, 1});
  const Plan r1 = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 5, 1});
  for (size_t g = 0; g < 2; ++g) {
    plan.replicas[0].groups[g].actions = r0.replicas[0].groups[g].actions;
    plan.replicas[1].groups[g].actions = r1.replicas[0].groups[g].actions;
  }
  plan.global_batch = 8 * plan.micro_batch_size;
  const ClusterSpec cluster = cluster_of(6);
  plan.cluster = cluster_ref(cluster);
  ASSERT_TRUE(validate_plan(plan, model, cluster, ValidateOptions{}).is_ok())
      << validate_plan(plan, model, cluster, ValidateOptions{}).message();
  expect_matches_reference(plan, model);
}

TEST(TensorParallel, GroupsOfDifferentSizesInOnePipelineMatchReference) {
  const ModelSpec model = preset("tiny-llama");
  Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 1, RecomputePolicy::kNone, 2});
  plan.replicas[0].groups[1].devices = {2};
  expect_matches_reference(plan, model);
}

// Replicas of tensor-parallel groups with messages of 4 MiB (the activations and the groups'
// sums), random delays before every post and wait on every rank, and gradient sums posted from
// inside the backward: the step completes and gives the reference's numbers.
TEST(TensorParallel, RandomDelaysAndLargeMessagesComplete) {
  const ModelSpec model = testing::wide_model(8192);
  const Plan plan =
      uniform_plan(model, {ScheduleKind::kZbH1, 2, 1, 3, 2, RecomputePolicy::kNone, 2},
                   /*micro_batch_size=*/2, /*seq_len=*/64);
  expect_matches_reference(plan, model, 1, /*delays=*/true);
}

TEST(TensorParallel, RefusesWidthsTheDegreeDoesNotDivide) {
  // tiny-llama has 2 key/value heads: 4 ranks cannot split them.
  const ModelSpec model = preset("tiny-llama");
  const Plan plan =
      uniform_plan(model, {ScheduleKind::k1f1b, 1, 1, 2, 1, RecomputePolicy::kNone, 4});
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 12, 3), "corpus");
  ASSERT_TRUE(tokens.is_ok());
  InProcessNetwork network(4);
  auto transport = network.endpoint(0);
  auto executor = RankExecutor::create(exec_options(), plan, model, *tokens, *transport);
  ASSERT_FALSE(executor.is_ok());
  EXPECT_EQ(executor.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(executor.status().message().find(
                "tensor parallelism over 4 devices splits it evenly, but num_kv_heads (2) is "
                "not a multiple of 4"),
            std::string::npos)
      << executor.status().message();
}

// A checkpoint of a tensor-parallel run holds whole tensors: resuming it without tensor
// parallelism (and the other way round) continues as the uninterrupted run does.
TEST(TensorParallel, CheckpointsResumeUnderAnotherDegree) {
  const ModelSpec model = preset("tiny-hybrid");
  const Plan split =
      uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 1, RecomputePolicy::kNone, 2});
  const Plan whole = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 1});
  testing::expect_checkpoints_resume_across(split, whole, model, "motley-tp-checkpoint");
}

}  // namespace
}  // namespace motley
