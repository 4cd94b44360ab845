// The host-memory check's arithmetic: 16 bytes of fp32 training state per parameter (8 + 8 /
// replicas with ZeRO-1), 1 / t of a stage's parameters per rank of a tensor-parallel group of
// t, and the share of the machine a rank may use.
#include "motley/exec/host_memory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "motley/model/layer_cost.h"
#include "test_plans.h"

namespace motley {
namespace {

using testing::preset;
using testing::uniform_plan;

double stage_params(const Plan& plan, const ModelSpec& model, int stage) {
  double n = 0;
  for (int l = plan.stages[stage].layer_begin; l < plan.stages[stage].layer_end; ++l) {
    n += static_cast<double>(layer_params(model.layers[l]));
  }
  return n;
}

TEST(TrainingState, SixteenBytesPerParameterSplitByTheTensorParallelDegree) {
  const ModelSpec model = preset("tiny-llama");
  // Two stages on groups of two devices, two replicas: ranks 0-1 and 2-3 are replica 0's.
  const Plan plan =
      uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 2, RecomputePolicy::kNone, 2});
  const double p0 = stage_params(plan, model, 0);
  const double p1 = stage_params(plan, model, 1);
  ASSERT_GT(p0, 0);
  ASSERT_GT(p1, 0);

  const TrainingState rank0 = training_state_bytes(plan, model, false, 0);
  EXPECT_EQ(rank0.ranks, 1);
  EXPECT_EQ(rank0.bytes.value(), p0 / 2 * 16);
  EXPECT_EQ(training_state_bytes(plan, model, false, 3).bytes.value(), p1 / 2 * 16);
  const TrainingState all = training_state_bytes(plan, model, false, -1);
  EXPECT_EQ(all.ranks, 8);
  EXPECT_EQ(all.bytes.value(), 2 * 2 * (p0 / 2 * 16 + p1 / 2 * 16));

  // ZeRO-1 over the two replicas: weights and gradients 8 bytes, the moments 8 / 2.
  Plan sharded = plan;
  sharded.zero_stage = 1;
  EXPECT_EQ(training_state_bytes(sharded, model, false, 0).bytes.value(), p0 / 2 * 12);

  // The sequential reference holds the whole model once, unsharded, whatever the plan.
  const TrainingState sequential = training_state_bytes(sharded, model, true, -1);
  EXPECT_EQ(sequential.ranks, 1);
  EXPECT_EQ(sequential.bytes.value(),
            16.0 * static_cast<double>(model_totals(model, Workload{}).total_params));
}

TEST(HostMemory, AShortfallIsAStateAboveTheRanksShareOfWhatIsAvailable) {
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 1});
  const Bytes needed = training_state_bytes(plan, model, false, 1).bytes;
  // Four ranks on this machine: each may use a quarter.
  EXPECT_FALSE(host_memory_shortfall(plan, model, false, 1, 4, needed * 4.0));
  const auto short_of = host_memory_shortfall(plan, model, false, 1, 4, needed * 3.0);
  ASSERT_TRUE(short_of);
  EXPECT_EQ(short_of->needed.bytes.value(), needed.value());
  EXPECT_EQ(short_of->needed.ranks, 1);
  EXPECT_EQ(short_of->available.value(), needed.value() * 3);
  EXPECT_EQ(short_of->share.value(), needed.value() * 3 / 4);
  EXPECT_EQ(short_of->local_ranks, 4);
  // Nothing to compare with: no check.
  EXPECT_FALSE(host_memory_shortfall(plan, model, false, 1, 4, std::nullopt));
}

TEST(HostMemory, ThisMachineReportsWhatIsAvailable) {
  const std::optional<Bytes> available = available_memory_bytes();
  ASSERT_TRUE(available);  // /proc/meminfo on Linux
  EXPECT_GT(available->value(), 0);
}

#if defined(__GLIBC__)
// In a fresh process (the death test re-executes this binary), whether an 8 MiB block, an
// activation's size, comes from the heap rather than a mapping of its own and stays there once
// freed. Exit code 0: it does; 1: it was mapped; 2: the heap gave it back.
[[noreturn]] void exit_with_where_a_freed_block_went(bool keep) {
  if (keep && !keep_freed_host_buffers()) std::_Exit(3);
  constexpr size_t kBlock = size_t{8} << 20;
  const struct mallinfo2 before = mallinfo2();
  void* volatile block = std::malloc(kBlock);
  std::memset(block, 1, kBlock);
  const struct mallinfo2 held = mallinfo2();
  std::free(block);
  const struct mallinfo2 after = mallinfo2();
  if (held.hblks > before.hblks) std::_Exit(1);
  if (after.arena < held.arena || after.fordblks < kBlock) std::_Exit(2);
  std::_Exit(0);
}

bool malloc_tuned_by_the_environment() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables != nullptr && std::string(tunables).find("glibc.malloc.") != std::string::npos;
}

// AddressSanitizer, ThreadSanitizer and MemorySanitizer bring their own malloc, which mallopt
// does not steer (theirs returns 0) and mallinfo2 does not describe.
constexpr bool kSanitizerMalloc =
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
    true;
#else
    false;
#endif
#else
    false;
#endif

TEST(HostBuffersDeathTest, AFreedActivationStaysInTheHeapForTheNextPass) {
  if (malloc_tuned_by_the_environment()) GTEST_SKIP() << "GLIBC_TUNABLES sets malloc";
  if (kSanitizerMalloc) GTEST_SKIP() << "a sanitizer's malloc, not glibc's";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(exit_with_where_a_freed_block_went(true), ::testing::ExitedWithCode(0), "");
  // glibc's own default maps such a block, and unmaps it when freed.
  EXPECT_EXIT(exit_with_where_a_freed_block_went(false), ::testing::ExitedWithCode(1), "");
}
#endif

}  // namespace
}  // namespace motley
