// Vocabulary parallelism: the head, and the embedding, split by vocabulary rows into one shard
// per device group of a pipeline, each shard a stage of its own. Embedding shards' partial
// lookups are summed by the stage after them; head shards exchange per-token statistics (row
// maximum, sum of exponentials, target logit) and each computes the whole loss, so no rank holds
// the full logits. Every rank's rows must equal the sequential reference's (the reference runs
// the unsplit model). Ranks run as threads over the in-process transport.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "motley/exec/stage_module.h"
#include "test_util.h"

namespace motley {
namespace {

using testing::expect_matches_reference;
using testing::preset;
using testing::uniform_plan;

// tiny-llama with learned positions (GPT-2's embedding): only the shard from row 0 adds them,
// and every embedding shard holds the table.
ModelSpec with_learned_positions() {
  ModelSpec model = preset("tiny-llama");
  model.layers[0].embedding->learned_positions = 16;
  return model;
}

testing::UniformCase vocab_case(ScheduleKind kind, int stages, int data_parallel,
                                int tensor_parallel = 1) {
  testing::UniformCase c{kind, stages, 1, 4, data_parallel};
  c.tensor_parallel = tensor_parallel;
  c.vocab_parallel = true;
  return c;
}

// The shards' statistics give the whole vocabulary's cross-entropy, whatever the split, and its
// gradient with respect to each shard's logits is the full softmax's rows.
TEST(VocabularyShards, StatisticsCombineIntoTheWholeCrossEntropy) {
  at::manual_seed(3);
  const int64_t n = 6, vocab = 10;
  const at::Tensor logits = at::randn({n, vocab}, at::kDouble) * 4;
  const at::Tensor targets = at::tensor({0, 9, 3, 4, 7, 2}, at::kLong);
  const at::Tensor whole = logits.clone().requires_grad_(true);
  const at::Tensor expected = at::cross_entropy_loss(whole, targets);
  expected.backward();
  for (const std::vector<int64_t>& ends :
       {std::vector<int64_t>{10}, std::vector<int64_t>{4, 10}, std::vector<int64_t>{1, 7, 10}}) {
    std::vector<at::Tensor> parts, statistics;
    int64_t begin = 0;
    for (int64_t end : ends) {
      at::Tensor part = logits.narrow(1, begin, end - begin).clone().requires_grad_(true);
      const at::Tensor maximum = std::get<0>(part.detach().max(1));
      const at::Tensor sum_exp = (part - maximum.unsqueeze(1)).exp().sum(1);
      const at::Tensor local = targets - begin;
      const at::Tensor here = local.ge(0).logical_and(local.lt(end - begin));
      const at::Tensor target =
          part.gather(1, local.masked_fill(here.logical_not(), 0).unsqueeze(1)).squeeze(1) * here;
      statistics.push_back(at::stack({maximum, sum_exp, target}, 1));
      parts.push_back(part);
      begin = end;
    }
    const at::Tensor loss = vocab_shard_loss(statistics);
    EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-12) << ends.size() << " shards";
    loss.backward();
    begin = 0;
    for (size_t k = 0; k < ends.size(); ++k) {
      EXPECT_TRUE(at::allclose(parts[k].grad(), whole.grad().narrow(1, begin, ends[k] - begin),
                               1e-12, 1e-12))
          << "shard " << k << " of " << ends.size();
      begin = ends[k];
    }
  }
}

TEST(VocabularyShards, BothEndsOverTwoGroupsWithReplicasMatchReference) {
  const ModelSpec model = with_learned_positions();
  const Plan plan = uniform_plan(model, vocab_case(ScheduleKind::k1f1b, 2, 2));
  ASSERT_EQ(plan.stages.size(), 6u);
  ASSERT_TRUE(plan.stages[0].is_vocab_shard() && plan.stages[5].is_vocab_shard());
  expect_matches_reference(plan, model);
}

// Three shards at each end, split into I and W: a head shard's W runs after its I took every
// shard's statistics.
TEST(VocabularyShards, ThreeShardsUnderAZeroBubbleOrderMatchReference) {
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = uniform_plan(model, vocab_case(ScheduleKind::kZbH1, 3, 1));
  ASSERT_EQ(plan.stages.size(), 9u);
  expect_matches_reference(plan, model);
}

// Rows the groups split unevenly (a faster group takes more of the head).
TEST(VocabularyShards, UnevenRowsMatchReference) {
  const ModelSpec model = preset("tiny-llama");
  Plan plan = uniform_plan(model, vocab_case(ScheduleKind::k1f1b, 2, 1));
  plan.stages[0].vocab_end = 64;
  plan.stages[1].vocab_begin = 64;
  plan.stages[4].vocab_end = 200;
  plan.stages[5].vocab_begin = 200;
  expect_matches_reference(plan, model);
}

// Each shard split again by rows over a tensor-parallel group of two.
TEST(VocabularyShards, TensorParallelInsideEachShardMatchesReference) {
  const ModelSpec model = with_learned_positions();
  expect_matches_reference(
      uniform_plan(model, vocab_case(ScheduleKind::k1f1b, 2, 1, /*tensor_parallel=*/2)), model);
}

// Gemma-style: the embedding and the head share one matrix; each shard holds it whole and uses
// its rows, and the gradient is summed over every holder.
TEST(VocabularyShards, TiedMatrixWithReplicasMatchesReference) {
  const ModelSpec model = preset("tiny-gemma");
  expect_matches_reference(uniform_plan(model, vocab_case(ScheduleKind::k1f1b, 2, 2)), model);
}

// Each rank of a shard's group holds the whole tied matrix and uses its share of the shard's
// rows.
TEST(VocabularyShards, TiedMatrixWithTensorParallelismMatchesReference) {
  const ModelSpec model = preset("tiny-gemma");
  expect_matches_reference(
      uniform_plan(model, vocab_case(ScheduleKind::k1f1b, 2, 1, /*tensor_parallel=*/2)), model);
}

TEST(VocabularyShards, DistributedOptimizerMatchesReference) {
  const ModelSpec model = preset("tiny-llama");
  Plan plan = uniform_plan(model, vocab_case(ScheduleKind::k1f1b, 2, 2));
  plan.zero_stage = 1;
  expect_matches_reference(plan, model);
}

// A checkpoint of a sharded run holds whole tensors: resuming it without shards (and the other
// way round) continues as the uninterrupted run does.
TEST(VocabularyShards, CheckpointsResumeWithAndWithoutShards) {
  const ModelSpec model = with_learned_positions();
  const Plan sharded = uniform_plan(model, vocab_case(ScheduleKind::k1f1b, 2, 2));
  const Plan whole = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 2});
  testing::expect_checkpoints_resume_across(sharded, whole, model, "motley-vocab-checkpoint");
}

}  // namespace
}  // namespace motley
