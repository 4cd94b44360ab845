#include "motley/tune/preemption.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "motley/core/check.h"

namespace motley {

Seconds young_checkpoint_interval(Seconds checkpoint, Seconds mtbf) {
  return Seconds(std::sqrt(2.0 * checkpoint.value() * mtbf.value()));
}

Seconds daly_checkpoint_interval(Seconds checkpoint, Seconds mtbf) {
  const double delta = checkpoint.value(), m = mtbf.value();
  if (delta >= 2.0 * m) return mtbf;
  const double x = delta / (2.0 * m);
  return Seconds(std::sqrt(2.0 * delta * m) * (1.0 + std::sqrt(x) / 3.0 + x / 9.0) - delta);
}

double checkpoint_goodput(Seconds interval, Seconds checkpoint, Seconds restart, Seconds mtbf) {
  const double m = mtbf.value();
  if (!std::isfinite(m)) return 1.0;
  const double tau = interval.value();
  if (tau <= 0) return 0.0;
  // expm1 keeps the short-interval, rare-interruption case exact; the wall time per unit of
  // work overflows to infinity (goodput 0) when interruptions come far faster than work.
  const double wall =
      m * std::exp(restart.value() / m) * std::expm1((tau + checkpoint.value()) / m);
  return tau / wall;
}

std::vector<Bytes> layer_state_bytes(const CostModel& cost, int num_layers, int device) {
  std::vector<Bytes> out;
  out.reserve(static_cast<size_t>(num_layers));
  for (int l = 0; l < num_layers; ++l) {
    const StageMemory m =
        cost.stage_memory(LayerRange{l, l + 1}, DeviceGroup{{device}}, MemoryOptions{});
    out.push_back(m.weights + m.optimizer_state);
  }
  return out;
}

std::vector<Bytes> checkpoint_shares(const std::vector<StateHolder>& holders,
                                     const std::vector<Bytes>& layer_bytes, int num_devices) {
  // Devices holding each layer, counted over every holder.
  std::vector<int64_t> holding(layer_bytes.size(), 0);
  for (const StateHolder& h : holders) {
    for (int l = h.layers.begin; l < h.layers.end; ++l) {
      holding[l] += static_cast<int64_t>(h.devices.size());
    }
  }
  std::vector<Bytes> out(static_cast<size_t>(num_devices));
  for (const StateHolder& h : holders) {
    double bytes = 0;
    for (int l = h.layers.begin; l < h.layers.end; ++l) {
      bytes += layer_bytes[l].value() / static_cast<double>(holding[l]);
    }
    for (int d : h.devices) out[d] += Bytes(bytes);
  }
  return out;
}

PreemptionEstimate estimate_preemption(const ClusterSpec& cluster, const std::vector<Bytes>& shares,
                                       Seconds iteration_time, bool on_demand) {
  MOTLEY_CHECK(iteration_time > Seconds(0), "estimate_preemption needs a positive iteration time");
  const std::vector<Device> devices = cluster_devices(cluster);
  MOTLEY_CHECK(shares.size() == devices.size(), "one checkpoint share per device");
  std::vector<double> node_bytes(cluster.nodes.size(), 0.0);
  std::vector<bool> used(cluster.nodes.size(), false);
  PreemptionEstimate out;
  for (const Device& d : devices) {
    node_bytes[d.node] += shares[d.id].value();
    out.checkpoint_bytes += shares[d.id];
    if (shares[d.id] > Bytes(0)) used[d.node] = true;
  }
  const BytesPerSecond rate =
      cluster.checkpoint.write_bandwidth.value_or(kDefaultCheckpointWriteBandwidth);
  double rate_per_hour = 0;  // interruptions of the whole job
  double slowest = 0;
  for (size_t n = 0; n < cluster.nodes.size(); ++n) {
    if (!used[n]) continue;
    slowest = std::max(slowest, node_bytes[n] / rate.value());
    const NodeSpec& node = cluster.nodes[n];
    // Bought on demand, a spot node is not preempted; an on-demand node keeps what it states.
    const std::optional<double> hours =
        on_demand && node.spot ? std::nullopt : node_hours_between_preemptions(node);
    if (!hours) continue;
    ++out.interruptible_nodes;
    rate_per_hour += 1.0 / *hours;
  }
  if (out.interruptible_nodes == 0) return out;
  out.mean_time_between_interruptions = Seconds(3600.0 / rate_per_hour);
  out.checkpoint_time = Seconds(slowest);
  out.restart_time = cluster.checkpoint.restart.value_or(kDefaultRestartTime) + out.checkpoint_time;
  const Seconds best =
      daly_checkpoint_interval(out.checkpoint_time, out.mean_time_between_interruptions);
  // Checkpoints come between iterations: the whole number of them nearer the optimum of the
  // two around it.
  const double k = best / iteration_time;
  int64_t lo = std::max<int64_t>(1, static_cast<int64_t>(std::floor(std::min(k, 1e15))));
  double goodput_lo =
      checkpoint_goodput(iteration_time * static_cast<double>(lo), out.checkpoint_time,
                         out.restart_time, out.mean_time_between_interruptions);
  const double goodput_hi =
      checkpoint_goodput(iteration_time * static_cast<double>(lo + 1), out.checkpoint_time,
                         out.restart_time, out.mean_time_between_interruptions);
  if (goodput_hi > goodput_lo) {
    ++lo;
    goodput_lo = goodput_hi;
  }
  out.interval_iterations = lo;
  out.interval = iteration_time * static_cast<double>(lo);
  out.goodput = goodput_lo;
  return out;
}

std::vector<StateHolder> plan_state_holders(const Plan& plan) {
  std::vector<StateHolder> out;
  for (const Replica& r : plan.replicas) {
    for (size_t s = 0; s < plan.stages.size(); ++s) {
      const Stage& st = plan.stages[s];
      out.push_back(
          StateHolder{LayerRange{st.layer_begin, st.layer_end, vocab_share(plan.stages, s)},
                      r.groups[r.stage_group[s]].devices});
    }
  }
  return out;
}

PlanPricing price_plan(const Plan& plan, const CostModel& cost, const ClusterSpec& cluster,
                       Seconds iteration_time) {
  const std::vector<Device> devices = cluster_devices(cluster);
  std::vector<int> per_node(cluster.nodes.size(), 0);
  for (const Device& d : devices) ++per_node[d.node];
  double price = 0, on_demand = 0;  // USD per hour of the devices the plan uses
  for (const Replica& r : plan.replicas) {
    for (const DeviceGroupSchedule& g : r.groups) {
      for (int id : g.devices) {
        const NodeSpec& node = cluster.nodes[devices[id].node];
        price += node.price_per_hour / per_node[devices[id].node];
        on_demand += node_on_demand_price_per_hour(node) / per_node[devices[id].node];
      }
    }
  }
  PlanPricing out;
  out.dollars_per_hour = price;
  out.on_demand_dollars_per_hour = on_demand;
  PreemptionEstimate bought;
  if (cluster_interruptible(cluster)) {
    const int layers = plan.stages.empty() ? 0 : plan.stages.back().layer_end;
    const std::vector<Bytes> shares =
        checkpoint_shares(plan_state_holders(plan), layer_state_bytes(cost, layers, 0),
                          static_cast<int>(devices.size()));
    out.preemption = estimate_preemption(cluster, shares, iteration_time);
    bought = estimate_preemption(cluster, shares, iteration_time, /*on_demand=*/true);
  }
  // In floating point: the product of two counts may not fit int64_t.
  const double tokens = static_cast<double>(plan.global_batch) * static_cast<double>(plan.seq_len);
  const double hours_per_million = iteration_time.value() / 3600.0 / tokens * 1e6;
  out.dollars_per_million_tokens = price * hours_per_million / out.preemption.goodput;
  out.on_demand_dollars_per_million_tokens = on_demand * hours_per_million / bought.goodput;
  return out;
}

bool cluster_interruptible(const ClusterSpec& cluster) {
  return std::any_of(cluster.nodes.begin(), cluster.nodes.end(), [](const NodeSpec& n) {
    return node_hours_between_preemptions(n).has_value();
  });
}

}  // namespace motley
