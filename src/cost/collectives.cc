#include "motley/cost/collectives.h"

#include <algorithm>

#include "motley/cluster/measured_links.h"
#include "motley/core/check.h"

namespace motley {
namespace {

// `steps` latency terms plus `fraction` of the buffer over the link.
Seconds alpha_beta(double steps, double fraction, Bytes bytes, AlphaBeta link) {
  return link.latency * steps + (bytes * fraction) / link.bandwidth;
}

}  // namespace

Seconds ring_all_reduce_time(int k, Bytes bytes, AlphaBeta link) {
  if (k <= 1) return Seconds(0);
  return alpha_beta(2.0 * (k - 1), 2.0 * (k - 1) / k, bytes, link);
}

Seconds ring_reduce_scatter_time(int k, Bytes bytes, AlphaBeta link) {
  if (k <= 1) return Seconds(0);
  return alpha_beta(k - 1, static_cast<double>(k - 1) / k, bytes, link);
}

Seconds ring_all_gather_time(int k, Bytes bytes, AlphaBeta link) {
  return ring_reduce_scatter_time(k, bytes, link);
}

Seconds pairwise_all_to_all_time(int k, Bytes bytes, AlphaBeta link) {
  // The same step count and volume as reduce-scatter: each of the k-1 steps ships n/k bytes.
  return ring_reduce_scatter_time(k, bytes, link);
}

Seconds flat_collective_time(Collective collective, int k, Bytes bytes, AlphaBeta link) {
  switch (collective) {
    case Collective::kAllReduce:
      return ring_all_reduce_time(k, bytes, link);
    case Collective::kReduceScatter:
      return ring_reduce_scatter_time(k, bytes, link);
    case Collective::kAllGather:
      return ring_all_gather_time(k, bytes, link);
    case Collective::kAllToAll:
      return pairwise_all_to_all_time(k, bytes, link);
  }
  return Seconds(0);
}

Seconds hierarchical_collective_time(Collective collective, int nodes, int local, Bytes bytes,
                                     AlphaBeta intra, AlphaBeta inter) {
  if (nodes * local <= 1) return Seconds(0);
  const Bytes shard = bytes / (local > 0 ? local : 1);
  switch (collective) {
    case Collective::kAllReduce:
      return ring_reduce_scatter_time(local, bytes, intra) +
             ring_all_reduce_time(nodes, shard, inter) + ring_all_gather_time(local, bytes, intra);
    case Collective::kReduceScatter:
      return ring_reduce_scatter_time(local, bytes, intra) +
             ring_reduce_scatter_time(nodes, shard, inter);
    case Collective::kAllGather:
      return ring_all_gather_time(nodes, shard, inter) + ring_all_gather_time(local, bytes, intra);
    case Collective::kAllToAll:
      return pairwise_all_to_all_time(nodes * local, bytes, inter);
  }
  return Seconds(0);
}

double bus_bandwidth_factor(Collective collective, int k) {
  if (k <= 1) return 0.0;
  const double base = static_cast<double>(k - 1) / k;
  return collective == Collective::kAllReduce ? 2.0 * base : base;
}

BytesPerSecond bus_bandwidth(Collective collective, int k, BytesPerSecond algorithm_bandwidth) {
  return algorithm_bandwidth * bus_bandwidth_factor(collective, k);
}

BytesPerSecond algorithm_bandwidth(Collective collective, int k, BytesPerSecond bus_bandwidth) {
  MOTLEY_CHECK(k >= 2, "algorithm_bandwidth needs at least two participants");
  return bus_bandwidth / bus_bandwidth_factor(collective, k);
}

std::optional<Collective> collective_from_op(std::string_view op) {
  if (op == "all_reduce") return Collective::kAllReduce;
  if (op == "reduce_scatter") return Collective::kReduceScatter;
  if (op == "all_gather") return Collective::kAllGather;
  if (op == "all_to_all") return Collective::kAllToAll;
  return std::nullopt;
}

Seconds measured_collective_time(std::span<const CollectiveSample> samples, Bytes bytes) {
  MOTLEY_CHECK(!samples.empty(), "a measured collective without samples");
  const CollectiveSample& first = samples.front();
  const CollectiveSample& last = samples.back();
  if (bytes <= first.size) return first.time;
  if (bytes >= last.size) {
    // A sweep of one empty message says nothing of bandwidth: its time is all there is.
    return last.size.value() > 0 ? last.time * (bytes / last.size) : last.time;
  }
  // The first sample at or above `bytes`; its predecessor is below it.
  const auto above =
      std::lower_bound(samples.begin(), samples.end(), bytes,
                       [](const CollectiveSample& s, Bytes b) { return s.size < b; });
  const CollectiveSample& hi = *above;
  const CollectiveSample& lo = *(above - 1);
  const double f = (bytes - lo.size) / (hi.size - lo.size);
  return lo.time + (hi.time - lo.time) * f;
}

}  // namespace motley
