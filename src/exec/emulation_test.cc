// Emulation: the delayed transport delivers what was sent, to the right receive, and asks for
// the delays with the exact message sizes; an emulated run trains exactly as a native one.
#include "motley/exec/emulation.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
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

}  // namespace
}  // namespace motley
