#include "motley/exec/transport.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "test_util.h"

namespace motley {
namespace {

// Runs `body(rank, transport)` on one thread per rank of `network` and joins them.
void run_ranks(InProcessNetwork& network, const std::function<void(int, Transport&)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < network.world_size(); ++r) {
    threads.emplace_back([&network, &body, r] {
      auto transport = network.endpoint(r);
      body(r, *transport);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(InProcessTransport, ReceivePostedBeforeOrAfterTheSendGetsTheData) {
  InProcessNetwork network(2);
  at::Tensor got_early = at::zeros({3});
  at::Tensor got_late = at::zeros({3});
  run_ranks(network, [&](int rank, Transport& t) {
    if (rank == 0) {
      auto a = t.send(at::full({3}, 1.5f), 1, 10, "a");
      auto b = t.send(at::full({3}, 2.5f), 1, 11, "b");
      ASSERT_TRUE(a.is_ok() && b.is_ok());
      EXPECT_TRUE((*a)->wait().is_ok());
      EXPECT_TRUE((*b)->wait().is_ok());
    } else {
      auto early = t.recv(got_early, 0, 10, "a");
      ASSERT_TRUE(early.is_ok());
      EXPECT_TRUE((*early)->wait().is_ok());
      // By now the send of tag 11 is posted and waiting for this receive.
      auto late = t.recv(got_late, 0, 11, "b");
      ASSERT_TRUE(late.is_ok());
      EXPECT_TRUE((*late)->wait().is_ok());
    }
  });
  EXPECT_TRUE(at::equal(got_early, at::full({3}, 1.5f)));
  EXPECT_TRUE(at::equal(got_late, at::full({3}, 2.5f)));
}

TEST(InProcessTransport, MatchesByTagNotByOrder) {
  InProcessNetwork network(2);
  at::Tensor first = at::zeros({2});
  at::Tensor second = at::zeros({2});
  run_ranks(network, [&](int rank, Transport& t) {
    if (rank == 0) {
      auto x = t.send(at::full({2}, 5.0f), 1, 5, "x");
      auto y = t.send(at::full({2}, 3.0f), 1, 3, "y");
      EXPECT_TRUE((*x)->wait().is_ok());
      EXPECT_TRUE((*y)->wait().is_ok());
    } else {
      auto y = t.recv(first, 0, 3, "y");
      auto x = t.recv(second, 0, 5, "x");
      EXPECT_TRUE((*y)->wait().is_ok());
      EXPECT_TRUE((*x)->wait().is_ok());
    }
  });
  EXPECT_TRUE(at::equal(first, at::full({2}, 3.0f)));
  EXPECT_TRUE(at::equal(second, at::full({2}, 5.0f)));
}

TEST(InProcessTransport, ASendWithoutReceiverDoesNotComplete) {
  // No eager buffering: a lone send times out like a lone receive.
  InProcessNetwork network(2, TransportOptions{Seconds(0.05)});
  auto t0 = network.endpoint(0);
  auto send = t0->send(at::ones({4}), 1, 9, "the activation of stage 0, micro-batch 4");
  ASSERT_TRUE(send.is_ok());
  Status status = (*send)->wait();
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_EQ(status.message(),
            "rank 0: timed out after 0.05 s waiting to send the activation of stage 0, "
            "micro-batch 4 to rank 1 (tag 9); the peer never posted the matching receive");
}

TEST(InProcessTransport, ReceiveTimesOutNamingPeerAndMessage) {
  InProcessNetwork network(2, TransportOptions{Seconds(0.05)});
  auto t1 = network.endpoint(1);
  auto recv = t1->recv(at::zeros({4}), 0, 6, "the activation of stage 0, micro-batch 3");
  ASSERT_TRUE(recv.is_ok());
  Status status = (*recv)->wait();
  EXPECT_EQ(status.message(),
            "rank 1: timed out after 0.05 s waiting to receive the activation of stage 0, "
            "micro-batch 3 from rank 0 (tag 6); the peer never posted the matching send");
  // The same Status again, and the withdrawn receive no longer matches a late send.
  EXPECT_EQ((*recv)->wait().message(), status.message());
  auto t0 = network.endpoint(0);
  auto late = t0->send(at::ones({4}), 1, 6, "late");
  EXPECT_EQ((*late)->wait().code(), StatusCode::kIoError);
}

TEST(InProcessTransport, ShapeMismatchFailsBothEnds) {
  InProcessNetwork network(2);
  auto t0 = network.endpoint(0);
  auto t1 = network.endpoint(1);
  auto recv = t1->recv(at::zeros({2, 3}), 0, 1, "r");
  auto send = t0->send(at::zeros({3, 2}), 1, 1, "s");
  Status a = (*recv)->wait();
  Status b = (*send)->wait();
  EXPECT_EQ(a.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.message(), b.message());
  EXPECT_NE(a.message().find("rank 0 sent a [3, 2] Float tensor with tag 1 but rank 1 posted a "
                             "[2, 3] Float buffer"),
            std::string::npos)
      << a.message();
}

TEST(InProcessTransport, RejectsBadPeerAndTag) {
  InProcessNetwork network(2);
  auto t0 = network.endpoint(0);
  EXPECT_FALSE(t0->send(at::ones({1}), 0, 1, "self").is_ok());
  EXPECT_FALSE(t0->send(at::ones({1}), 2, 1, "outside").is_ok());
  EXPECT_FALSE(t0->recv(at::ones({1}), 1, -1, "negative tag").is_ok());
  EXPECT_FALSE(t0->recv(at::ones({1}), 1, int64_t{1} << 31, "tag too large").is_ok());
}

TEST(InProcessTransport, AllReduceSumsOverOverlappingSubsets) {
  InProcessNetwork network(3);
  std::vector<at::Tensor> a(3), b(3);
  run_ranks(network, [&](int rank, Transport& t) {
    a[rank] = at::full({2}, static_cast<float>(rank + 1));
    b[rank] = at::full({1}, static_cast<float>(10 * (rank + 1)));
    // Sets in increasing order: {0, 2} then {1, 2}.
    if (rank != 1) {
      EXPECT_TRUE(t.all_reduce_sum({a[rank]}, {0, 2}).is_ok());
    }
    if (rank != 0) {
      EXPECT_TRUE(t.all_reduce_sum({b[rank]}, {1, 2}).is_ok());
    }
    EXPECT_TRUE(t.barrier().is_ok());
  });
  EXPECT_TRUE(at::equal(a[0], at::full({2}, 4.0f)));  // 1 + 3
  EXPECT_TRUE(at::equal(a[2], at::full({2}, 4.0f)));
  EXPECT_TRUE(at::equal(a[1], at::full({2}, 2.0f)));   // not a member: unchanged
  EXPECT_TRUE(at::equal(b[1], at::full({1}, 50.0f)));  // 20 + 30
  EXPECT_TRUE(at::equal(b[2], at::full({1}, 50.0f)));
}

TEST(InProcessTransport, AllToAllDeliversEveryBlockToItsMember) {
  InProcessNetwork network(3);
  run_ranks(network, [&](int rank, Transport& t) { testing::expect_all_to_all_delivers(rank, t); });
}

TEST(InProcessTransport, TheDefaultAllToAllThroughSumsDeliversTheSame) {
  // A wrapper that leaves all_to_all to Transport's own: block sizes, then blocks, in sums.
  InProcessNetwork network(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&network, r] {
      testing::DelayingTransport wrapped(network.endpoint(r), static_cast<uint64_t>(r));
      testing::expect_all_to_all_delivers(r, wrapped);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(InProcessTransport, AnAllToAllBufferOfTheWrongSizeFailsNamingBothRanks) {
  InProcessNetwork network(2);
  std::vector<Status> results(2);
  run_ranks(network, [&](int rank, Transport& t) {
    const std::vector<at::Tensor> send = {at::ones({2, 3}), at::ones({2, 3})};
    const std::vector<at::Tensor> recv = {at::zeros({2, 3}), at::zeros({rank == 0 ? 1 : 2, 3})};
    results[rank] = t.all_to_all(send, recv, {0, 1});
  });
  for (const Status& s : results) {
    EXPECT_EQ(s.message(),
              "all-to-all over ranks {0, 1}: rank 1 sends rank 0 a block of shape [2, 3], which "
              "posted a buffer of shape [1, 3] for it");
  }
}

TEST(InProcessTransport, RepeatedAllReducesOnOneSetStayInStep) {
  InProcessNetwork network(2);
  std::vector<float> results(2);
  run_ranks(network, [&](int rank, Transport& t) {
    at::Tensor x = at::full({1}, static_cast<float>(rank + 1));
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(t.all_reduce_sum({x}, {0, 1}).is_ok());
    results[rank] = x.item<float>();
  });
  EXPECT_EQ(results[0], 3.0f * 16.0f);  // 3, 6, 12, 24, 48
  EXPECT_EQ(results[1], 48.0f);
}

TEST(InProcessTransport, AllReduceTimesOutNamingTheMissingRank) {
  InProcessNetwork network(3, TransportOptions{Seconds(0.05)});
  auto t0 = network.endpoint(0);
  Status status = t0->all_reduce_sum({at::ones({1})}, {0, 2});
  EXPECT_EQ(status.message(),
            "rank 0: timed out after 0.05 s in collective #0 over ranks {0, 2}; not arrived: "
            "rank(s) 2");
  EXPECT_EQ(t0->all_reduce_sum({at::ones({1})}, {2, 0}).code(), StatusCode::kInvalidArgument);
}

TEST(InProcessTransport, ShutDownReleasesWaitersWithTheReason) {
  InProcessNetwork network(3);  // the default 30 s timeout: only the shutdown can end the waits
  Status recv_status, reduce_status;
  std::thread waiter([&] {
    auto t1 = network.endpoint(1);
    auto recv = t1->recv(at::zeros({2}), 0, 4, "the gradient of stage 1, micro-batch 0");
    recv_status = (*recv)->wait();
    reduce_status = t1->all_reduce_sum({at::ones({1})}, {1, 2});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  network.shut_down("rank 2 failed");
  waiter.join();
  EXPECT_EQ(recv_status.message(),
            "rank 1: stopped waiting to receive the gradient of stage 1, micro-batch 0 from rank 0 "
            "(tag 4): rank 2 failed");
  EXPECT_EQ(reduce_status.message(),
            "rank 1: stopped in collective #0 over ranks {1, 2}; not arrived: rank(s) 2: rank 2 "
            "failed");
}

}  // namespace
}  // namespace motley
