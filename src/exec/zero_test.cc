// ZeRO-1: with Plan::zero1 the replicas split their optimizer state by whole tensors (largest
// first, each to the least loaded member); each steps the tensors it owns and sends the new
// values to the others. AdamW is per tensor, so the run must be bit-identical to the unsharded
// one while each rank holds about 1 / replicas of the moments. Ranks run as threads over the
// in-process transport.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <thread>

#include "motley/exec/executor.h"
#include "motley/exec/train.h"
#include "test_util.h"
#include "zero1.h"

namespace motley {
namespace {

using testing::exec_options;
using testing::preset;
using testing::uniform_plan;

std::vector<testing::RankRun> run(const Plan& plan, const ModelSpec& model, int steps) {
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  EXPECT_TRUE(tokens.is_ok());
  return testing::run_ranks(plan, model, *tokens, steps);
}

void expect_identical(const std::vector<testing::RankRun>& a,
                      const std::vector<testing::RankRun>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t r = 0; r < a.size(); ++r) {
    EXPECT_EQ(a[r].losses, b[r].losses) << "rank " << r;
    ASSERT_EQ(a[r].parameters.size(), b[r].parameters.size());
    for (size_t i = 0; i < a[r].parameters.size(); ++i) {  // both in name order
      const NamedTensor& x = a[r].parameters[i];
      const NamedTensor& y = b[r].parameters[i];
      ASSERT_EQ(x.name, y.name);
      EXPECT_TRUE(at::equal(x.tensor, y.tensor)) << x.name << " on rank " << r;
      EXPECT_TRUE(at::equal(x.tensor.grad(), y.tensor.grad()))
          << x.name << " gradient on rank " << r;
    }
  }
}

int64_t parameter_bytes(const testing::RankRun& r) {
  int64_t n = 0;
  for (const NamedTensor& p : r.parameters) n += p.tensor.numel() * 4;
  return n;
}

// Two stages over two replicas (no tied matrix): every parameter of rank r is summed with rank
// r + 2 alone, so the pair splits r's parameters by zero1_owners, member 0 being r.
TEST(ZeroOne, EachReplicaHoldsTheMomentsOfExactlyTheTensorsItOwns) {
  const ModelSpec model = preset("tiny-llama");
  Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 2});
  plan.zero_stage = 1;
  const std::vector<testing::RankRun> runs = run(plan, model, 1);
  ASSERT_EQ(runs.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    std::vector<int64_t> elements;  // parameter name order, as the set lists them
    for (const NamedTensor& p : runs[r].parameters) elements.push_back(p.tensor.numel());
    const std::vector<size_t> owner = internal::zero1_owners(elements, 2);
    int64_t owned = 0;
    for (size_t i = 0; i < owner.size(); ++i) {
      if (owner[i] == (r < 2 ? 0u : 1u)) owned += elements[i];
    }
    EXPECT_EQ(runs[r].optimizer_state_bytes, owned * 2 * 4) << "rank " << r;  // two fp32 moments
  }
}

// Ownership by zero1_owners; then the set {0, 1} of three tensors of 6, 4 and 3 elements: rank 0
// owns the first, rank 1 the others. Each rank starts from values of its own; the owners'
// values and moments win.
TEST(ZeroOne, OwnersAreLargestFirstToTheLeastLoadedAndShareTheirValuesAndMoments) {
  using internal::zero1_owners;
  // 10 -> 0; 7 -> 1; 5 -> 1 (7 < 10); 3 -> 0 (10 < 12); 3 -> 1 (12 < 13).
  EXPECT_EQ(zero1_owners({3, 10, 5, 7, 3}, 2), (std::vector<size_t>{0, 0, 1, 1, 1}));
  // Equal sizes in their order, ties to the lowest member.
  EXPECT_EQ(zero1_owners({4, 4, 4, 4}, 3), (std::vector<size_t>{0, 1, 2, 0}));
  EXPECT_EQ(zero1_owners({5, 6}, 1), (std::vector<size_t>{0, 0}));
  EXPECT_TRUE(zero1_owners({}, 2).empty());

  InProcessNetwork network(2);
  std::vector<std::vector<at::Tensor>> after(2), avg(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto transport = network.endpoint(rank);
      std::vector<at::Tensor> params;
      internal::GradientSumSets sets;
      for (int64_t n : {6, 4, 3}) {
        params.push_back(at::full({n}, 10.0f * static_cast<float>(rank + 1) + n));
        sets[{0, 1}].push_back(internal::GradientSum{params.back(), TensorSlice{}, false, 0});
      }
      const internal::Zero1Shards shards(sets, rank);
      EXPECT_EQ(shards.steps_here(params[0]), rank == 0);
      EXPECT_EQ(shards.steps_here(params[1]), rank == 1);
      EXPECT_EQ(shards.steps_here(params[2]), rank == 1);
      internal::AdamWStep optimizer(params, OptimizerOptions{});
      for (const at::Tensor& p : params) {
        if (shards.steps_here(p)) {
          optimizer.set_state(p, {2, p * 0.5, p * p});
        }
      }
      ASSERT_TRUE(shards.share_updates(*transport).is_ok());
      after[rank] = params;
      auto gathered = shards.gather_state(*transport, optimizer, 2);
      ASSERT_TRUE(gathered.is_ok()) << gathered.status().message();
      for (const at::Tensor& p : params) {
        const auto& state = gathered->at(p.unsafeGetTensorImpl());
        EXPECT_EQ(state.step, 2);
        avg[rank].push_back(state.exp_avg);
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::vector<float> owner_value = {16, 24, 23};  // rank 0's 10 + 6; rank 1's 20 + 4, 20 + 3
  for (int rank = 0; rank < 2; ++rank) {
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(at::equal(after[rank][i], at::full_like(after[rank][i], owner_value[i])))
          << "rank " << rank << " tensor " << i;
      EXPECT_TRUE(at::equal(avg[rank][i], at::full_like(avg[rank][i], owner_value[i] * 0.5f)))
          << "rank " << rank << " tensor " << i;
    }
  }
}

TEST(ZeroOne, ShardsTheMomentsAndChangesNoBit) {
  const ModelSpec model = preset("tiny-moe");
  Plan plain = uniform_plan(model, {ScheduleKind::kZbH1, 2, 1, 4, 2});
  Plan sharded = plain;
  sharded.zero_stage = 1;
  const std::vector<testing::RankRun> a = run(plain, model, 3);
  const std::vector<testing::RankRun> b = run(sharded, model, 3);
  expect_identical(b, a);
  for (size_t r = 0; r < a.size(); ++r) {
    // Unsharded: both moments of every parameter. Sharded over two replicas by whole tensors:
    // about half of that, the greedy split within the largest tensor of an even one.
    const int64_t full = a[r].optimizer_state_bytes;
    const int64_t shard = b[r].optimizer_state_bytes;
    EXPECT_EQ(full, 2 * parameter_bytes(a[r])) << "rank " << r;
    EXPECT_LT(shard, 0.6 * full) << "rank " << r;
    EXPECT_GT(shard, 0.4 * full) << "rank " << r;
  }
  // The two replicas' holders of a stage own complementary halves.
  EXPECT_EQ(b[0].optimizer_state_bytes + b[2].optimizer_state_bytes, a[0].optimizer_state_bytes);
}

TEST(ZeroOne, WithTensorParallelismChangesNoBit) {
  const ModelSpec model = preset("tiny-llama");
  Plan plain = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 2, RecomputePolicy::kNone, 2});
  Plan sharded = plain;
  sharded.zero_stage = 1;
  expect_identical(run(sharded, model, 3), run(plain, model, 3));
}

// The moments of a ZeRO-1 run are gathered into the checkpoint: resuming it without ZeRO-1
// continues bit for bit like the uninterrupted run.
TEST(ZeroOne, CheckpointsHoldEveryMoment) {
  testing::single_threaded();
  const ModelSpec model = preset("tiny-llama");
  Plan plain = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 2});
  Plan sharded = plain;
  sharded.zero_stage = 1;
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  ASSERT_TRUE(tokens.is_ok());
  const std::string dir = (std::filesystem::temp_directory_path() / "motley-zero1-ckpt").string();
  std::filesystem::remove_all(dir);
  TrainOptions options;
  options.exec = exec_options();
  options.steps = 4;
  auto uninterrupted = train_in_process(options, plain, model, *tokens);
  ASSERT_TRUE(uninterrupted.is_ok()) << uninterrupted.status().message();
  options.steps = 2;
  options.checkpoint_dir = dir;
  ASSERT_TRUE(train_in_process(options, sharded, model, *tokens).is_ok());
  options.checkpoint_dir.clear();
  options.resume_from = dir;
  auto plain_after = train_in_process(options, plain, model, *tokens);
  ASSERT_TRUE(plain_after.is_ok()) << plain_after.status().message();
  auto sharded_after = train_in_process(options, sharded, model, *tokens);
  ASSERT_TRUE(sharded_after.is_ok()) << sharded_after.status().message();
  const std::vector<double> tail(uninterrupted->losses.begin() + 2, uninterrupted->losses.end());
  EXPECT_EQ(plain_after->losses, tail);
  EXPECT_EQ(sharded_after->losses, tail);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace motley
