// Emulation: the delayed transport delivers what was sent, to the right receive, and asks for
// the delays with the exact message sizes; an emulated run trains exactly as a native one; the
// factors motley computes price every rank set the executor sums over; and the ranks of a world
// agree on one time scale.
#include "motley/exec/emulation.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "test_util.h"

namespace motley {
namespace {

using testing::exec_options;
using testing::preset;
using testing::uniform_plan;

struct MessageCall {
  int src;
  int dst;
  int64_t bytes;
  friend bool operator==(const MessageCall&, const MessageCall&) = default;
};

TEST(DelayedTransport, DeliversEachSendToItsReceiveAndPricesItsBytes) {
  InProcessNetwork network(2);
  auto rank0 = network.endpoint(0);
  auto rank1 = network.endpoint(1);
  std::mutex mu;
  std::vector<MessageCall> calls;
  auto delayed = make_delayed_transport(
      *rank0,
      [&](int src, int dst, int64_t bytes) {
        std::lock_guard<std::mutex> lock(mu);
        calls.push_back({src, dst, bytes});
        return Seconds(1e-3);
      },
      nullptr);
  EXPECT_EQ(delayed->rank(), 0);
  EXPECT_EQ(delayed->world_size(), 2);
  // Two messages on one tag match in posting order; a third on another tag goes to its own.
  const at::Tensor a = at::arange(3, at::kFloat);
  const at::Tensor b = at::arange(3, at::kFloat) + 10;
  const at::Tensor c = at::arange(5, at::kFloat) + 20;
  at::Tensor got_a = at::zeros({3}), got_b = at::zeros({3}), got_c = at::zeros({5});
  auto recv_c = rank1->recv(got_c, 0, 9, "c");
  auto recv_a = rank1->recv(got_a, 0, 4, "a");
  auto recv_b = rank1->recv(got_b, 0, 4, "b");
  auto send_a = delayed->send(a, 1, 4, "a");
  auto send_b = delayed->send(b, 1, 4, "b");
  auto send_c = delayed->send(c, 1, 9, "c");
  for (auto* r : {&recv_a, &recv_b, &recv_c, &send_a, &send_b, &send_c}) {
    ASSERT_TRUE(r->is_ok()) << r->status().message();
    EXPECT_TRUE((**r)->wait().is_ok());
  }
  EXPECT_TRUE(at::equal(got_a, a));
  EXPECT_TRUE(at::equal(got_b, b));
  EXPECT_TRUE(at::equal(got_c, c));
  EXPECT_EQ(calls, (std::vector<MessageCall>{{0, 1, 12}, {0, 1, 12}, {0, 1, 20}}));
}

TEST(DelayedTransport, AllReducesSumAndArePricedPerMemberBytes) {
  InProcessNetwork network(2);
  std::mutex mu;
  std::vector<std::pair<std::vector<int>, int64_t>> calls;
  std::vector<std::vector<at::Tensor>> tensors(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto endpoint = network.endpoint(rank);
      auto delayed =
          make_delayed_transport(*endpoint, nullptr, [&](const std::vector<int>& ranks, int64_t n) {
            std::lock_guard<std::mutex> lock(mu);
            calls.emplace_back(ranks, n);
            return Seconds(1e-4);
          });
      tensors[rank] = {at::full({2}, rank + 1.0, at::kFloat), at::full({3}, 10.0 * rank)};
      EXPECT_TRUE(delayed->all_reduce_sum(tensors[rank], {0, 1}).is_ok());
      EXPECT_TRUE(delayed->all_reduce_sum(tensors[rank], {rank}).is_ok());  // not priced
      EXPECT_TRUE(delayed->barrier().is_ok());
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(at::equal(tensors[rank][0], at::full({2}, 3.0, at::kFloat)));
    EXPECT_TRUE(at::equal(tensors[rank][1], at::full({3}, 10.0, at::kFloat)));
  }
  ASSERT_EQ(calls.size(), 2u);
  for (const auto& [ranks, bytes] : calls) {
    EXPECT_EQ(ranks, (std::vector<int>{0, 1}));
    EXPECT_EQ(bytes, 5 * 4);  // 2 + 3 floats per member
  }
}

TEST(Emulation, TrainsExactlyAsANativeRunAndSeesEveryComputeAction) {
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = uniform_plan(model, {ScheduleKind::kZbH1, 2, 1, 4, 2});
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  testing::single_threaded();
  TrainOptions native;
  native.exec = exec_options();
  native.steps = 2;
  auto expected = train_in_process(native, plan, model, *tokens);
  ASSERT_TRUE(expected.is_ok()) << expected.status().message();

  TrainOptions emulated = native;
  std::mutex mu;
  std::vector<int> actions_seen(4, 0);
  std::atomic<int> messages{0};
  std::atomic<int> all_reduces{0};
  emulated.exec.after_action = [&](int rank, int64_t, const Action&, Seconds) {
    std::lock_guard<std::mutex> lock(mu);
    ++actions_seen[rank];
  };
  EmulationOptions emulation;
  emulation.compute_slowdown = {1.0, 1.5, 1.0, 2.0};
  emulation.message_time = [&](int, int, int64_t) {
    ++messages;
    return Seconds(2e-4);
  };
  emulation.all_reduce_time = [&](const std::vector<int>&, int64_t) {
    ++all_reduces;
    return Seconds(1e-4);
  };
  apply_emulation(emulation, &emulated);
  auto report = train_in_process(emulated, plan, model, *tokens);
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->losses, expected->losses);  // delays change timing, never values
  // ZB-H1 with 4 micro-batches: each group runs F, I and W per micro-batch, every step.
  EXPECT_EQ(actions_seen, (std::vector<int>{24, 24, 24, 24}));
  // Per step and replica the one boundary carries 4 activations forward and 4 gradients back.
  EXPECT_EQ(messages.load(), 2 * 2 * (4 + 4));
  // Per step, the two replicas of each stage sum its gradients (ranks {0, 2} and {1, 3}), one
  // all-reduce per layer (layers 0-2 on stage 0, 3-5 on stage 1) and one for the loss.
  EXPECT_EQ(all_reduces.load(), 2 * (3 + 4 + 3 + 4));
}

// The rank sets of two or more that the ranks of `plan` prepare and all-reduce over in a step
// and a checkpoint save (tensor-parallel sums, gradient sums, ZeRO-1 shares and gathers).
std::set<std::vector<int>> sets_used(const Plan& plan, const ModelSpec& model) {
  testing::single_threaded();
  auto tokens = TokenStream::from_text(synthetic_corpus(4096, 3), "corpus");
  EXPECT_TRUE(tokens.is_ok());
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("motley-emulated-sets-" + std::to_string(::getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  const int world = testing::world_size(plan);
  InProcessNetwork network(world);
  std::mutex mu;
  std::set<std::vector<int>> used;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      testing::RecordingTransport transport(network.endpoint(rank));
      auto executor = RankExecutor::create(exec_options(), plan, model, *tokens, transport);
      ASSERT_TRUE(executor.is_ok()) << executor.status().message();
      ASSERT_TRUE((*executor)->step().is_ok());
      ASSERT_TRUE((*executor)->save_checkpoint(dir).is_ok());
      std::lock_guard<std::mutex> lock(mu);
      for (const std::vector<int>& set : transport.prepared()) {
        if (set.size() > 1) used.insert(set);
      }
      for (const testing::RecordingTransport::Sum& sum : transport.sums()) {
        if (sum.ranks.size() > 1) used.insert(sum.ranks);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(dir);
  return used;
}

void expect_every_set_priced(const Plan& plan, const ModelSpec& model) {
  const std::vector<std::vector<int>> priced = emulated_rank_sets(plan);
  const std::set<std::vector<int>> used = sets_used(plan, model);
  EXPECT_FALSE(used.empty());
  for (const std::vector<int>& set : used) {
    EXPECT_NE(std::find(priced.begin(), priced.end(), set), priced.end())
        << "a sum over " << ::testing::PrintToString(set) << " is not priced";
  }
}

TEST(Emulation, EveryRankSetTheExecutorSumsOverIsPriced) {
  {
    SCOPED_TRACE("tied head on another group, two replicas of groups of two, ZeRO-1");
    const ModelSpec model = preset("tiny-gemma");
    Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 2, RecomputePolicy::kNone, 2});
    plan.zero_stage = 1;
    expect_every_set_priced(plan, model);
  }
  {
    SCOPED_TRACE("V shape: the tied embedding and head on one group");
    const ModelSpec model = preset("tiny-gemma");
    expect_every_set_priced(uniform_plan(model, {ScheduleKind::kZbV, 2, 2, 2, 2}), model);
  }
  {
    SCOPED_TRACE("replicas of different tensor-parallel degrees");
    const ModelSpec model = preset("tiny-llama");
    Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 2});
    plan.replicas[0].groups[0].devices = {0, 1};
    plan.replicas[0].groups[1].devices = {2, 3};
    plan.replicas[1].groups[0].devices = {4};
    plan.replicas[1].groups[1].devices = {5};
    expect_every_set_priced(plan, model);
  }
}

// The options scale the factors' times by the time scale, on which a world's ranks agree.
TEST(Emulation, OptionsScaleTheFactorsByOneTimeScaleTheRanksAgreeOn) {
  EmulationFactors f;
  f.speeds = "peak";
  f.device_types = {"a", "b"};
  f.compute_slowdown = {1.0, 2.5};
  f.cluster_step = Seconds(1);
  f.wire_bytes_per_byte = 0.5;
  f.links = {EmulatedLink{0, 1, Seconds(1e-5), BytesPerSecond(1e9)}};
  EmulatedAllReduce a;
  a.ranks = {0, 1};
  a.bytes = {0, 1e6};
  a.seconds = {1e-5, 1e-3};
  f.all_reduces = {a};
  const EmulationOptions options = emulation_options(f, 3.0);
  EXPECT_EQ(options.compute_slowdown, f.compute_slowdown);
  EXPECT_EQ(options.message_time(0, 1, 4000).value(), 3.0 * (1e-5 + 2000 / 1e9));
  EXPECT_EQ(options.message_time(1, 0, 4000).value(), 0);
  EXPECT_EQ(options.all_reduce_time({0, 1}, 2000000).value(), 3.0 * 1e-3);

  testing::single_threaded();
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 1});
  auto tokens = TokenStream::from_text(synthetic_corpus(4096, 3), "corpus");
  ASSERT_TRUE(tokens.is_ok());
  InProcessNetwork network(2);
  std::vector<double> scale(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto world = network.endpoint(rank);
      auto s =
          emulation_time_scale(exec_options(), plan, model, *tokens, Seconds(1e-3), world.get());
      ASSERT_TRUE(s.is_ok()) << s.status().message();
      scale[rank] = *s;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(scale[0], 0);
  EXPECT_EQ(scale[0], scale[1]);
}

}  // namespace
}  // namespace motley
