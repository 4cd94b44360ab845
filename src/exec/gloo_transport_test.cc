#include "motley/exec/gloo_transport.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <thread>

#include "test_util.h"

namespace motley {
namespace {

using testing::free_port;

// Each rank a thread with its own TCPStore client and ProcessGroupGloo on localhost.
void run_gloo_ranks(int world_size, Seconds timeout,
                    const std::function<void(int, Transport&)>& body) {
  const int port = free_port();
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions options;
      options.rank = r;
      options.world_size = world_size;
      options.master_port = port;
      options.hostname = "127.0.0.1";
      options.transport.timeout = timeout;
      auto transport = connect_gloo(options);
      ASSERT_TRUE(transport.is_ok()) << transport.status().message();
      body(r, **transport);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooTransport, SendRecvMatchByTagAndSubsetAllReduce) {
  std::vector<at::Tensor> got(2);
  std::vector<at::Tensor> sums(3);
  run_gloo_ranks(3, Seconds(20), [&](int rank, Transport& t) {
    EXPECT_EQ(t.rank(), rank);
    EXPECT_EQ(t.world_size(), 3);
    if (rank == 0) {
      // Two messages of 4 MB each, sent in one order and received in the other.
      auto a = t.send(at::full({1 << 20}, 1.0f), 1, 4, "message a");
      auto b = t.send(at::full({1 << 20}, 2.0f), 1, 7, "message b");
      ASSERT_TRUE(a.is_ok() && b.is_ok());
      EXPECT_TRUE((*a)->wait().is_ok());
      EXPECT_TRUE((*b)->wait().is_ok());
    } else if (rank == 1) {
      got[0] = at::zeros({1 << 20});
      got[1] = at::zeros({1 << 20});
      auto b = t.recv(got[1], 0, 7, "message b");
      auto a = t.recv(got[0], 0, 4, "message a");
      ASSERT_TRUE(a.is_ok() && b.is_ok());
      EXPECT_TRUE((*b)->wait().is_ok());
      EXPECT_TRUE((*a)->wait().is_ok());
    }
    // Two tensors of different shapes over {1, 2}; rank 0 is not a member.
    sums[rank] = at::full({2, 3}, static_cast<float>(rank));
    at::Tensor scalar = at::full({1}, static_cast<float>(10 * rank));
    if (rank != 0) {
      Status s = t.all_reduce_sum({sums[rank], scalar}, {1, 2});
      EXPECT_TRUE(s.is_ok()) << s.message();
      EXPECT_EQ(scalar.item<float>(), 30.0f);
    }
    EXPECT_TRUE(t.barrier().is_ok());
  });
  EXPECT_TRUE(at::equal(got[0], at::full({1 << 20}, 1.0f)));
  EXPECT_TRUE(at::equal(got[1], at::full({1 << 20}, 2.0f)));
  EXPECT_TRUE(at::equal(sums[0], at::full({2, 3}, 0.0f)));
  EXPECT_TRUE(at::equal(sums[1], at::full({2, 3}, 3.0f)));
  EXPECT_TRUE(at::equal(sums[2], at::full({2, 3}, 3.0f)));
}

TEST(GlooTransport, AllToAllOverASubsetDeliversEveryBlock) {
  run_gloo_ranks(3, Seconds(20), [&](int rank, Transport& t) {
    testing::expect_all_to_all_delivers(rank, t);
    EXPECT_TRUE(t.barrier().is_ok());
  });
}

TEST(GlooTransport, ReceiveTimesOutNamingPeerAndMessage) {
  std::atomic<bool> receiver_done{false};
  run_gloo_ranks(2, Seconds(0.5), [&](int rank, Transport& t) {
    if (rank == 0) {
      // Stay connected (a closed connection would fail the receive before its timeout).
      while (!receiver_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } else {
      auto recv = t.recv(at::zeros({4}), 0, 6, "the activation of stage 0, micro-batch 3");
      ASSERT_TRUE(recv.is_ok());
      Status status = (*recv)->wait();
      EXPECT_EQ(status.code(), StatusCode::kIoError);
      EXPECT_EQ(status.message().rfind("rank 1: receiving the activation of stage 0, "
                                       "micro-batch 3 from rank 0 (tag 6) failed or timed out "
                                       "(limit 0.5 s): ",
                                       0),
                0u)
          << status.message();
      EXPECT_NE(status.message().find("Timed out"), std::string::npos) << status.message();
      receiver_done = true;
    }
  });
}

TEST(GlooOptionsFromEnv, ReadsTheTorchVariables) {
  std::map<std::string, std::string> env = {
      {"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "1234"}};
  auto getenv = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto options = gloo_options_from_env(getenv);
  ASSERT_TRUE(options.is_ok()) << options.status().message();
  EXPECT_EQ(options->rank, 2);
  EXPECT_EQ(options->world_size, 4);
  EXPECT_EQ(options->master_addr, "10.0.0.1");
  EXPECT_EQ(options->master_port, 1234);

  env["RANK"] = "4";
  EXPECT_EQ(gloo_options_from_env(getenv).status().message(),
            "environment variable RANK: expected an integer in [0, 3], got '4'");
  env.erase("WORLD_SIZE");
  EXPECT_EQ(gloo_options_from_env(getenv).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace motley
