// The communication benchmark: the alpha-beta fit on exact data, nccl-tests' bus factors, the
// size sweep, and whole runs over the in-process transport (ranks as threads), including a
// transport that corrupts messages, which must be an error on every rank. No wall-clock values
// are asserted beyond positive and finite.
#include "motley/profile/comm_benchmark.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>

namespace motley {
namespace {

TEST(CommFitTest, RecoversLatencyAndBandwidthFromExactData) {
  // alpha = 2^-16 s, 1 / beta = 2^-30 s per byte: every product and sum below is exact.
  const double alpha = std::ldexp(1.0, -16);
  const double per_byte = std::ldexp(1.0, -30);
  std::vector<std::pair<Bytes, Seconds>> points;
  for (int k = 1; k <= 4; ++k) {
    const double n = k * std::ldexp(1.0, 20);
    points.emplace_back(Bytes(n), Seconds(alpha + n * per_byte));
  }
  auto fit = fit_alpha_beta(points);
  ASSERT_TRUE(fit.is_ok()) << fit.status().message();
  EXPECT_DOUBLE_EQ(fit.value().latency.value(), alpha);
  EXPECT_DOUBLE_EQ(fit.value().bandwidth.value(), std::ldexp(1.0, 30));
}

TEST(CommFitTest, NegativeInterceptRefitsThroughTheOrigin) {
  // Least squares over (1, 0), (2, 0), (3, 3): slope 1.5, intercept -2 < 0; through the origin
  // the slope is sum(n t) / sum(n^2) = 9 / 14.
  auto fit =
      fit_alpha_beta({{Bytes(1), Seconds(0)}, {Bytes(2), Seconds(0)}, {Bytes(3), Seconds(3)}});
  ASSERT_TRUE(fit.is_ok()) << fit.status().message();
  EXPECT_EQ(fit.value().latency.value(), 0.0);
  EXPECT_DOUBLE_EQ(fit.value().bandwidth.value(), 14.0 / 9.0);
}

TEST(CommFitTest, NeedsTwoSizesAndAGrowingTime) {
  EXPECT_FALSE(fit_alpha_beta({{Bytes(8), Seconds(1)}}).is_ok());
  EXPECT_FALSE(fit_alpha_beta({{Bytes(8), Seconds(1)}, {Bytes(8), Seconds(2)}}).is_ok());
  auto flat = fit_alpha_beta({{Bytes(8), Seconds(2)}, {Bytes(16), Seconds(1)}});
  ASSERT_FALSE(flat.is_ok());
  EXPECT_EQ(flat.status().code(), StatusCode::kInvalidArgument);
}

TEST(CommFactorTest, AreNcclTestsBusBandwidthFactors) {
  EXPECT_EQ(comm_bus_factor(CommOp::kP2p, 2), 1.0);
  EXPECT_EQ(comm_bus_factor(CommOp::kP2p, 8), 1.0);
  EXPECT_EQ(comm_bus_factor(CommOp::kAllReduce, 2), 1.0);
  EXPECT_EQ(comm_bus_factor(CommOp::kAllReduce, 4), 1.5);
  EXPECT_EQ(comm_bus_factor(CommOp::kAllGather, 4), 0.75);
  EXPECT_EQ(comm_bus_factor(CommOp::kReduceScatter, 4), 0.75);
  EXPECT_EQ(comm_bus_factor(CommOp::kAllToAll, 2), 0.5);
  EXPECT_EQ(comm_bus_factor(CommOp::kAllReduce, 1), 0.0);
}

TEST(CommSizesTest, SweepAndSizeNames) {
  EXPECT_EQ(size_sweep(1024, 65536, 2),
            (std::vector<int64_t>{1024, 2048, 4096, 8192, 16384, 32768, 65536}));
  EXPECT_EQ(size_sweep(1000, 9000, 3), (std::vector<int64_t>{1000, 3000, 9000}));
  EXPECT_EQ(size_sweep(64, 64, 2), (std::vector<int64_t>{64}));
  EXPECT_EQ(parse_byte_size("64", "--sizes").value(), 64);
  EXPECT_EQ(parse_byte_size("1K", "--sizes").value(), 1024);
  EXPECT_EQ(parse_byte_size("64M", "--sizes").value(), int64_t{64} << 20);
  EXPECT_EQ(parse_byte_size("2g", "--sizes").value(), int64_t{2} << 30);
  auto bad = parse_byte_size("1.5M", "--sizes");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(),
            "--sizes: expected a size in bytes such as 64, 1K, 16M or 1G (binary multiples), got "
            "'1.5M'");
  EXPECT_FALSE(parse_byte_size("", "--sizes").is_ok());
  EXPECT_FALSE(parse_byte_size("K", "--sizes").is_ok());
  EXPECT_EQ(parse_comm_op("all_to_all"), CommOp::kAllToAll);
  EXPECT_FALSE(parse_comm_op("broadcast").has_value());
}

// Runs the benchmark on one thread per rank; `wrap` may replace a rank's transport.
std::vector<Result<CommBenchResult>> comm_run_threads(
    int world, const CommBenchOptions& options,
    const std::function<std::unique_ptr<Transport>(int, std::unique_ptr<Transport>)>& wrap =
        nullptr) {
  InProcessNetwork network(world, TransportOptions{Seconds(20)});
  std::vector<Result<CommBenchResult>> results(static_cast<size_t>(world),
                                               internal_error("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Transport> t = network.endpoint(r);
      if (wrap) t = wrap(r, std::move(t));
      results[static_cast<size_t>(r)] = run_comm_benchmark(options, *t);
      if (!results[static_cast<size_t>(r)].is_ok()) {
        network.shut_down(results[static_cast<size_t>(r)].status().message());
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

void expect_positive_finite(const CommRow& row) {
  EXPECT_GT(row.time.value(), 0.0);
  EXPECT_TRUE(std::isfinite(row.time.value()));
  EXPECT_GT(row.algbw.value(), 0.0);
  EXPECT_TRUE(std::isfinite(row.busbw.value()));
}

TEST(CommBenchmarkTest, ThreeRanksMeasureEveryPairAndCollectiveAndAgree) {
  CommBenchOptions o;
  o.sizes = {4, 100, 4096};
  o.iters = 2;
  o.warmup = 1;
  auto results = comm_run_threads(3, o);
  for (const auto& r : results) ASSERT_TRUE(r.is_ok()) << r.status().message();
  const CommBenchResult& res = results[0].value();
  EXPECT_EQ(res.world_size, 3);
  ASSERT_EQ(res.pairs.size(), 6u);
  EXPECT_EQ(res.pairs[0].src, 0);
  EXPECT_EQ(res.pairs[0].dst, 1);
  EXPECT_EQ(res.pairs[5].src, 2);
  EXPECT_EQ(res.pairs[5].dst, 1);
  for (const PairResult& p : res.pairs) {
    ASSERT_EQ(p.rows.size(), 3u);
    EXPECT_EQ(p.rows[1].size, Bytes(100));  // whole float32 elements
    EXPECT_EQ(p.rows[1].count, 25);
    for (const CommRow& row : p.rows) {
      expect_positive_finite(row);
      EXPECT_EQ(row.busbw, row.algbw);
    }
    EXPECT_GE(p.fit.latency.value(), 0.0);
    EXPECT_GT(p.fit.bandwidth.value(), 0.0);
  }
  ASSERT_EQ(res.collectives.size(), 4u);
  EXPECT_EQ(res.collectives[0].op, CommOp::kAllReduce);
  EXPECT_EQ(res.collectives[3].op, CommOp::kAllToAll);
  for (const CollectiveResult& c : res.collectives) {
    ASSERT_EQ(c.rows.size(), 3u);
    // 4 bytes over 3 ranks: one element per rank; 100 bytes: 8 per rank (96 bytes).
    EXPECT_EQ(c.rows[0].size, Bytes(12));
    EXPECT_EQ(c.rows[1].size, Bytes(96));
    EXPECT_EQ(c.rows[1].count, 24);
    for (const CommRow& row : c.rows) {
      expect_positive_finite(row);
      EXPECT_DOUBLE_EQ(row.busbw.value(), row.algbw.value() * comm_bus_factor(c.op, 3));
    }
  }
  // Every rank gets the same figures.
  for (const auto& r : results) {
    EXPECT_EQ(r.value().pairs[2].rows[2].time, res.pairs[2].rows[2].time);
    EXPECT_EQ(r.value().collectives[1].rows[0].time, res.collectives[1].rows[0].time);
  }

  const std::string text = comm_report_text(res, "in-process");
  EXPECT_NE(text.find("# p2p rank 2 -> rank 1"), std::string::npos) << text;
  EXPECT_NE(text.find("(elements)"), std::string::npos) << text;
  EXPECT_NE(text.find("# all_gather over 3 ranks: ring over Transport send/recv"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# Avg bus bandwidth    : "), std::string::npos) << text;

  const LinksFile file = comm_links_file(res, "in-process", 4);
  ASSERT_EQ(file.links.size(), 6u);
  EXPECT_EQ(file.links[0].src, 4);
  EXPECT_EQ(file.links[0].dst, 5);
  // Six significant digits in the file's units.
  EXPECT_NEAR(file.links[0].latency.value(), res.pairs[0].fit.latency.value(),
              1e-5 * res.pairs[0].fit.latency.value());
  EXPECT_NEAR(file.links[0].bandwidth.value(), res.pairs[0].fit.bandwidth.value(),
              1e-5 * res.pairs[0].fit.bandwidth.value());
  ASSERT_EQ(file.collectives.size(), 4u);
  EXPECT_EQ(file.collectives[2].op, "reduce_scatter");
  EXPECT_EQ(file.collectives[2].ranks, 3);
  EXPECT_EQ(file.collectives[2].devices, (std::vector<int>{4, 5, 6}));
  auto doc = parse_yaml(links_to_yaml(file), "links.yaml");
  ASSERT_TRUE(doc.is_ok());
  auto back = links_from_json(JsonField(doc.value(), "links.yaml"));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), file);
}

TEST(CommBenchmarkTest, OpsCanBeChosen) {
  CommBenchOptions o;
  o.sizes = {64, 128};
  o.iters = 1;
  o.warmup = 0;
  o.ops = {CommOp::kReduceScatter};
  auto results = comm_run_threads(4, o);
  ASSERT_TRUE(results[0].is_ok()) << results[0].status().message();
  EXPECT_TRUE(results[0].value().pairs.empty());
  ASSERT_EQ(results[0].value().collectives.size(), 1u);
  EXPECT_EQ(results[0].value().collectives[0].op, CommOp::kReduceScatter);
}

TEST(CommBenchmarkTest, OneSizeGivesTheMessageRateWithoutLatency) {
  CommBenchOptions o;
  o.sizes = {256};
  o.iters = 1;
  o.warmup = 0;
  o.ops = {CommOp::kP2p};
  auto results = comm_run_threads(2, o);
  ASSERT_TRUE(results[0].is_ok()) << results[0].status().message();
  ASSERT_EQ(results[0].value().pairs.size(), 2u);
  const PairResult& p = results[0].value().pairs[0];
  EXPECT_EQ(p.fit.latency.value(), 0.0);
  EXPECT_EQ(p.fit.bandwidth, p.rows[0].algbw);
}

// Delegates to a transport but adds one to every buffer it receives into.
class CommCorruptingTransport final : public Transport {
 public:
  explicit CommCorruptingTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  Result<std::unique_ptr<TransportRequest>> send(const at::Tensor& tensor, int peer, MessageTag tag,
                                                 std::string what) override {
    return inner_->send(tensor, peer, tag, std::move(what));
  }
  Result<std::unique_ptr<TransportRequest>> recv(const at::Tensor& buffer, int peer, MessageTag tag,
                                                 std::string what) override {
    auto r = inner_->recv(buffer, peer, tag, std::move(what));
    if (!r.is_ok()) return r;
    return std::unique_ptr<TransportRequest>(new Corrupted(std::move(r).value(), buffer));
  }
  Status all_reduce_sum(const std::vector<at::Tensor>& tensors,
                        const std::vector<int>& ranks) override {
    return inner_->all_reduce_sum(tensors, ranks);
  }
  Result<std::unique_ptr<TransportRequest>> all_reduce_sum_async(
      const std::vector<at::Tensor>& tensors, const std::vector<int>& ranks) override {
    return inner_->all_reduce_sum_async(tensors, ranks);
  }
  Status barrier() override { return inner_->barrier(); }

 private:
  class Corrupted final : public TransportRequest {
   public:
    Corrupted(std::unique_ptr<TransportRequest> inner, at::Tensor buffer)
        : inner_(std::move(inner)), buffer_(std::move(buffer)) {}
    Status wait() override {
      Status s = inner_->wait();
      if (s.is_ok()) buffer_.add_(1);
      return s;
    }

   private:
    std::unique_ptr<TransportRequest> inner_;
    at::Tensor buffer_;
  };
  std::unique_ptr<Transport> inner_;
};

TEST(CommBenchmarkTest, AWrongResultIsAnErrorOnEveryRank) {
  for (CommOp op : {CommOp::kP2p, CommOp::kAllGather, CommOp::kAllToAll}) {
    CommBenchOptions o;
    o.sizes = {64};
    o.iters = 1;
    o.warmup = 0;
    o.ops = {op};
    auto results = comm_run_threads(2, o, [](int rank, std::unique_ptr<Transport> t) {
      if (rank != 1) return t;
      return std::unique_ptr<Transport>(new CommCorruptingTransport(std::move(t)));
    });
    for (const auto& r : results) {
      ASSERT_FALSE(r.is_ok()) << comm_op_name(op);
      EXPECT_EQ(r.status().code(), StatusCode::kInternal);
      EXPECT_NE(r.status().message().find(std::string(comm_op_name(op)) + " of "),
                std::string::npos)
          << r.status().message();
      EXPECT_NE(r.status().message().find("wrong result on 1 rank"), std::string::npos)
          << r.status().message();
    }
  }
}

}  // namespace
}  // namespace motley
