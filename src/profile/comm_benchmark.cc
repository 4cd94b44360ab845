// Communication microbenchmarks: the measurement loop over a Transport, the collectives the
// Transport lacks (built on its send/recv), the checks, the alpha-beta fit and the tables.
// docs/profile-comm.md states the method; keep the two in step.
#include "motley/profile/comm_benchmark.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>

namespace motley {
namespace {

using Clock = std::chrono::steady_clock;
using Requests = std::vector<std::unique_ptr<TransportRequest>>;

constexpr int64_t kElementBytes = 4;  // float32, nccl-tests' "float"
// Each op's messages use tags of their own range (steps of a ring add to the base).
constexpr MessageTag kTagP2p = 1 << 20;
constexpr MessageTag kTagAck = 2 << 20;
constexpr MessageTag kTagAllGather = 3 << 20;
constexpr MessageTag kTagReduceScatter = 4 << 20;
constexpr MessageTag kTagAllToAll = 5 << 20;

int mod(int a, int n) { return ((a % n) + n) % n; }

Status wait_all(Requests* requests) {
  Status first;
  for (auto& r : *requests) {
    Status s = r->wait();
    if (first.is_ok() && !s.is_ok()) first = s;
  }
  requests->clear();
  return first;
}

Status post(Requests* requests, Result<std::unique_ptr<TransportRequest>> r) {
  if (!r.is_ok()) return r.status();
  requests->push_back(std::move(r).value());
  return Status::ok();
}

std::vector<int> world_ranks(int n) {
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) ranks[static_cast<size_t>(r)] = r;
  return ranks;
}

Seconds since(Clock::time_point start) {
  return Seconds(std::chrono::duration<double>(Clock::now() - start).count());
}

at::Tensor floats(int64_t count) { return at::zeros({count}, at::kFloat); }

// k mod m as floats 0, 1, ..., m-1, 0, ...: a pattern that makes a misplaced element visible and
// keeps every sum an exact float32 integer.
at::Tensor pattern(int64_t count, int64_t m) {
  return at::remainder(at::arange(count, at::kLong), m).to(at::kFloat);
}

at::Tensor block(const at::Tensor& t, int64_t per, int b) { return t.narrow(0, b * per, per); }

// Ring all-gather: n-1 steps, each passing the block received last to the right neighbour.
Status ring_all_gather(Transport& t, const at::Tensor& in, const at::Tensor& out, int64_t per) {
  const int n = t.world_size();
  const int r = t.rank();
  block(out, per, r).copy_(in);
  Requests reqs;
  for (int s = 0; s < n - 1; ++s) {
    MOTLEY_RETURN_IF_ERROR(post(&reqs, t.recv(block(out, per, mod(r - s - 1, n)), mod(r - 1, n),
                                              kTagAllGather + s, "an all-gather block")));
    MOTLEY_RETURN_IF_ERROR(post(&reqs, t.send(block(out, per, mod(r - s, n)), mod(r + 1, n),
                                              kTagAllGather + s, "an all-gather block")));
    MOTLEY_RETURN_IF_ERROR(wait_all(&reqs));
  }
  return Status::ok();
}

// Ring reduce-scatter: n-1 steps; at step s a rank sends its partial sum of block r-s-1 to the
// right and adds the left neighbour's partial sum of block r-s-2 to its own input, so after the
// last step it holds the full sum of block r (written into `out`).
Status ring_reduce_scatter(Transport& t, const at::Tensor& in, const at::Tensor& out,
                           const at::Tensor& work, const at::Tensor& incoming, int64_t per) {
  const int n = t.world_size();
  const int r = t.rank();
  Requests reqs;
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = mod(r - s - 1, n);
    const int recv_block = mod(r - s - 2, n);
    const at::Tensor source = s == 0 ? block(in, per, send_block) : block(work, per, send_block);
    MOTLEY_RETURN_IF_ERROR(post(
        &reqs, t.recv(incoming, mod(r - 1, n), kTagReduceScatter + s, "a reduce-scatter block")));
    MOTLEY_RETURN_IF_ERROR(post(
        &reqs, t.send(source, mod(r + 1, n), kTagReduceScatter + s, "a reduce-scatter block")));
    MOTLEY_RETURN_IF_ERROR(wait_all(&reqs));
    at::Tensor target = s == n - 2 ? out : block(work, per, recv_block);
    at::add_out(target, block(in, per, recv_block), incoming);
  }
  return Status::ok();
}

// Pairwise exchange: at step s send block r+s to rank r+s and receive rank r-s's block r.
Status pairwise_all_to_all(Transport& t, const at::Tensor& in, const at::Tensor& out, int64_t per) {
  const int n = t.world_size();
  const int r = t.rank();
  block(out, per, r).copy_(block(in, per, r));
  Requests reqs;
  for (int s = 1; s < n; ++s) {
    const int to = mod(r + s, n);
    const int from = mod(r - s, n);
    MOTLEY_RETURN_IF_ERROR(
        post(&reqs, t.recv(block(out, per, from), from, kTagAllToAll + s, "an all-to-all block")));
    MOTLEY_RETURN_IF_ERROR(
        post(&reqs, t.send(block(in, per, to), to, kTagAllToAll + s, "an all-to-all block")));
    MOTLEY_RETURN_IF_ERROR(wait_all(&reqs));
  }
  return Status::ok();
}

// Sums `values` over the world (every rank gets the same doubles).
Result<std::vector<double>> sum_over_world(Transport& t, const std::vector<double>& values) {
  at::Tensor v = at::tensor(values, at::kDouble);
  MOTLEY_RETURN_IF_ERROR(t.all_reduce_sum({v}, world_ranks(t.world_size())));
  return std::vector<double>(v.data_ptr<double>(), v.data_ptr<double>() + v.numel());
}

// One collective at one size: its buffers, one iteration, the check of that iteration's result.
class CollectiveCase {
 public:
  CollectiveCase(CommOp op, Transport& t, int64_t per)
      : op_(op), t_(t), n_(t.world_size()), r_(t.rank()), per_(per) {
    const int64_t total = per * n_;
    switch (op) {
      case CommOp::kAllReduce:
        buf_ = floats(total);
        break;
      case CommOp::kAllGather:
        in_ = floats(per);
        out_ = floats(total);
        break;
      case CommOp::kReduceScatter:
        in_ = floats(total);
        out_ = floats(per);
        work_ = floats(total);
        incoming_ = floats(per);
        break;
      case CommOp::kAllToAll:
      case CommOp::kP2p:
        in_ = floats(total);
        out_ = floats(total);
        break;
    }
  }

  Status run() {
    switch (op_) {
      case CommOp::kAllReduce:
        return t_.all_reduce_sum({buf_}, world_ranks(n_));
      case CommOp::kAllGather:
        return ring_all_gather(t_, in_, out_, per_);
      case CommOp::kReduceScatter:
        return ring_reduce_scatter(t_, in_, out_, work_, incoming_, per_);
      case CommOp::kAllToAll:
      case CommOp::kP2p:
        return pairwise_all_to_all(t_, in_, out_, per_);
    }
    return Status::ok();
  }

  // Fills the inputs with this rank's pattern.
  void fill() {
    const double r1 = r_ + 1;
    switch (op_) {
      case CommOp::kAllReduce:  // element k of rank r: r + 1 + k mod 7
        buf_.copy_(pattern(per_ * n_, 7) + r1);
        break;
      case CommOp::kAllGather:  // rank r's block: r + 1 + k mod 5
        in_.copy_(pattern(per_, 5) + r1);
        break;
      case CommOp::kReduceScatter:  // block c of rank r: (r + 1)(c + 1) + k mod 3
      case CommOp::kAllToAll:       // block c of rank r: r n + c + 1 + k mod 3
      case CommOp::kP2p:
        for (int c = 0; c < n_; ++c) {
          const double v = op_ == CommOp::kReduceScatter ? r1 * (c + 1) : r_ * n_ + c + 1;
          block(in_, per_, c).copy_(pattern(per_, 3) + v);
        }
        break;
    }
  }

  // Whether the last run() produced the sums, blocks or messages its inputs imply.
  bool correct() const {
    const double ranks_sum = n_ * (n_ + 1) / 2.0;
    switch (op_) {
      case CommOp::kAllReduce:
        return at::equal(buf_, pattern(per_ * n_, 7) * n_ + ranks_sum);
      case CommOp::kAllGather:
        for (int c = 0; c < n_; ++c) {
          if (!at::equal(block(out_, per_, c), pattern(per_, 5) + (c + 1))) return false;
        }
        return true;
      case CommOp::kReduceScatter:
        return at::equal(out_, pattern(per_, 3) * n_ + ranks_sum * (r_ + 1));
      case CommOp::kAllToAll:
      case CommOp::kP2p:
        for (int c = 0; c < n_; ++c) {
          if (!at::equal(block(out_, per_, c), pattern(per_, 3) + (c * n_ + r_ + 1))) return false;
        }
        return true;
    }
    return false;
  }

  // Timed iterations run on zeros: sums that grow every iteration could reach values whose
  // arithmetic is slower (or infinite), which would measure the CPU, not the link.
  void clear() {
    for (at::Tensor* t : {&buf_, &in_, &out_, &work_, &incoming_}) {
      if (t->defined()) t->zero_();
    }
  }

 private:
  CommOp op_;
  Transport& t_;
  int n_;
  int r_;
  int64_t per_;
  at::Tensor buf_, in_, out_, work_, incoming_;
};

std::string collective_implementation(CommOp op, const std::string& all_reduce) {
  switch (op) {
    case CommOp::kAllReduce:
      return all_reduce;
    case CommOp::kAllGather:
      return "ring over Transport send/recv (k-1 steps of size/k)";
    case CommOp::kReduceScatter:
      return "ring over Transport send/recv with local sums (k-1 steps of size/k)";
    case CommOp::kAllToAll:
      return "pairwise exchange over Transport send/recv (k-1 steps of size/k)";
    case CommOp::kP2p:
      return "";
  }
  return "";
}

CommRow make_row(CommOp op, int ranks, int64_t count, Seconds time) {
  CommRow row;
  row.count = count;
  row.size = Bytes(static_cast<double>(count * kElementBytes));
  row.time = time;
  row.algbw = BytesPerSecond(row.size.value() / time.value());
  row.busbw = row.algbw * comm_bus_factor(op, ranks);
  return row;
}

Status wrong_result(CommOp op, int64_t bytes, double wrong_ranks) {
  return internal_error(fmt::format(
      "{} of {} B: wrong result on {} rank{} (the check of nccl-tests' -c); the transport or "
      "the implementation is broken",
      comm_op_name(op), bytes, static_cast<int>(wrong_ranks), wrong_ranks == 1 ? "" : "s"));
}

Result<CollectiveResult> run_collective(const CommBenchOptions& o, CommOp op, Transport& t,
                                        const std::string& all_reduce_name) {
  const int n = t.world_size();
  CollectiveResult result;
  result.op = op;
  result.implementation = collective_implementation(op, all_reduce_name);
  for (int64_t size : o.sizes) {
    // Whole elements, and for every collective a multiple of k of them, so each rank's share
    // (or block) is equal; all-reduce splits nothing but is rounded the same way to stay
    // comparable row for row.
    const int64_t per = std::max<int64_t>(1, size / (kElementBytes * n));
    CollectiveCase c(op, t, per);
    c.fill();
    MOTLEY_RETURN_IF_ERROR(t.barrier());
    MOTLEY_RETURN_IF_ERROR(c.run());
    const double wrong = c.correct() ? 0.0 : 1.0;
    c.clear();
    for (int i = 0; i < o.warmup; ++i) MOTLEY_RETURN_IF_ERROR(c.run());
    MOTLEY_RETURN_IF_ERROR(t.barrier());
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < o.iters; ++i) MOTLEY_RETURN_IF_ERROR(c.run());
    const Seconds elapsed = since(start);
    MOTLEY_ASSIGN_OR_RETURN(std::vector<double> sums,
                            sum_over_world(t, {wrong, elapsed.value() / o.iters}));
    if (sums[0] > 0) return wrong_result(op, per * n * kElementBytes, sums[0]);
    result.rows.push_back(make_row(op, n, per * n, Seconds(sums[1] / n)));
  }
  return result;
}

// Round trips of a one-element message between `a` and `b` (a sends first); the mean over
// iterations on a, 0 elsewhere.
Result<Seconds> round_trip(const CommBenchOptions& o, Transport& t, int a, int b) {
  const int r = t.rank();
  at::Tensor ping = floats(1);
  Requests reqs;
  auto once = [&]() -> Status {
    if (r == a) {
      MOTLEY_RETURN_IF_ERROR(post(&reqs, t.send(ping, b, kTagAck, "a ping")));
      MOTLEY_RETURN_IF_ERROR(post(&reqs, t.recv(ping, b, kTagAck + 1, "a pong")));
    } else {
      MOTLEY_RETURN_IF_ERROR(post(&reqs, t.recv(ping, a, kTagAck, "a ping")));
      MOTLEY_RETURN_IF_ERROR(wait_all(&reqs));
      MOTLEY_RETURN_IF_ERROR(post(&reqs, t.send(ping, a, kTagAck + 1, "a pong")));
    }
    return wait_all(&reqs);
  };
  if (r != a && r != b) return Seconds(0);
  for (int i = 0; i < o.warmup; ++i) MOTLEY_RETURN_IF_ERROR(once());
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < o.iters; ++i) MOTLEY_RETURN_IF_ERROR(once());
  return r == a ? Seconds(since(start).value() / o.iters) : Seconds(0);
}

// One ordered pair over the sweep: src sends the message, dst answers each with a one-element
// acknowledgement, so src's clock sees message + acknowledgement; half of a one-element round
// trip (the acknowledgement's one-way time) is taken off. The message takes at least as long as
// the acknowledgement, so a noisy difference is floored at half the measured time.
Result<PairResult> run_pair(const CommBenchOptions& o, Transport& t, int src, int dst,
                            Seconds* ack_sum) {
  const int r = t.rank();
  const int n = t.world_size();
  PairResult pair;
  pair.src = src;
  pair.dst = dst;
  MOTLEY_RETURN_IF_ERROR(t.barrier());
  MOTLEY_ASSIGN_OR_RETURN(Seconds rtt_local, round_trip(o, t, src, dst));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<double> rtt, sum_over_world(t, {rtt_local.value()}));
  const Seconds ack = Seconds(rtt[0] / 2);
  *ack_sum += ack;
  for (int64_t size : o.sizes) {
    const int64_t count = std::max<int64_t>(1, size / kElementBytes);
    at::Tensor message = floats(count);
    at::Tensor ack_buf = floats(1);
    const double value = src * n + dst + 1;
    if (r == src) message.copy_(pattern(count, 3) + value);
    Requests reqs;
    auto once = [&]() -> Status {
      if (r == src) {
        MOTLEY_RETURN_IF_ERROR(post(&reqs, t.send(message, dst, kTagP2p, "a p2p message")));
        MOTLEY_RETURN_IF_ERROR(
            post(&reqs, t.recv(ack_buf, dst, kTagP2p + 1, "an acknowledgement")));
      } else {
        MOTLEY_RETURN_IF_ERROR(post(&reqs, t.recv(message, src, kTagP2p, "a p2p message")));
        MOTLEY_RETURN_IF_ERROR(wait_all(&reqs));
        MOTLEY_RETURN_IF_ERROR(
            post(&reqs, t.send(ack_buf, src, kTagP2p + 1, "an acknowledgement")));
      }
      return wait_all(&reqs);
    };
    double wrong = 0.0;
    double time = 0.0;
    MOTLEY_RETURN_IF_ERROR(t.barrier());
    if (r == src || r == dst) {
      MOTLEY_RETURN_IF_ERROR(once());
      if (r == dst) {
        wrong = at::equal(message, pattern(count, 3) + value) ? 0.0 : 1.0;
        message.zero_();
      }
      for (int i = 0; i < o.warmup; ++i) MOTLEY_RETURN_IF_ERROR(once());
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < o.iters; ++i) MOTLEY_RETURN_IF_ERROR(once());
      if (r == src) time = since(start).value() / o.iters;
    }
    MOTLEY_ASSIGN_OR_RETURN(std::vector<double> sums, sum_over_world(t, {wrong, time}));
    if (sums[0] > 0) return wrong_result(CommOp::kP2p, count * kElementBytes, sums[0]);
    const Seconds one_way = Seconds(std::max(sums[1] - ack.value(), sums[1] / 2));
    pair.rows.push_back(make_row(CommOp::kP2p, 2, count, one_way));
  }
  std::vector<std::pair<Bytes, Seconds>> points;
  for (const CommRow& row : pair.rows) points.emplace_back(row.size, row.time);
  auto fit = fit_alpha_beta(points);
  // A sweep of one size (or a flat one) has no slope: the largest message's rate with no
  // latency, which reproduces that message's time.
  pair.fit = fit.is_ok() ? fit.value() : AlphaBeta{Seconds(0), pair.rows.back().algbw};
  return pair;
}

std::string redop(CommOp op) {
  return op == CommOp::kAllReduce || op == CommOp::kReduceScatter ? "sum" : "none";
}

std::string table_header() {
  return fmt::format("# {:>12}  {:>12}  {:>6}  {:>6}  {:>10}  {:>8}  {:>8}\n", "size", "count",
                     "type", "redop", "time", "algbw", "busbw") +
         fmt::format("# {:>12}  {:>12}  {:>6}  {:>6}  {:>10}  {:>8}  {:>8}\n", "(B)", "(elements)",
                     "", "", "(us)", "(GB/s)", "(GB/s)");
}

std::string table_row(const CommRow& row, const std::string& op_redop) {
  return fmt::format("  {:>12}  {:>12}  {:>6}  {:>6}  {:>10.2f}  {:>8.3f}  {:>8.3f}\n",
                     static_cast<int64_t>(row.size.value()), row.count, "float", op_redop,
                     row.time.value() * 1e6, row.algbw.value() / kGiga, row.busbw.value() / kGiga);
}

Json rows_json(const std::vector<CommRow>& rows) {
  Json out = Json::array();
  for (const CommRow& r : rows) {
    out.push_back({{"size_bytes", static_cast<int64_t>(r.size.value())},
                   {"count", r.count},
                   {"time_us", r.time.value() * 1e6},
                   {"algbw_GBps", r.algbw.value() / kGiga},
                   {"busbw_GBps", r.busbw.value() / kGiga}});
  }
  return out;
}

double average_busbw(const CommBenchResult& result) {
  double sum = 0;
  int rows = 0;
  auto add = [&](const std::vector<CommRow>& table) {
    for (const CommRow& r : table) {
      sum += r.busbw.value();
      ++rows;
    }
  };
  for (const PairResult& p : result.pairs) add(p.rows);
  for (const CollectiveResult& c : result.collectives) add(c.rows);
  return rows == 0 ? 0.0 : sum / rows;
}

// The file holds six significant digits in its units (µs, GB/s), far more than a measurement
// resolves; values are rounded to what the loader will read back, so a written file loads to
// exactly the LinksFile it was written from.
double six_digits(double v) {
  const std::string text = fmt::format("{:.6g}", v);
  return std::strtod(text.c_str(), nullptr);
}

Seconds file_time(Seconds t) { return microseconds(six_digits(t.value() * 1e6)); }

BytesPerSecond file_rate(BytesPerSecond b) {
  return gigabytes_per_second(six_digits(b.value() / kGiga));
}

}  // namespace

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::kP2p:
      return "p2p";
    case CommOp::kAllReduce:
      return "all_reduce";
    case CommOp::kAllGather:
      return "all_gather";
    case CommOp::kReduceScatter:
      return "reduce_scatter";
    case CommOp::kAllToAll:
      return "all_to_all";
  }
  return "?";
}

std::optional<CommOp> parse_comm_op(std::string_view name) {
  for (CommOp op : all_comm_ops()) {
    if (name == comm_op_name(op)) return op;
  }
  return std::nullopt;
}

std::vector<CommOp> all_comm_ops() {
  return {CommOp::kP2p, CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter,
          CommOp::kAllToAll};
}

double comm_bus_factor(CommOp op, int ranks) {
  switch (op) {
    case CommOp::kP2p:
      return 1.0;
    case CommOp::kAllReduce:
      return bus_bandwidth_factor(Collective::kAllReduce, ranks);
    case CommOp::kAllGather:
      return bus_bandwidth_factor(Collective::kAllGather, ranks);
    case CommOp::kReduceScatter:
      return bus_bandwidth_factor(Collective::kReduceScatter, ranks);
    case CommOp::kAllToAll:
      return bus_bandwidth_factor(Collective::kAllToAll, ranks);
  }
  return 0.0;
}

Result<CommBenchResult> run_comm_benchmark(const CommBenchOptions& options, Transport& transport) {
  const int n = transport.world_size();
  CommBenchResult result;
  result.world_size = n;
  result.iters = options.iters;
  result.warmup = options.warmup;
  const auto wants = [&](CommOp op) {
    return std::find(options.ops.begin(), options.ops.end(), op) != options.ops.end();
  };
  if (wants(CommOp::kP2p) && n > 1) {
    Seconds ack_sum;
    for (int src = 0; src < n; ++src) {
      for (int dst = 0; dst < n; ++dst) {
        if (src == dst) continue;
        MOTLEY_ASSIGN_OR_RETURN(PairResult pair, run_pair(options, transport, src, dst, &ack_sum));
        result.pairs.push_back(std::move(pair));
      }
    }
    result.ack_latency = Seconds(ack_sum.value() / static_cast<double>(result.pairs.size()));
  }
  for (CommOp op :
       {CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter, CommOp::kAllToAll}) {
    if (!wants(op) || n < 2) continue;
    MOTLEY_ASSIGN_OR_RETURN(CollectiveResult c, run_collective(options, op, transport,
                                                               options.all_reduce_implementation));
    result.collectives.push_back(std::move(c));
  }
  MOTLEY_RETURN_IF_ERROR(transport.barrier());
  return result;
}

Result<AlphaBeta> fit_alpha_beta(const std::vector<std::pair<Bytes, Seconds>>& points) {
  const double k = static_cast<double>(points.size());
  double n_mean = 0, t_mean = 0;
  for (const auto& [n, t] : points) {
    n_mean += n.value() / k;
    t_mean += t.value() / k;
  }
  double snn = 0, snt = 0;
  for (const auto& [n, t] : points) {
    snn += (n.value() - n_mean) * (n.value() - n_mean);
    snt += (n.value() - n_mean) * (t.value() - t_mean);
  }
  if (points.size() < 2 || !(snn > 0)) {
    return invalid_argument(
        "fitting time = latency + size / bandwidth needs at least two "
        "distinct sizes");
  }
  double slope = snt / snn;
  double intercept = t_mean - slope * n_mean;
  if (intercept < 0) {
    double sn2 = 0, snt0 = 0;
    for (const auto& [n, t] : points) {
      sn2 += n.value() * n.value();
      snt0 += n.value() * t.value();
    }
    slope = snt0 / sn2;
    intercept = 0;
  }
  if (!(slope > 0) || !std::isfinite(slope)) {
    return invalid_argument("the measured time does not grow with the size: no bandwidth to fit");
  }
  return AlphaBeta{Seconds(intercept), BytesPerSecond(1.0 / slope)};
}

Result<int64_t> parse_byte_size(std::string_view text, std::string_view option) {
  auto bad = [&] {
    return invalid_argument(fmt::format(
        "{}: expected a size in bytes such as 64, 1K, 16M or 1G (binary multiples), got '{}'",
        option, text));
  };
  if (text.empty()) return bad();
  int64_t multiple = 1;
  std::string_view digits = text;
  switch (text.back()) {
    case 'K':
    case 'k':
      multiple = int64_t{1} << 10;
      break;
    case 'M':
    case 'm':
      multiple = int64_t{1} << 20;
      break;
    case 'G':
    case 'g':
      multiple = int64_t{1} << 30;
      break;
    default:
      break;
  }
  if (multiple > 1) digits.remove_suffix(1);
  if (digits.empty() || digits.size() > 12) return bad();
  int64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return bad();
    value = value * 10 + (c - '0');
  }
  if (value > std::numeric_limits<int64_t>::max() / multiple) return bad();
  return value * multiple;
}

std::vector<int64_t> size_sweep(int64_t min, int64_t max, double factor) {
  std::vector<int64_t> sizes;
  for (double s = static_cast<double>(min); s <= static_cast<double>(max); s *= factor) {
    const auto size = static_cast<int64_t>(s);
    if (sizes.empty() || size > sizes.back()) sizes.push_back(size);
  }
  return sizes;
}

std::string comm_report_text(const CommBenchResult& result, const std::string& transport) {
  std::string out = fmt::format(
      "# motley profile comm: {} ranks over {}, float32, {} iterations after {} warm-up per "
      "size, every result checked\n"
      "# time: mean per iteration (collectives: averaged over ranks); algbw = size / time; "
      "busbw = algbw x factor\n",
      result.world_size, transport, result.iters, result.warmup);
  for (const PairResult& p : result.pairs) {
    out += fmt::format(
        "#\n# p2p rank {} -> rank {}: one-way time (message + one-element acknowledgement, less "
        "half a one-element round trip), busbw factor 1\n",
        p.src, p.dst);
    out += table_header();
    for (const CommRow& r : p.rows) out += table_row(r, "none");
    out += fmt::format(
        "# fit: latency {:.2f} us, bandwidth {:.3f} GB/s (least squares of time = latency + "
        "size / bandwidth over {} sizes)\n",
        p.fit.latency.value() * 1e6, p.fit.bandwidth.value() / kGiga, p.rows.size());
  }
  for (const CollectiveResult& c : result.collectives) {
    out +=
        fmt::format("#\n# {} over {} ranks: {}, busbw factor {:.4g}\n", comm_op_name(c.op),
                    result.world_size, c.implementation, comm_bus_factor(c.op, result.world_size));
    out += table_header();
    for (const CommRow& r : c.rows) out += table_row(r, redop(c.op));
  }
  out += "# Out of bounds values : 0 OK\n";
  out += fmt::format("# Avg bus bandwidth    : {:.4f}\n", average_busbw(result) / kGiga);
  return out;
}

Json comm_report_json(const CommBenchResult& result, const std::string& transport) {
  Json pairs = Json::array();
  for (const PairResult& p : result.pairs) {
    pairs.push_back({{"src", p.src},
                     {"dst", p.dst},
                     {"fit",
                      {{"latency_us", p.fit.latency.value() * 1e6},
                       {"bandwidth_GBps", p.fit.bandwidth.value() / kGiga}}},
                     {"rows", rows_json(p.rows)}});
  }
  Json collectives = Json::array();
  for (const CollectiveResult& c : result.collectives) {
    collectives.push_back({{"op", comm_op_name(c.op)},
                           {"implementation", c.implementation},
                           {"redop", redop(c.op)},
                           {"busbw_factor", comm_bus_factor(c.op, result.world_size)},
                           {"rows", rows_json(c.rows)}});
  }
  return Json{{"ranks", result.world_size},
              {"transport", transport},
              {"type", "float"},
              {"iters", result.iters},
              {"warmup", result.warmup},
              {"checked", true},
              {"ack_latency_us", result.ack_latency.value() * 1e6},
              {"p2p", pairs},
              {"collectives", collectives},
              {"avg_busbw_GBps", average_busbw(result) / kGiga}};
}

LinksFile comm_links_file(const CommBenchResult& result, const std::string& transport,
                          int first_device) {
  LinksFile file;
  file.transport = transport;
  for (const PairResult& p : result.pairs) {
    file.links.push_back({first_device + p.src, first_device + p.dst, file_time(p.fit.latency),
                          file_rate(p.fit.bandwidth)});
  }
  for (const CollectiveResult& c : result.collectives) {
    MeasuredCollective m;
    m.op = comm_op_name(c.op);
    m.implementation = c.implementation;
    m.ranks = result.world_size;
    for (int r = 0; r < result.world_size; ++r) m.devices.push_back(first_device + r);
    for (const CommRow& r : c.rows) {
      // Tiny sizes can round to the same whole elements; the file prices by size, once each.
      if (!m.samples.empty() && !(r.size > m.samples.back().size)) continue;
      m.samples.push_back({r.size, file_time(r.time), file_rate(r.algbw), file_rate(r.busbw)});
    }
    file.collectives.push_back(std::move(m));
  }
  return file;
}

}  // namespace motley
