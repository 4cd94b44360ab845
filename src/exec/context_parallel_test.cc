// Context parallelism: the replicas of a context-parallel group each run two of every
// sequence's 2c chunks through every layer, and attention gathers the members' keys and values.
// A member's outputs must be the whole sequence's rows at its positions, and whole runs must
// train as the sequential reference does. Ranks run as threads over the in-process transport.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <thread>

#include "motley/exec/executor.h"
#include "motley/exec/rank_layout.h"
#include "test_util.h"

namespace motley {
namespace {

using testing::expect_matches_reference;
using testing::preset;
using testing::uniform_plan;

Plan with_sequences_split(Plan plan, int c) {
  plan.context_parallel = c;
  // A group counts its micro-batches once.
  plan.global_batch /= c;
  return plan;
}

TEST(ContextParallel, PositionsAreMegatronsLoadBalancedChunks) {
  // 16 tokens over 2 members: chunks of 4, member 0 holds chunks 0 and 3, member 1 chunks 1, 2.
  EXPECT_TRUE(at::equal(context_parallel_positions(16, 2, 0),
                        at::cat({at::arange(0, 4, at::kLong), at::arange(12, 16, at::kLong)})));
  EXPECT_TRUE(at::equal(context_parallel_positions(16, 2, 1), at::arange(4, 12, at::kLong)));
  EXPECT_TRUE(at::equal(context_parallel_positions(16, 1, 0), at::arange(16, at::kLong)));
}

// Layers [begin, end) of `model` on two members, each given its positions' rows of one input,
// against the same layers on the whole sequence: outputs and input gradients at those rows.
void expect_members_compute_their_rows(const ModelSpec& model, int begin, int end,
                                       int64_t seq_len) {
  const int c = 2;
  InProcessNetwork network(c);
  at::manual_seed(3);
  const bool tokens_in = model.layers[begin].embedding.has_value();
  const at::Tensor whole_input =
      tokens_in
          ? at::randint(0, 256, {2, seq_len}, at::kLong)
          : at::randn({2, seq_len,
                       model.layers[begin].attention ? model.layers[begin].attention->hidden : 64});
  ParameterStore whole_store;
  auto whole =
      make_transformer_stage(model, begin, end, StageModuleOptions{7, seq_len, {}}, whole_store);
  ASSERT_TRUE(whole.is_ok()) << whole.status().message();
  at::Tensor whole_x = whole_input.clone();
  if (!tokens_in) whole_x.requires_grad_(true);
  const at::Tensor whole_out = (*whole)->forward(whole_x, at::Tensor());
  // A fixed weighting of the outputs, so every row's gradient differs.
  const at::Tensor weights = at::randn(whole_out.sizes());
  (whole_out * weights).sum().backward();
  at::Tensor out[c], grad[c], first_weight_grad[c];
  std::vector<std::thread> threads;
  for (int r = 0; r < c; ++r) {
    threads.emplace_back([&, r] {
      auto transport = network.endpoint(r);
      ParameterStore store;
      StageModuleOptions options{7, seq_len, {}};
      options.context_parallel = {
          r, c,
          [&](at::Tensor& t) {
            Status status = transport->all_reduce_sum({t}, {0, 1});
            if (!status.is_ok()) throw std::runtime_error(status.message());
          },
          [&](const std::vector<at::Tensor>& send, const std::vector<at::Tensor>& recv) {
            Status status = transport->all_to_all(send, recv, {0, 1});
            if (!status.is_ok()) throw std::runtime_error(status.message());
          }};
      auto stage = make_transformer_stage(model, begin, end, options, store);
      ASSERT_TRUE(stage.is_ok()) << stage.status().message();
      const at::Tensor positions = context_parallel_positions(seq_len, c, r);
      at::Tensor x = whole_input.index_select(1, positions);
      if (!tokens_in) x.requires_grad_(true);
      out[r] = (*stage)->forward(x, at::Tensor());
      (out[r] * weights.index_select(1, positions)).sum().backward();
      if (!tokens_in) grad[r] = x.grad();
      first_weight_grad[r] = (*stage)->parameters()[0].tensor.grad();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < c; ++r) {
    const at::Tensor positions = context_parallel_positions(seq_len, c, r);
    EXPECT_TRUE(at::allclose(out[r], whole_out.detach().index_select(1, positions), 1e-5, 1e-6))
        << "member " << r;
    if (!tokens_in) {
      EXPECT_TRUE(at::allclose(grad[r], whole_x.grad().index_select(1, positions), 1e-4, 1e-6))
          << "member " << r;
    }
  }
  // The members' weight gradients sum to the whole sequence's.
  EXPECT_TRUE(at::allclose(first_weight_grad[0] + first_weight_grad[1],
                           (*whole)->parameters()[0].tensor.grad(), 1e-4, 1e-6));
}

TEST(ContextParallel, AttentionWithSlidingWindowsSinksAndGqaSeesTheWholeSequence) {
  ModelSpec model = preset("tiny-gemma");  // sliding windows of 16 on alternate layers
  for (Layer& l : model.layers) {
    if (l.attention) l.attention->sinks = true;
  }
  expect_members_compute_their_rows(model, 1, 3, 48);
}

TEST(ContextParallel, LatentAttentionAndLearnedPositionsSeeTheWholeSequence) {
  expect_members_compute_their_rows(testing::deepseek_v2_lite_miniature(), 1, 3, 32);
  ModelSpec learned = preset("tiny-llama");
  learned.layers[0].embedding->learned_positions = 32;
  expect_members_compute_their_rows(learned, 0, 2, 32);
}

TEST(ContextParallel, OneFOneBOverTwoMembersMatchesReference) {
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = with_sequences_split(uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 2}), 2);
  ASSERT_TRUE(splits_sequences(plan));
  expect_matches_reference(plan, model);
}

TEST(ContextParallel, ZeroBubbleWithTensorParallelismAndSlidingWindowsMatchesReference) {
  const ModelSpec model = preset("tiny-gemma");
  const Plan plan = with_sequences_split(
      uniform_plan(model, {ScheduleKind::kZbH1, 2, 1, 4, 2, RecomputePolicy::kNone, 2}, 2, 32), 2);
  ASSERT_TRUE(splits_sequences(plan));
  expect_matches_reference(plan, model, testing::kSteps);
}

TEST(ContextParallel, FourMembersTwoGroupsWithRecomputeAndVocabularyShardsMatchReference) {
  const ModelSpec model = preset("tiny-llama");
  testing::UniformCase c{ScheduleKind::k1f1b, 2, 1, 2, 8, RecomputePolicy::kFull};
  c.vocab_parallel = true;
  const Plan plan = with_sequences_split(uniform_plan(model, c, 1, 32), 4);
  ASSERT_TRUE(splits_sequences(plan));
  expect_matches_reference(plan, model, testing::kSteps);
}

TEST(ContextParallel, GroupsWhoseReplicasDifferRunWholeSequences) {
  const ModelSpec model = preset("tiny-llama");
  Plan plan = with_sequences_split(uniform_plan(model, {ScheduleKind::kGpipe, 1, 1, 2, 2}), 2);
  std::vector<Action>& order = plan.replicas[1].groups[0].actions;
  std::swap(order[0], order[1]);
  EXPECT_FALSE(splits_sequences(plan));
  expect_matches_reference(plan, model, testing::kSteps);
}

TEST(ContextParallel, StageRefusesMambaAndSequencesThatDoNotSplit) {
  ParameterStore store;
  StageModuleOptions options{0, 16, {}};
  options.context_parallel = {
      0, 2, [](at::Tensor&) {},
      [](const std::vector<at::Tensor>&, const std::vector<at::Tensor>&) {}};
  auto mamba = make_transformer_stage(preset("tiny-hybrid"), 1, 2, options, store);
  ASSERT_FALSE(mamba.is_ok());
  EXPECT_EQ(
      mamba.status().message(),
      "model 'tiny-hybrid': layer 1 ('layers.0.mamba', mamba): a Mamba scan carries its state "
      "along the whole sequence, so it cannot run on a context-parallel group's share of it");
  options.seq_len = 18;
  auto uneven = make_transformer_stage(preset("tiny-llama"), 1, 2, options, store);
  ASSERT_FALSE(uneven.is_ok());
  EXPECT_EQ(uneven.status().message(),
            "model 'tiny-llama': a context-parallel group of 2 (as member 0) splits every "
            "sequence into 4 equal chunks, which sequences of 18 tokens do not give");
}

}  // namespace
}  // namespace motley
