// Communication microbenchmarks over a Transport, in nccl-tests' conventions: one-way
// point-to-point time between every ordered pair of ranks and all-reduce / all-gather /
// reduce-scatter / all-to-all over all ranks, each over a size sweep, every result checked;
// plus the alpha-beta fit of each pair, the tables, and the links file (motley.links/1) built
// from them. Method and conventions: docs/profile-comm.md. It does not launch ranks (motley
// launch, torchrun or mpirun do) and knows nothing of plans. run_comm_benchmark is called by
// every rank of one world, one thread per rank; the other functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "motley/cluster/measured_links.h"
#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/cost/collectives.h"
#include "motley/exec/transport.h"

namespace motley {

enum class CommOp { kP2p, kAllReduce, kAllGather, kReduceScatter, kAllToAll };

// "p2p", "all_reduce", "all_gather", "reduce_scatter", "all_to_all" (the --ops names).
const char* comm_op_name(CommOp op);
std::optional<CommOp> parse_comm_op(std::string_view name);
std::vector<CommOp> all_comm_ops();

// nccl-tests' busbw / algbw: 1 for p2p, else bus_bandwidth_factor (2(k-1)/k all-reduce,
// (k-1)/k the others).
double comm_bus_factor(CommOp op, int ranks);

struct CommBenchOptions {
  std::vector<int64_t> sizes;  // bytes, nccl-tests' "size"; each rounded down per op (below)
  int iters = 20;              // timed iterations per size, >= 1
  int warmup = 5;              // untimed iterations per size before them, >= 0
  std::vector<CommOp> ops = all_comm_ops();
  // What Transport::all_reduce_sum is under this transport, for the tables.
  std::string all_reduce_implementation = "Transport::all_reduce_sum";
};

// One line of a table. `size` is what was moved after rounding down to whole float32 elements
// (and, for the collectives that split the buffer, to a multiple of ranks elements).
struct CommRow {
  Bytes size;
  int64_t count = 0;  // float32 elements of `size`, nccl-tests' "count"
  Seconds time;       // mean per iteration; collectives: also averaged over ranks
  BytesPerSecond algbw;
  BytesPerSecond busbw;
};

struct PairResult {
  int src = 0;  // ranks
  int dst = 0;
  std::vector<CommRow> rows;
  AlphaBeta fit;  // fit_alpha_beta over rows
};

struct CollectiveResult {
  CommOp op = CommOp::kAllReduce;
  std::string implementation;  // what was measured, e.g. "ring over Transport send/recv"
  std::vector<CommRow> rows;
};

struct CommBenchResult {
  int world_size = 0;
  int iters = 0;
  int warmup = 0;
  Seconds ack_latency;  // half the round trip of a one-element message, subtracted from p2p
  std::vector<PairResult> pairs;  // ordered pairs, (0,1), (0,2), ..., (1,0), ...
  std::vector<CollectiveResult> collectives;
};

// Runs the sweep on this rank; every rank of `transport`'s world calls it with equal options
// and gets the same result. A wrong result on any rank (a sum, a gathered block or a message
// that is not the expected value) is an internal error on every rank, naming op, size and rank.
// A transport failure is returned as it came. REQUIRES: options checked (sizes non-empty and
// positive, iters >= 1, warmup >= 0).
Result<CommBenchResult> run_comm_benchmark(const CommBenchOptions& options, Transport& transport);

// Least squares of time = alpha + n / beta over (n, time) points: with n̄, t̄ the means,
// slope s = Σ(n-n̄)(t-t̄) / Σ(n-n̄)², alpha = t̄ - s n̄, beta = 1 / s. When the intercept comes out
// negative, alpha = 0 and the slope is refitted through the origin, s = Σ n t / Σ n².
// Errors (invalid_argument): fewer than two distinct sizes, or time not growing with size.
Result<AlphaBeta> fit_alpha_beta(const std::vector<std::pair<Bytes, Seconds>>& points);

// "64", "1K", "16M", "2G" (binary multiples, as nccl-tests' -b/-e). Errors name `option`.
Result<int64_t> parse_byte_size(std::string_view text, std::string_view option);
// nccl-tests' sweep: min, min*factor, ... up to and including max (when reached exactly or
// the last step lands on it). REQUIRES: 0 < min <= max, factor > 1.
std::vector<int64_t> size_sweep(int64_t min, int64_t max, double factor);

// The tables rank 0 prints (docs/profile-comm.md shows one), ending with nccl-tests'
// "# Avg bus bandwidth" line over every row.
std::string comm_report_text(const CommBenchResult& result, const std::string& transport);
Json comm_report_json(const CommBenchResult& result, const std::string& transport);
// The links file: pair fits with rank r as device first_device + r, and the collectives' rows
// over devices first_device .. first_device + world_size - 1 (a size that rounding to whole
// elements repeats is written once, its first row), each value rounded to six significant digits in
// the file's units (µs, GB/s) so that the written file reads back to exactly this LinksFile.
LinksFile comm_links_file(const CommBenchResult& result, const std::string& transport,
                          int first_device);

}  // namespace motley
