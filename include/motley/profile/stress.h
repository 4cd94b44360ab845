// A burn-in before scaling out: every rank's device runs matrix products for a set time, every
// pair of ranks exchanges messages for a set time, and all ranks sum buffers together; every
// result is checked exactly, and each device's and each pair's throughput is set against the
// median of its peers (and against what a cluster file expects, where one is given), so that a
// slow or faulty device or link stands out. Method: docs/stress.md. run_stress is called by every
// rank of one world (one thread per rank in-process); the other functions are pure.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "motley/cluster/measured_links.h"
#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/exec/transport.h"

namespace motley {

struct StressOptions {
  Seconds compute_time = Seconds(5);  // matrix products on every rank at once
  Seconds link_time = Seconds(5);     // all pairs, in rounds of disjoint pairs
  Seconds collective_time = Seconds(2);
  int64_t gemm_size = 512;          // n of the n x n x n float32 products, 2..2048
  int64_t message_bytes = 4 << 20;  // per message; whole float32 elements, >= 8
  double slow_below = 0.8;          // of the peers' median: flagged slow
  // The product each rank runs; tests substitute a faulty or slow one. Empty: at::mm.
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> matmul;
  // Called on every message a rank receives, before it is checked; tests corrupt one.
  std::function<void(at::Tensor& message)> on_receive;
};

// Expected throughputs from a cluster file, by rank; 0 where unknown.
struct StressExpectations {
  std::vector<double> flops_per_s;                    // per rank: the device's float32 peak
  std::vector<std::vector<double>> link_bytes_per_s;  // [a][b]: the path's bandwidth
};

struct DeviceStress {
  int rank = 0;
  int64_t products = 0;  // matrix products run and checked
  int64_t wrong = 0;     // products whose row or column sums were not the exact ones
  Seconds time;
  double flops_per_s = 0;
  double vs_median = 0;    // flops_per_s over the median of all ranks
  double vs_expected = 0;  // over StressExpectations' peak; 0 without one
  bool slow = false;       // vs_median below slow_below
};

struct LinkStress {
  int a = 0, b = 0;         // ranks, a < b
  int64_t round_trips = 0;  // a message each way
  int64_t wrong = 0;        // messages (either way) that were not the expected bytes
  Seconds time;
  Seconds latency;         // half the round trip of a one-element message
  double bytes_per_s = 0;  // one direction's rate: message bytes x 2 round_trips / time
  double vs_median = 0;
  double vs_expected = 0;
  bool slow = false;
};

struct CollectiveStress {
  int64_t iterations = 0;
  int64_t wrong = 0;  // sums, on any rank, that were not the exact ones
  Seconds time;
  int64_t bytes = 0;  // per rank
  double busbw = 0;   // nccl-tests' bus bandwidth, 2 (k-1)/k bytes / time per iteration
};

struct StressResult {
  int world_size = 0;
  int64_t gemm_size = 0;
  int64_t message_bytes = 0;
  double slow_below = 0;
  std::vector<DeviceStress> devices;  // by rank
  std::vector<LinkStress> links;      // every pair, (0,1), (0,2), ..., (1,2), ...
  CollectiveStress all_reduce;
  bool faulty() const;  // any wrong result
  int slow_count() const;
};

// Runs the burn-in on this rank; every rank of `transport`'s world calls it with equal options
// and gets the same result. A transport failure is returned as it came; wrong results are
// counted, not errors. REQUIRES: options as documented (checked by check_stress_options).
Result<StressResult> run_stress(const StressOptions& options, Transport& transport);
Status check_stress_options(const StressOptions& options);

// The rounds the pairs meet in (a round-robin tournament by the circle method): every pair
// (a < b) of n ranks in exactly one round, no rank twice in one round; n - 1 rounds for even n,
// n for odd.
std::vector<std::vector<std::pair<int, int>>> stress_rounds(int n);

// Fills vs_expected from `expected` (ranks beyond its size keep 0).
void apply_expectations(const StressExpectations& expected, StressResult* result);

// The report rank 0 prints: a table of devices, one of links, the all-reduce and a verdict
// line naming every faulty or slow device and link.
std::string stress_report_text(const StressResult& result, const std::string& transport);
Json stress_report_json(const StressResult& result, const std::string& transport);
// The pairs' measured latency and one-way bandwidth as a links file (rank r is device
// first_device + r), for a cluster's measured_links.
LinksFile stress_links_file(const StressResult& result, const std::string& transport,
                            int first_device);

}  // namespace motley
