#include "motley/profile/stress.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace motley {
namespace {

using Clock = std::chrono::steady_clock;

constexpr MessageTag kTagLatencyPing = 7300;
constexpr MessageTag kTagLatencyPong = 7301;
constexpr MessageTag kTagPing = 7302;
constexpr MessageTag kTagPong = 7303;
constexpr int kLatencyTrips = 20;

double elapsed_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Status finish_all(std::vector<std::unique_ptr<TransportRequest>>* requests) {
  Status first;
  for (auto& r : *requests) {
    Status s = r->wait();
    if (first.is_ok() && !s.is_ok()) first = s;
  }
  requests->clear();
  return first;
}

Status queue(std::vector<std::unique_ptr<TransportRequest>>* requests,
             Result<std::unique_ptr<TransportRequest>> request) {
  if (!request.is_ok()) return request.status();
  requests->push_back(std::move(request).value());
  return Status::ok();
}

// Integers in [-2, 2] spread without a short period, so that the matrix product's row and
// column sums test every element.
at::Tensor pattern_matrix(int64_t n, int64_t seed) {
  const at::Tensor i = at::arange(n * n, at::kLong);
  return ((i * i * 3 + i * 7 + seed * 104729) % 5 - 2).to(at::kFloat).reshape({n, n});
}

// Small integers (exact in float32 and in any sum of a few thousand of them) for messages.
at::Tensor pattern_message(int64_t elements, int64_t seed) {
  const at::Tensor i = at::arange(elements, at::kLong);
  return ((i * 31 + seed * 7919) % 251).to(at::kFloat);
}

double middle_value(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

std::vector<std::vector<std::pair<int, int>>> stress_rounds(int n) {
  if (n < 2) return {};
  const int m = n % 2 == 0 ? n : n + 1;  // rank n is a bye
  std::vector<int> seat(m);
  for (int i = 0; i < m; ++i) seat[i] = i;
  std::vector<std::vector<std::pair<int, int>>> out;
  for (int r = 0; r + 1 < m; ++r) {
    std::vector<std::pair<int, int>> pairs;
    for (int k = 0; k < m / 2; ++k) {
      const int a = seat[k], b = seat[m - 1 - k];
      if (a < n && b < n) pairs.emplace_back(std::min(a, b), std::max(a, b));
    }
    out.push_back(std::move(pairs));
    std::rotate(seat.begin() + 1, seat.end() - 1, seat.end());
  }
  return out;
}

namespace {

int pair_index(int a, int b, int n) {  // (0,1), (0,2), ..., (1,2), ...
  return a * n - a * (a + 1) / 2 + (b - a - 1);
}

struct PairMeasure {
  int64_t trips = 0;
  int64_t wrong = 0;
  double time = 0;
  double latency = 0;
};

// One pair's share of a round: latency ping-pongs, then full messages each way until the lower
// rank's time is up (the flag in each message's last element tells the other side).
Result<PairMeasure> stress_pair(const StressOptions& o, Transport& t, int a, int b,
                                double seconds) {
  const bool lower = t.rank() == a;
  const int peer = lower ? b : a;
  PairMeasure out;
  std::vector<std::unique_ptr<TransportRequest>> reqs;
  // A buffer for each direction: a send's buffer is never a receive's.
  at::Tensor ping = at::zeros({1}, at::kFloat);
  at::Tensor pong = at::zeros({1}, at::kFloat);
  for (int i = -2; i < kLatencyTrips; ++i) {  // two untimed
    const Clock::time_point start = Clock::now();
    if (lower) {
      MOTLEY_RETURN_IF_ERROR(queue(&reqs, t.send(ping, peer, kTagLatencyPing, "a stress ping")));
      MOTLEY_RETURN_IF_ERROR(queue(&reqs, t.recv(pong, peer, kTagLatencyPong, "a stress pong")));
    } else {
      MOTLEY_RETURN_IF_ERROR(queue(&reqs, t.recv(ping, peer, kTagLatencyPing, "a stress ping")));
      MOTLEY_RETURN_IF_ERROR(finish_all(&reqs));
      MOTLEY_RETURN_IF_ERROR(queue(&reqs, t.send(pong, peer, kTagLatencyPong, "a stress pong")));
    }
    MOTLEY_RETURN_IF_ERROR(finish_all(&reqs));
    if (i >= 0) out.latency += elapsed_since(start) / 2 / kLatencyTrips;
  }

  const int64_t elements = o.message_bytes / 4;
  const at::Tensor mine = pattern_message(elements, lower ? a * 4096 + b : b * 4096 + a);
  const at::Tensor theirs = pattern_message(elements, lower ? b * 4096 + a : a * 4096 + b);
  at::Tensor outgoing = mine.clone();
  at::Tensor incoming = at::empty_like(mine);
  const int64_t body = elements - 1;  // the last element is the stop flag
  auto check = [&] {
    if (o.on_receive) o.on_receive(incoming);
    if (!at::equal(incoming.narrow(0, 0, body), theirs.narrow(0, 0, body))) ++out.wrong;
  };
  const Clock::time_point start = Clock::now();
  double busy = 0;
  while (true) {
    incoming.fill_(-1);  // a message that never arrived cannot pass as the last one
    bool stop = false;
    const Clock::time_point trip = Clock::now();
    if (lower) {
      stop = elapsed_since(start) >= seconds;
      outgoing[body] = stop ? 1.0F : 0.0F;
      MOTLEY_RETURN_IF_ERROR(queue(&reqs, t.send(outgoing, peer, kTagPing, "a stress message")));
      MOTLEY_RETURN_IF_ERROR(queue(&reqs, t.recv(incoming, peer, kTagPong, "a stress message")));
      MOTLEY_RETURN_IF_ERROR(finish_all(&reqs));
      busy += elapsed_since(trip);
      check();
    } else {
      MOTLEY_RETURN_IF_ERROR(queue(&reqs, t.recv(incoming, peer, kTagPing, "a stress message")));
      MOTLEY_RETURN_IF_ERROR(finish_all(&reqs));
      stop = incoming[body].item<float>() != 0.0F;
      outgoing[body] = stop ? 1.0F : 0.0F;
      MOTLEY_RETURN_IF_ERROR(queue(&reqs, t.send(outgoing, peer, kTagPong, "a stress message")));
      check();  // while the reply travels
      MOTLEY_RETURN_IF_ERROR(finish_all(&reqs));
    }
    ++out.trips;
    if (stop) break;
  }
  out.time = busy;
  return out;
}

}  // namespace

bool StressResult::faulty() const {
  return std::any_of(devices.begin(), devices.end(), [](const auto& d) { return d.wrong > 0; }) ||
         std::any_of(links.begin(), links.end(), [](const auto& l) { return l.wrong > 0; }) ||
         all_reduce.wrong > 0;
}

int StressResult::slow_count() const {
  return static_cast<int>(
      std::count_if(devices.begin(), devices.end(), [](const auto& d) { return d.slow; }) +
      std::count_if(links.begin(), links.end(), [](const auto& l) { return l.slow; }));
}

Status check_stress_options(const StressOptions& o) {
  if (!(o.compute_time > Seconds(0)) || !(o.link_time > Seconds(0)) ||
      !(o.collective_time > Seconds(0))) {
    return invalid_argument("stress: every phase needs a positive time");
  }
  if (o.gemm_size < 2 || o.gemm_size > 2048) {
    return invalid_argument(
        fmt::format("stress: the product size must be from 2 to 2048, got {}", o.gemm_size));
  }
  if (o.message_bytes < 8 || o.message_bytes > (int64_t{1} << 30)) {
    return invalid_argument(
        fmt::format("stress: messages must be from 8 B to 1 GiB, got {} B", o.message_bytes));
  }
  if (!(o.slow_below > 0 && o.slow_below <= 1)) {
    return invalid_argument("stress: the slow threshold must be in (0, 1]");
  }
  return Status::ok();
}

Result<StressResult> run_stress(const StressOptions& o, Transport& t) {
  MOTLEY_RETURN_IF_ERROR(check_stress_options(o));
  const int n = t.world_size();
  const int me = t.rank();
  const int pairs = n * (n - 1) / 2;
  StressResult result;
  result.world_size = n;
  result.gemm_size = o.gemm_size;
  result.message_bytes = o.message_bytes / 4 * 4;
  result.slow_below = o.slow_below;

  // Per rank 3 numbers, per pair 4, then the all-reduce's 3; each rank fills its own and the
  // lower end of each pair its pair's, and one sum hands everything to everybody.
  const int64_t device_base = 0, link_base = 3 * n, collective_base = link_base + 4 * pairs;
  at::Tensor gathered = at::zeros({collective_base + 3}, at::kDouble);
  auto put = [&](int64_t i, double v) { gathered[i] = v; };

  // Compute: every rank at once.
  MOTLEY_RETURN_IF_ERROR(t.barrier());
  {
    const int64_t k = o.gemm_size;
    const at::Tensor a = pattern_matrix(k, 2 * me + 1);
    const at::Tensor b = pattern_matrix(k, 2 * me + 2);
    const at::Tensor ad = a.to(at::kDouble), bd = b.to(at::kDouble);
    const at::Tensor rows = at::mv(ad, bd.sum(1));
    const at::Tensor cols = at::mv(bd.t(), ad.sum(0));
    int64_t products = 0, wrong = 0;
    double busy = 0;
    const Clock::time_point start = Clock::now();
    while (products == 0 || elapsed_since(start) < o.compute_time.value()) {
      const Clock::time_point t0 = Clock::now();
      const at::Tensor c = o.matmul ? o.matmul(a, b) : at::mm(a, b);
      busy += elapsed_since(t0);
      const at::Tensor cd = c.to(at::kDouble);
      if (!at::equal(cd.sum(1), rows) || !at::equal(cd.sum(0), cols)) ++wrong;
      ++products;
    }
    put(device_base + 3 * me, static_cast<double>(products));
    put(device_base + 3 * me + 1, static_cast<double>(wrong));
    put(device_base + 3 * me + 2, busy);
  }

  // Links: rounds of disjoint pairs.
  MOTLEY_RETURN_IF_ERROR(t.barrier());
  const auto rounds = stress_rounds(n);
  const double round_time =
      o.link_time.value() / static_cast<double>(std::max<size_t>(1, rounds.size()));
  for (const auto& round : rounds) {
    for (const auto& [a, b] : round) {
      if (me != a && me != b) continue;
      MOTLEY_ASSIGN_OR_RETURN(PairMeasure m, stress_pair(o, t, a, b, round_time));
      const int64_t base = link_base + 4 * pair_index(a, b, n);
      if (me == a) {
        put(base, static_cast<double>(m.trips));
        put(base + 2, m.time);
        put(base + 3, m.latency);
      }
      // Both ends count what they received wrong.
      gathered[base + 1] = gathered[base + 1].item<double>() + static_cast<double>(m.wrong);
    }
    MOTLEY_RETURN_IF_ERROR(t.barrier());
  }

  // The all-reduce over everybody, until rank 0's time is up.
  {
    std::vector<int> everyone(n);
    for (int r = 0; r < n; ++r) everyone[r] = r;
    const int64_t elements = o.message_bytes / 4;
    const int64_t body = elements - 1;
    const at::Tensor mine = pattern_message(elements, 1000 + me);
    at::Tensor expected = at::zeros({elements}, at::kFloat);
    for (int r = 0; r < n; ++r) expected += pattern_message(elements, 1000 + r);
    at::Tensor buffer = at::empty_like(mine);
    int64_t iterations = 0, wrong = 0;
    double busy = 0;
    const Clock::time_point start = Clock::now();
    while (true) {
      buffer.copy_(mine);
      buffer[body] = me == 0 && elapsed_since(start) >= o.collective_time.value() ? 1.0F : 0.0F;
      const Clock::time_point t0 = Clock::now();
      MOTLEY_RETURN_IF_ERROR(t.all_reduce_sum({buffer}, everyone));
      busy += elapsed_since(t0);
      if (o.on_receive) o.on_receive(buffer);
      if (!at::equal(buffer.narrow(0, 0, body), expected.narrow(0, 0, body))) ++wrong;
      ++iterations;
      if (buffer[body].item<float>() != 0.0F) break;
    }
    if (me == 0) {
      put(collective_base, static_cast<double>(iterations));
      put(collective_base + 2, busy);
    }
    gathered[collective_base + 1] = static_cast<double>(wrong);
  }
  MOTLEY_RETURN_IF_ERROR(t.all_reduce_sum({gathered}, [n] {
    std::vector<int> all(n);
    for (int r = 0; r < n; ++r) all[r] = r;
    return all;
  }()));

  const auto g = [&](int64_t i) { return gathered[i].item<double>(); };
  const double flops_per_product = 2.0 * std::pow(static_cast<double>(o.gemm_size), 3);
  std::vector<double> rates;
  for (int r = 0; r < n; ++r) {
    DeviceStress d;
    d.rank = r;
    d.products = static_cast<int64_t>(g(3 * r));
    d.wrong = static_cast<int64_t>(g(3 * r + 1));
    d.time = Seconds(g(3 * r + 2));
    d.flops_per_s = d.time > Seconds(0)
                        ? static_cast<double>(d.products) * flops_per_product / d.time.value()
                        : 0;
    rates.push_back(d.flops_per_s);
    result.devices.push_back(d);
  }
  const double device_median = middle_value(rates);
  for (DeviceStress& d : result.devices) {
    d.vs_median = device_median > 0 ? d.flops_per_s / device_median : 0;
    d.slow = d.vs_median < o.slow_below;
  }
  std::vector<double> link_rates;
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      const int64_t base = link_base + 4 * pair_index(a, b, n);
      LinkStress l;
      l.a = a;
      l.b = b;
      l.round_trips = static_cast<int64_t>(g(base));
      l.wrong = static_cast<int64_t>(g(base + 1));
      l.time = Seconds(g(base + 2));
      l.latency = Seconds(g(base + 3));
      l.bytes_per_s = l.time > Seconds(0) ? static_cast<double>(result.message_bytes) * 2.0 *
                                                static_cast<double>(l.round_trips) / l.time.value()
                                          : 0;
      link_rates.push_back(l.bytes_per_s);
      result.links.push_back(l);
    }
  }
  const double link_median = middle_value(link_rates);
  for (LinkStress& l : result.links) {
    l.vs_median = link_median > 0 ? l.bytes_per_s / link_median : 0;
    l.slow = l.vs_median < o.slow_below;
  }
  CollectiveStress& c = result.all_reduce;
  c.iterations = static_cast<int64_t>(g(collective_base));
  c.wrong = static_cast<int64_t>(g(collective_base + 1));
  c.time = Seconds(g(collective_base + 2));
  c.bytes = result.message_bytes;
  if (c.time > Seconds(0) && n > 1) {
    c.busbw = 2.0 * (n - 1) / n * static_cast<double>(c.bytes) * static_cast<double>(c.iterations) /
              c.time.value();
  }
  return result;
}

void apply_expectations(const StressExpectations& expected, StressResult* result) {
  for (DeviceStress& d : result->devices) {
    if (d.rank < static_cast<int>(expected.flops_per_s.size()) &&
        expected.flops_per_s[d.rank] > 0) {
      d.vs_expected = d.flops_per_s / expected.flops_per_s[d.rank];
    }
  }
  for (LinkStress& l : result->links) {
    if (l.a < static_cast<int>(expected.link_bytes_per_s.size()) &&
        l.b < static_cast<int>(expected.link_bytes_per_s[l.a].size()) &&
        expected.link_bytes_per_s[l.a][l.b] > 0) {
      l.vs_expected = l.bytes_per_s / expected.link_bytes_per_s[l.a][l.b];
    }
  }
}

namespace {

std::string ratio(double r) { return r > 0 ? fmt::format("{:.3f}", r) : "-"; }

std::string status_of(int64_t wrong, bool slow) {
  if (wrong > 0) return "FAULTY";
  return slow ? "slow" : "ok";
}

}  // namespace

std::string stress_report_text(const StressResult& r, const std::string& transport) {
  std::string out = fmt::format("# stress: {} ranks over {}\n", r.world_size, transport);
  out += fmt::format(
      "# compute: float32 {0} x {0} x {0} products, each checked by its exact row and column "
      "sums\n",
      r.gemm_size);
  out += fmt::format("# {:>5} {:>10} {:>7} {:>10} {:>10} {:>12} {:>7}\n", "rank", "products",
                     "wrong", "GFLOP/s", "vs median", "vs expected", "status");
  for (const DeviceStress& d : r.devices) {
    out += fmt::format("  {:>5} {:>10} {:>7} {:>10.2f} {:>10} {:>12} {:>7}\n", d.rank, d.products,
                       d.wrong, d.flops_per_s / 1e9, ratio(d.vs_median), ratio(d.vs_expected),
                       status_of(d.wrong, d.slow));
  }
  if (!r.links.empty()) {
    out += fmt::format("# links: {} B messages each way, every message checked; GB/s one way\n",
                       r.message_bytes);
    out += fmt::format("# {:>7} {:>11} {:>7} {:>12} {:>9} {:>10} {:>12} {:>7}\n", "pair",
                       "round trips", "wrong", "latency (us)", "GB/s", "vs median", "vs expected",
                       "status");
    for (const LinkStress& l : r.links) {
      out += fmt::format("  {:>7} {:>11} {:>7} {:>12.2f} {:>9.3f} {:>10} {:>12} {:>7}\n",
                         fmt::format("{}-{}", l.a, l.b), l.round_trips, l.wrong,
                         l.latency.value() * 1e6, l.bytes_per_s / 1e9, ratio(l.vs_median),
                         ratio(l.vs_expected), status_of(l.wrong, l.slow));
    }
    const CollectiveStress& c = r.all_reduce;
    out += fmt::format("# all_reduce over all {} ranks, {} B per rank, every sum checked exactly\n",
                       r.world_size, c.bytes);
    out += fmt::format("# {:>10} {:>7} {:>12} {:>7}\n", "iterations", "wrong", "busbw (GB/s)",
                       "status");
    out += fmt::format("  {:>10} {:>7} {:>12.3f} {:>7}\n", c.iterations, c.wrong, c.busbw / 1e9,
                       status_of(c.wrong, false));
  }
  std::vector<std::string> faulty, slow;
  for (const DeviceStress& d : r.devices) {
    if (d.wrong > 0) faulty.push_back(fmt::format("rank {} ({} wrong products)", d.rank, d.wrong));
    if (d.slow && d.wrong == 0) {
      slow.push_back(fmt::format("rank {} ({:.2f} of the median)", d.rank, d.vs_median));
    }
  }
  for (const LinkStress& l : r.links) {
    if (l.wrong > 0) {
      faulty.push_back(fmt::format("link {}-{} ({} wrong messages)", l.a, l.b, l.wrong));
    }
    if (l.slow && l.wrong == 0) {
      slow.push_back(fmt::format("link {}-{} ({:.2f} of the median)", l.a, l.b, l.vs_median));
    }
  }
  if (r.all_reduce.wrong > 0) {
    faulty.push_back(fmt::format("all_reduce ({} wrong sums)", r.all_reduce.wrong));
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  if (faulty.empty() && slow.empty()) {
    out +=
        fmt::format("# verdict: healthy: every result exact, nothing below {:.2f} of the median\n",
                    r.slow_below);
  } else {
    out += "# verdict:";
    if (!faulty.empty()) out += " FAULTY " + join(faulty) + ";";
    if (!slow.empty()) {
      out += fmt::format(" slow (below {:.2f} of the median) {};", r.slow_below, join(slow));
    }
    out.back() = '\n';
  }
  return out;
}

Json stress_report_json(const StressResult& r, const std::string& transport) {
  Json devices = Json::array();
  for (const DeviceStress& d : r.devices) {
    devices.push_back({{"rank", d.rank},
                       {"products", d.products},
                       {"wrong", d.wrong},
                       {"time_s", d.time.value()},
                       {"flops_per_s", d.flops_per_s},
                       {"vs_median", d.vs_median},
                       {"vs_expected", d.vs_expected},
                       {"slow", d.slow}});
  }
  Json links = Json::array();
  for (const LinkStress& l : r.links) {
    links.push_back({{"a", l.a},
                     {"b", l.b},
                     {"round_trips", l.round_trips},
                     {"wrong", l.wrong},
                     {"time_s", l.time.value()},
                     {"latency_s", l.latency.value()},
                     {"bytes_per_s", l.bytes_per_s},
                     {"vs_median", l.vs_median},
                     {"vs_expected", l.vs_expected},
                     {"slow", l.slow}});
  }
  const CollectiveStress& c = r.all_reduce;
  return Json{{"format", "motley.stress/1"},
              {"transport", transport},
              {"world_size", r.world_size},
              {"gemm_size", r.gemm_size},
              {"message_bytes", r.message_bytes},
              {"slow_below", r.slow_below},
              {"devices", devices},
              {"links", links},
              {"all_reduce",
               {{"iterations", c.iterations},
                {"wrong", c.wrong},
                {"time_s", c.time.value()},
                {"bytes", c.bytes},
                {"busbw", c.busbw}}},
              {"faulty", r.faulty()},
              {"slow", r.slow_count()}};
}

LinksFile stress_links_file(const StressResult& r, const std::string& transport, int first_device) {
  // Six significant digits in the file's units, so the file reads back to these numbers.
  auto round6 = [](double v) { return std::stod(fmt::format("{:.6g}", v)); };
  LinksFile file;
  file.transport = transport;
  for (const LinkStress& l : r.links) {
    if (l.round_trips == 0 || !(l.bytes_per_s > 0)) continue;
    // One way: latency + bytes / bandwidth = half a round trip.
    const double half = l.time.value() / static_cast<double>(l.round_trips) / 2;
    const double rest = half - l.latency.value();
    const double bandwidth = static_cast<double>(r.message_bytes) / (rest > 0 ? rest : half);
    const Seconds latency(round6(l.latency.value() * 1e6) / 1e6);
    const BytesPerSecond rate(round6(bandwidth / 1e9) * 1e9);
    file.links.push_back({first_device + l.a, first_device + l.b, latency, rate});
    file.links.push_back({first_device + l.b, first_device + l.a, latency, rate});
  }
  return file;
}

}  // namespace motley
