// ZeRO-1: with Plan::zero1 the replicas split their optimizer state by whole tensors; each steps
// the tensors it owns and sends the new values to the others. AdamW is per tensor, so the run
// must be bit-identical to the unsharded one while each rank holds about 1 / replicas of the
// moments. Ranks run as threads over the in-process transport.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <thread>

#include "motley/exec/executor.h"
#include "motley/exec/train.h"
#include "test_util.h"

namespace motley {
namespace {

using testing::exec_options;
using testing::preset;
using testing::uniform_plan;

struct RunResult {
  std::vector<std::vector<std::optional<double>>> losses;  // [rank][step]
  std::vector<std::map<std::string, at::Tensor>> parameters;
  std::vector<int64_t> state_bytes;
};

RunResult run(const Plan& plan, const ModelSpec& model, int steps) {
  testing::single_threaded();
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  EXPECT_TRUE(tokens.is_ok());
  const int world = testing::world_size(plan);
  InProcessNetwork network(world);
  RunResult out;
  out.losses.resize(world);
  out.parameters.resize(world);
  out.state_bytes.resize(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Transport> transport = network.endpoint(rank);
      auto executor = RankExecutor::create(exec_options(), plan, model, *tokens, *transport);
      if (!executor.is_ok()) {
        ADD_FAILURE() << executor.status().message();
        network.shut_down("failed");
        return;
      }
      for (int s = 0; s < steps; ++s) {
        auto result = (*executor)->step();
        if (!result.is_ok()) {
          ADD_FAILURE() << result.status().message();
          network.shut_down("failed");
          return;
        }
        out.losses[rank].push_back(result->loss);
      }
      for (const NamedTensor& p : (*executor)->parameters())
        out.parameters[rank][p.name] = p.tensor;
      out.state_bytes[rank] = (*executor)->optimizer_state_bytes();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

void expect_identical(const RunResult& a, const RunResult& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t r = 0; r < a.losses.size(); ++r) {
    EXPECT_EQ(a.losses[r], b.losses[r]) << "rank " << r;
    ASSERT_EQ(a.parameters[r].size(), b.parameters[r].size());
    for (const auto& [name, tensor] : a.parameters[r]) {
      EXPECT_TRUE(at::equal(tensor, b.parameters[r].at(name))) << name << " on rank " << r;
      EXPECT_TRUE(at::equal(tensor.grad(), b.parameters[r].at(name).grad()))
          << name << " gradient on rank " << r;
    }
  }
}

int64_t parameter_bytes(const RunResult& r, size_t rank) {
  int64_t n = 0;
  for (const auto& [name, t] : r.parameters[rank]) n += t.numel() * 4;
  return n;
}

TEST(ZeroOne, ShardsTheMomentsAndChangesNoBit) {
  const ModelSpec model = preset("tiny-moe");
  Plan plain = uniform_plan(model, {ScheduleKind::kZbH1, 2, 1, 4, 2});
  Plan sharded = plain;
  sharded.zero1 = true;
  const RunResult a = run(plain, model, 3);
  const RunResult b = run(sharded, model, 3);
  expect_identical(b, a);
  for (size_t r = 0; r < a.state_bytes.size(); ++r) {
    // Unsharded: both moments of every parameter. Sharded over two replicas by whole tensors:
    // about half of that, the greedy split within the largest tensor of an even one.
    EXPECT_EQ(a.state_bytes[r], 2 * parameter_bytes(a, r)) << "rank " << r;
    EXPECT_LT(b.state_bytes[r], 0.6 * a.state_bytes[r]) << "rank " << r;
    EXPECT_GT(b.state_bytes[r], 0.4 * a.state_bytes[r]) << "rank " << r;
  }
  // The two replicas' holders of a stage own complementary halves.
  EXPECT_EQ(b.state_bytes[0] + b.state_bytes[2], a.state_bytes[0]);
}

TEST(ZeroOne, WithTensorParallelismChangesNoBit) {
  const ModelSpec model = preset("tiny-llama");
  Plan plain = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 2, RecomputePolicy::kNone, 2});
  Plan sharded = plain;
  sharded.zero1 = true;
  expect_identical(run(sharded, model, 3), run(plain, model, 3));
}

// The moments of a ZeRO-1 run are gathered into the checkpoint: resuming it without ZeRO-1
// continues bit for bit like the uninterrupted run.
TEST(ZeroOne, CheckpointsHoldEveryMoment) {
  testing::single_threaded();
  const ModelSpec model = preset("tiny-llama");
  Plan plain = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 2});
  Plan sharded = plain;
  sharded.zero1 = true;
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
