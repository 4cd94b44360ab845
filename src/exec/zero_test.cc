// ZeRO-1: with Plan::zero1 the replicas split their optimizer state by whole tensors; each steps
// the tensors it owns and sends the new values to the others. AdamW is per tensor, so the run
// must be bit-identical to the unsharded one while each rank holds about 1 / replicas of the
// moments. Ranks run as threads over the in-process transport.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "motley/exec/executor.h"
#include "motley/exec/train.h"
#include "test_util.h"

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

TEST(ZeroOne, ShardsTheMomentsAndChangesNoBit) {
  const ModelSpec model = preset("tiny-moe");
  Plan plain = uniform_plan(model, {ScheduleKind::kZbH1, 2, 1, 4, 2});
  Plan sharded = plain;
  sharded.zero1 = true;
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
