// Closed-form alpha-beta times of collective algorithms (ring, pairwise exchange, two-level
// hierarchical) and nccl-tests' algorithm-to-bus bandwidth factors. Pure formulas over a
// latency and a bandwidth: which paths those come from is the cost model's business
// (analytic_cost_model.cc). Derivations: docs/timing-model.md. Pure functions; thread-safe.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "motley/core/units.h"
#include "motley/cost/cost_model.h"

namespace motley {

struct CollectiveSample;  // motley/cluster/measured_links.h

// One step of a collective: a message of n bytes costs latency + n / bandwidth.
struct AlphaBeta {
  Seconds latency;           // alpha
  BytesPerSecond bandwidth;  // beta, per direction
};

// In every function `k` is the number of participants and `bytes` the per-participant buffer
// size as nccl-tests calls it "size": the whole vector for all-reduce, the unsharded vector
// for reduce-scatter and all-gather, the whole send buffer for all-to-all.
// k <= 1 costs 0 (nothing to exchange); zero bytes with k > 1 still pays the latency steps.

// Ring all-reduce: 2(k-1) alpha + 2(k-1)/k * n / beta.
Seconds ring_all_reduce_time(int k, Bytes bytes, AlphaBeta link);
// Ring reduce-scatter and ring all-gather: (k-1) alpha + (k-1)/k * n / beta.
Seconds ring_reduce_scatter_time(int k, Bytes bytes, AlphaBeta link);
Seconds ring_all_gather_time(int k, Bytes bytes, AlphaBeta link);
// Pairwise-exchange all-to-all: k-1 steps, each sending n/k to one peer, so
// (k-1) alpha + (k-1)/k * n / beta with beta the slowest pair's bandwidth.
Seconds pairwise_all_to_all_time(int k, Bytes bytes, AlphaBeta link);
// The single-level algorithm above for `collective`.
Seconds flat_collective_time(Collective collective, int k, Bytes bytes, AlphaBeta link);

// Two levels, `nodes` nodes of `local` participants each (k = nodes * local):
// all-reduce = intra reduce-scatter(n) + inter all-reduce(n / local) + intra all-gather(n);
// reduce-scatter = intra reduce-scatter(n) + inter reduce-scatter(n / local);
// all-gather = inter all-gather(n / local) + intra all-gather(n).
// All-to-all has no two-level form here: it is priced as the flat pairwise exchange over
// `inter` (the slower level), see docs/timing-model.md.
Seconds hierarchical_collective_time(Collective collective, int nodes, int local, Bytes bytes,
                                     AlphaBeta intra, AlphaBeta inter);

// nccl-tests' bus bandwidth = algorithm bandwidth (size / time) * factor, so that busbw is
// comparable with the link speed whatever k: all-reduce 2(k-1)/k; reduce-scatter, all-gather
// and all-to-all (k-1)/k. k <= 1 gives 0 (nothing crosses a link).
double bus_bandwidth_factor(Collective collective, int k);
BytesPerSecond bus_bandwidth(Collective collective, int k, BytesPerSecond algorithm_bandwidth);
// The inverse: the algorithm bandwidth a measured bus bandwidth implies.
// REQUIRES: k >= 2.
BytesPerSecond algorithm_bandwidth(Collective collective, int k, BytesPerSecond bus_bandwidth);

// A links file's op name (all_reduce, reduce_scatter, all_gather, all_to_all) as a Collective.
std::optional<Collective> collective_from_op(std::string_view op);

// The time of a collective of `bytes` (nccl-tests' size) from a measured sweep, as
// `motley profile comm` or nccl-tests record it: between two measured sizes, the straight line
// between their times; below the smallest size, its time (a smaller collective is bound by its
// latency steps); above the largest, the largest's time scaled by bytes / size (its algorithm
// bandwidth held, the latency being a vanishing share there). No efficiency applies: the sweep
// is what the transport achieved. REQUIRES: samples non-empty, sizes strictly increasing.
Seconds measured_collective_time(std::span<const CollectiveSample> samples, Bytes bytes);

}  // namespace motley
