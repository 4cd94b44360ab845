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
// (at most a node, tensor-parallel), so the iteration takes at least the sum over the layers of
// the fastest F + B(input) any group of any type achieves — the critical path of a single
// micro-batch. It binds when the batch is small for the cluster. The embedding and the head are
// left out of it (vocabulary parallelism spreads them over several groups at once), and so is
// the first layer's backward (no gradient flows into the tokens). The bound per micro-batch
// size is the larger of the two; the iteration's, the least over the sizes the planner may use.
#include <algorithm>
#include <cmath>
#include <limits>
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

}  // namespace

Seconds lower_bound(const Context& ctx) {
  const int layers = ctx.num_layers();
  const std::vector<TypeInfo>& types = ctx.types();
  double best = std::numeric_limits<double>::infinity();
  for (int64_t b : ctx.micro_batch_sizes()) {
    const CostModel& cost = ctx.cost(b);
    const double micro_batches = static_cast<double>(ctx.global_batch()) / b;
    std::vector<std::vector<double>> c(layers, std::vector<double>(types.size()));
    std::vector<double> latency(layers, std::numeric_limits<double>::infinity());
    std::vector<double> n;
    for (size_t k = 0; k < types.size(); ++k) {
      const TypeInfo& info = types[k];
      n.push_back(info.count);
      size_t widest = 0;
      for (const auto& nd : info.node_devices) widest = std::max(widest, nd.size());
      for (int l = 0; l < layers; ++l) {
        double work = std::numeric_limits<double>::infinity();
        // Every TP degree a node of this type could form, not just the tiling ones.
        for (size_t t = 1; t <= widest; t *= 2) {
          for (const auto& nd : info.node_devices) {
            if (nd.size() < t) continue;
            const DeviceGroup group{std::vector<int>(nd.begin(), nd.begin() + t)};
            // With and without sequence parallelism, where the planner may pick it.
            for (const bool sp : {false, true}) {
              if (sp && (t == 1 || !ctx.searches_sequence_parallel())) continue;
              const ComputeTimes ct =
                  ctx.cost(b, sp).compute(LayerRange{l, l + 1}, group, RecomputePolicy::kNone);
              // The cheaper of a split and a fused backward: the planner may pick either.
              const Seconds backward = std::min(ct.backward(), ct.fused_backward());
              work = std::min(work, static_cast<double>(t) * (ct.forward + backward).value());
              const Seconds input = l == 0 ? Seconds(0) : ct.backward_input;
              latency[l] = std::min(latency[l], (ct.forward + input).value());
            }
            break;
          }
        }
        const DeviceGroup one{{info.node_devices[0][0]}};
        const double step =
            !ctx.options().optimizer_step
                ? 0.0
                : optimizer_step_or_state_pass(cost, LayerRange{l, l + 1}, one, MemoryOptions{},
                                               info.type->memory_bandwidth)
                      .value();
        c[l][k] = micro_batches * work + step;
      }
    }
    double chain = 0;
    const bool split_head = head_vocab(ctx.model()) > 0;
    const bool split_embedding = embedding_vocab(ctx.model()) > 0;
    for (int l = 0; l < layers; ++l) {
      const LayerKind kind = ctx.model().layers[l].kind;
      if (kind == LayerKind::kEmbedding || kind == LayerKind::kHead ||
          (l == layers - 1 && split_head) || (l == 0 && split_embedding)) {
        continue;
      }
      chain += latency[l];
    }
    best = std::min(best, std::max(best_dual(c, n), chain));
  }
  return Seconds(best);
}

}  // namespace motley::tune_internal
