// The iteration-time lower bound (docs/planner.md, "Lower bound").
//
// Any plan runs, for every micro-batch and layer, the layer's F, B and W on some device group,
// and updates every layer's parameters at least once. If c[l][k] is the least device-seconds
// that work costs on devices of type k (M micro-batches at the cheapest TP degree, plus one
// memory-bound optimizer pass) and n[k] the devices of type k, the fractional assignment
//   min T  s.t.  sum_k x[l][k] = 1,  sum_l x[l][k] c[l][k] <= n[k] T,  x >= 0
// bounds the iteration time from below. By LP duality every y >= 0 with sum_k n[k] y[k] = 1
// gives  T >= sum_l min_k y[k] c[l][k];  we start from y[k] ~ 1 / (total work on k), the
// "total work over aggregate throughput" bound, and improve it by pairwise ascent. Any y is a
// valid bound, so an ascent that stops early only loosens it.
//
// A second bound holds for every plan too: one micro-batch's forward runs through the layers
// in order and its input gradient back through them in reverse, each step on one device group
// (at most a node, tensor-parallel; under context parallelism each member of a context group
// takes its share of the sequence), so the iteration takes at least the sum over the layers of
// the fastest F + B(input) any group of any type achieves — the critical path of a single
// micro-batch. It binds when the batch is small for the cluster. The embedding and the head are
// left out of it (vocabulary parallelism spreads them over several groups at once), and so is
// the first layer's backward (no gradient flows into the tokens). The bound per micro-batch
// size is the larger of the two; the iteration's, the least over the sizes the planner may use.
//
// "Any group": a group's tensor-parallel collectives run over its node's links, which differ
// between nodes (a node that mixes device types joins them over PCIe) and inside one (PCIe
// switches), so every run of t consecutive devices of the type in every node is priced — once
// per way of building a node, since nodes built alike price alike.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "context.h"

namespace motley::tune_internal {
namespace {

double dual_value(const std::vector<std::vector<double>>& c, const std::vector<double>& n,
                  const std::vector<double>& z) {
  double total = 0;
  for (const auto& row : c) {
    double best = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < n.size(); ++k) best = std::min(best, z[k] / n[k] * row[k]);
    total += best;
  }
  return total;
}

// Maximizes the concave dual over z on the simplex (y[k] = z[k] / n[k]).
double best_dual(const std::vector<std::vector<double>>& c, const std::vector<double>& n) {
  const size_t types = n.size();
  std::vector<double> z(types);
  double norm = 0;
  for (size_t k = 0; k < types; ++k) {
    double work = 0;
    for (const auto& row : c) work += row[k];
    z[k] = work > 0 ? n[k] / work : 0;
    norm += z[k];
  }
  for (double& x : z) x /= norm;
  double value = dual_value(c, n, z);
  if (types == 1) return value;
  for (int pass = 0; pass < 60; ++pass) {
    bool improved = false;
    for (size_t a = 0; a < types; ++a) {
      for (size_t b = 0; b < types; ++b) {
        if (a == b || z[a] <= 0) continue;
        // Golden-section search of the mass moved from a to b (concave along the line).
        double lo = 0, hi = z[a];
        auto at = [&](double d) {
          std::vector<double> w = z;
          w[a] -= d;
          w[b] += d;
          return dual_value(c, n, w);
        };
        const double phi = 0.5 * (std::sqrt(5.0) - 1);
        for (int it = 0; it < 60; ++it) {
          const double x1 = hi - phi * (hi - lo), x2 = lo + phi * (hi - lo);
          if (at(x1) < at(x2)) {
            lo = x1;
          } else {
            hi = x2;
          }
        }
        const double d = 0.5 * (lo + hi);
        const double v = at(d);
        if (v > value * (1 + 1e-12)) {
          z[a] -= d;
          z[b] += d;
          value = v;
          improved = true;
        }
      }
    }
    if (!improved) break;
  }
  return value;
}

// What a node's own links depend on: its devices, interconnect, PCIe and switches. A node
// with a measured link or collective is its own kind.
std::string node_build(const ClusterSpec& cluster, int node, const std::set<int>& measured,
                       const std::vector<int>& devices) {
  for (int d : devices) {
    if (measured.count(d) > 0) return "measured node " + std::to_string(node);
  }
  const NodeSpec& n = cluster.nodes[node];
  // Every figure at full precision ({} writes the shortest text that reads back exactly).
  std::string key;
  for (const NodeDevices& nd : n.devices) key += fmt::format("{}x{},", nd.type, nd.count);
  for (const LinkSpec* link : {&n.interconnect, &n.pcie}) {
    key += fmt::format("{}:{}:{},", static_cast<int>(link->kind), link->bandwidth.value(),
                       link->latency.value());
  }
  return key + std::to_string(n.devices_per_pcie_switch);
}

// The devices a measured link or collective names.
std::set<int> measured_devices(const ClusterSpec& cluster) {
  std::set<int> measured;
  for (const MeasuredLink& m : cluster.measured_links) {
    measured.insert(m.src);
    measured.insert(m.dst);
  }
  for (const MeasuredCollective& m : cluster.measured_collectives) {
    measured.insert(m.devices.begin(), m.devices.end());
  }
  return measured;
}

// The device groups of t devices of `info`'s type a plan may form, one of each way of building
// their node: every run of t consecutive devices of the type in a node (aligned runs only for
// t beyond 8, which the planner does not form).
std::vector<DeviceGroup> candidate_groups(const Context& ctx, const TypeInfo& info, size_t t,
                                          const std::set<int>& measured) {
  std::set<std::string> seen;
  std::vector<DeviceGroup> out;
  for (size_t i = 0; i < info.node_devices.size(); ++i) {
    const std::vector<int>& nd = info.node_devices[i];
    if (nd.size() < t) continue;
    if (!seen.insert(node_build(ctx.cluster(), info.nodes[i], measured, nd)).second) continue;
    const size_t step = t <= 8 ? 1 : t;
    for (size_t first = 0; first + t <= nd.size(); first += step) {
      out.push_back(DeviceGroup{std::vector<int>(nd.begin() + first, nd.begin() + first + t)});
      if (t == 1) break;  // one device: no collective, every device of the type alike
    }
  }
  return out;
}

// Of `groups`, one per distinct price of the whole model: groups whose collectives run at the
// same rate price every layer alike.
std::vector<DeviceGroup> distinct_prices(const CostModel& cost, int layers,
                                         const std::vector<DeviceGroup>& groups) {
  std::set<std::tuple<double, double, double>> seen;
  std::vector<DeviceGroup> out;
  for (const DeviceGroup& g : groups) {
    const ComputeTimes ct = cost.compute(LayerRange{0, layers}, g, RecomputePolicy::kNone);
    if (seen.insert({ct.forward.value(), ct.backward_input.value(), ct.backward_weight.value()})
            .second) {
      out.push_back(g);
    }
  }
  return out;
}

// One TP degree of a device type: the groups to price and how many disjoint ones the cluster
// holds.
struct Degree {
  size_t t = 1;
  std::vector<DeviceGroup> groups;
  int64_t available = 0;
};

// Every TP degree a node of the type could form, not just the tiling ones.
std::vector<Degree> type_degrees(const Context& ctx, const TypeInfo& info,
                                 const std::set<int>& measured) {
  size_t widest = 0;
  for (const auto& nd : info.node_devices) widest = std::max(widest, nd.size());
  std::vector<Degree> out;
  for (size_t t = 1; t <= widest; t *= 2) {
    Degree d{t, candidate_groups(ctx, info, t, measured), 0};
    for (const auto& nd : info.node_devices) d.available += static_cast<int64_t>(nd.size() / t);
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

Seconds lower_bound(const Context& ctx) {
  const int layers = ctx.num_layers();
  const std::vector<TypeInfo>& types = ctx.types();
  // The groups do not depend on the micro-batch size: built once.
  const std::set<int> measured = measured_devices(ctx.cluster());
  std::vector<std::vector<Degree>> degrees_of;
  for (const TypeInfo& info : types) degrees_of.push_back(type_degrees(ctx, info, measured));
  double best = std::numeric_limits<double>::infinity();
  for (int64_t b : ctx.micro_batch_sizes()) {
    const CostModel& cost = ctx.cost(b);
    const double micro_batches = static_cast<double>(ctx.global_batch()) / b;
    std::vector<std::vector<double>> c(layers, std::vector<double>(types.size()));
    std::vector<int> degrees{1};
    degrees.insert(degrees.end(), ctx.context_degrees().begin(), ctx.context_degrees().end());
    // Per context-parallel degree and layer, each group's F + B(input) and how many disjoint
    // groups like it the cluster holds (counted generously: a valid bound may overcount).
    std::vector<std::vector<std::vector<std::pair<double, int64_t>>>> options(
        degrees.size(), std::vector<std::vector<std::pair<double, int64_t>>>(layers));
    std::vector<double> n;
    for (size_t k = 0; k < types.size(); ++k) {
      const TypeInfo& info = types[k];
      n.push_back(info.count);
      std::vector<double> work(layers, std::numeric_limits<double>::infinity());
      for (const Degree& degree : degrees_of[k]) {
        const size_t t = degree.t;
        const std::vector<DeviceGroup>& groups = degree.groups;
        const int64_t available = degree.available;
        // With and without sequence parallelism, where the planner may pick it, and at every
        // context-parallel degree (c members, each 1/c of the sequence).
        for (const bool sp : {false, true}) {
          if (sp && (t == 1 || !ctx.searches_sequence_parallel())) continue;
          for (size_t ci = 0; ci < degrees.size(); ++ci) {
            const int cp = degrees[ci];
            const CostModel& priced = ctx.cost(b, sp, cp);
            for (const DeviceGroup& group : distinct_prices(priced, layers, groups)) {
              for (int l = 0; l < layers; ++l) {
                const ComputeTimes ct =
                    priced.compute(LayerRange{l, l + 1}, group, RecomputePolicy::kNone);
                // The cheaper of a split and a fused backward: the planner may pick either.
                const Seconds backward = std::min(ct.backward(), ct.fused_backward());
                work[l] = std::min(work[l],
                                   static_cast<double>(t) * cp * (ct.forward + backward).value());
                const Seconds input =
                    l == 0 ? Seconds(0) : std::min(ct.backward_input, ct.fused_backward());
                options[ci][l].emplace_back((ct.forward + input).value(), available);
              }
            }
          }
        }
      }
      for (int l = 0; l < layers; ++l) {
        const DeviceGroup one{{info.node_devices[0][0]}};
        const double step =
            !ctx.options().optimizer_step
                ? 0.0
                : optimizer_step_or_state_pass(cost, LayerRange{l, l + 1}, one, MemoryOptions{},
                                               info.type->memory_bandwidth)
                      .value();
        c[l][k] = micro_batches * work[l] + step;
      }
    }
    // The chain at each context-parallel degree c (one degree for the whole plan): a layer of
    // the micro-batch ends when the slowest of its c members does, so it takes at least the
    // c-th fastest of the groups the cluster holds.
    double chain = std::numeric_limits<double>::infinity();
    const bool split_head = head_vocab(ctx.model()) > 0;
    const bool split_embedding = embedding_vocab(ctx.model()) > 0;
    for (size_t ci = 0; ci < degrees.size(); ++ci) {
      double sum = 0;
      for (int l = 0; l < layers && sum < chain; ++l) {
        const LayerKind kind = ctx.model().layers[l].kind;
        if (kind == LayerKind::kEmbedding || kind == LayerKind::kHead ||
            (l == layers - 1 && split_head) || (l == 0 && split_embedding)) {
          continue;
        }
        std::vector<std::pair<double, int64_t>>& o = options[ci][l];
        std::sort(o.begin(), o.end());
        int64_t members = 0;
        double slowest = std::numeric_limits<double>::infinity();
        for (const auto& [time, count] : o) {
          members += count;
          if (members >= degrees[ci]) {
            slowest = time;
            break;
          }
        }
        sum += slowest;
      }
      chain = std::min(chain, sum);
    }
    best = std::min(best, std::max(best_dual(c, n), chain));
  }
  return Seconds(best);
}

}  // namespace motley::tune_internal
