#include "motley/cost/cost_model.h"

#include <algorithm>

#include "motley/core/enum_names.h"

namespace motley {

LayerRange whole(LayerRange shard) {
  MOTLEY_CHECK(shard.size() == 1 && shard.vocab_share > 0 && shard.vocab_share <= 1,
               "a vocabulary shard is one layer with a share of its rows in (0, 1]");
  return LayerRange{shard.begin, shard.end, 1.0};
}

ComputeTimes stage_compute(const CostModel& cost, LayerRange layers, const DeviceGroup& group,
                           RecomputePolicy policy, const std::vector<int>& full_layers) {
  ComputeTimes out = cost.compute(layers, group, policy);
  for (int l : full_layers) {
    const LayerRange one{l, l + 1};
    out.recompute += cost.compute(one, group, RecomputePolicy::kFull).recompute -
                     cost.compute(one, group, policy).recompute;
  }
  return out;
}

StageMemory stage_memory_with(const CostModel& cost, LayerRange layers, const DeviceGroup& group,
                              const MemoryOptions& options, const std::vector<int>& full_layers) {
  StageMemory out = cost.stage_memory(layers, group, options);
  MemoryOptions full = options;
  full.recompute = RecomputePolicy::kFull;
  out.recomputed_activations_per_micro_batch =
      options.recompute == RecomputePolicy::kFull
          ? out.activations_per_micro_batch
          : cost.stage_memory(layers, group, full).activations_per_micro_batch;
  if (full_layers.empty()) return out;
  for (int l : full_layers) {
    const LayerRange one{l, l + 1};
    out.activations_per_micro_batch +=
        cost.stage_memory(one, group, full).activations_per_micro_batch -
        cost.stage_memory(one, group, options).activations_per_micro_batch;
  }
  out.activations =
      out.activations_per_micro_batch * static_cast<double>(options.in_flight_micro_batches);
  return out;
}

ComputeTimes scaled(const ComputeTimes& whole, LayerRange shard) {
  const double f = shard.vocab_share;
  ComputeTimes out;
  out.forward = whole.forward * f;
  out.backward_input = whole.backward_input * f;
  out.backward_weight = whole.backward_weight * f;
  out.recompute = whole.recompute * f;
  out.fused_backward_saving = whole.fused_backward_saving * f;
  return out;
}

StageMemory scaled(const StageMemory& whole, LayerRange shard) {
  const double f = shard.vocab_share;
  StageMemory out = whole;
  out.weights = whole.weights * f;
  out.gradients = whole.gradients * f;
  out.optimizer_state = whole.optimizer_state * f;
  out.activations_per_micro_batch = whole.activations_per_micro_batch * f;
  out.recomputed_activations_per_micro_batch = whole.recomputed_activations_per_micro_batch * f;
  out.activations = whole.activations * f;
  return out;
}

Seconds state_pass_time(const StageMemory& memory, BytesPerSecond bandwidth) {
  return (memory.gradients + memory.optimizer_state * 2.0 + memory.weights) / bandwidth;
}

Seconds optimizer_step_or_state_pass(const CostModel& cost, LayerRange layers,
                                     const DeviceGroup& group, const MemoryOptions& options,
                                     BytesPerSecond bandwidth) {
  if (const std::optional<Seconds> step = cost.optimizer_step_time(layers, group, options)) {
    return *step;
  }
  return state_pass_time(cost.stage_memory(layers, group, options), bandwidth);
}

// Indexed by Collective, in declaration order.
constexpr const char* kCollectiveNames[] = {"all-reduce", "reduce-scatter", "all-gather",
                                            "all-to-all"};
static_assert(std::size(kCollectiveNames) == static_cast<size_t>(Collective::kAllToAll) + 1);

const char* collective_name(Collective collective) { return name_in(kCollectiveNames, collective); }

Seconds ring_exchange_exposure(int members, Seconds slowest_step, Seconds own_attention) {
  if (members <= 1) return Seconds(0);
  const double c = static_cast<double>(members);
  return Seconds((c - 1) * std::max(0.0, slowest_step.value() - own_attention.value() / c));
}

Seconds exposed_gradient_reduction(Seconds reduction, int buckets, Seconds last_pass) {
  if (buckets <= 1) return reduction;
  const double n = buckets;
  const double r = reduction.value();
  return Seconds(std::max(r / n, r - last_pass.value() * (n - 1) / n));
}

Seconds tied_gradient_sum(const CostModel& cost, const std::vector<int>& first,
                          const std::vector<int>& second, CollectiveAlgorithm algorithm) {
  const std::optional<CostModel::TiedLayers> tied = cost.tied_layers();
  if (!tied || first == second) return Seconds(0);
  const Bytes bytes = cost.stage_memory(LayerRange{tied->second, tied->second + 1},
                                        DeviceGroup{second}, MemoryOptions{})
                          .gradients;
  Seconds longest(0);
  if (first.size() == second.size()) {
    for (size_t k = 0; k < first.size(); ++k) {
      longest = std::max(longest, cost.collective_time(Collective::kAllReduce,
                                                       {first[k], second[k]}, bytes, algorithm));
    }
    return longest;
  }
  std::vector<int> ring = first;
  ring.insert(ring.end(), second.begin(), second.end());
  return cost.collective_time(Collective::kAllReduce, ring, bytes, algorithm);
}

DataParallelSync data_parallel_sync(const CostModel& cost, const std::vector<int>& ring,
                                    const StageMemory& unsharded, int zero_stage,
                                    CollectiveAlgorithm algorithm) {
  DataParallelSync sync;
  const bool sharded = zero_stage >= 1;
  sync.reduction =
      cost.collective_time(sharded ? Collective::kReduceScatter : Collective::kAllReduce, ring,
                           unsharded.gradients, algorithm);
  if (sharded && zero_stage < 3) {
    sync.gather = cost.collective_time(Collective::kAllGather, ring, unsharded.weights, algorithm);
  }
  return sync;
}

ShardedPassOverhead sharded_pass_overhead(int zero_stage, const DataParallelSync& stage1,
                                          Seconds forward, Seconds backward,
                                          Seconds gradient_pass) {
  ShardedPassOverhead out;
  if (zero_stage < 2) return out;
  auto beyond = [](Seconds collective, Seconds pass) {
    return std::max(Seconds(0), collective - pass);
  };
  out.gradient = beyond(stage1.reduction, gradient_pass);
  if (zero_stage >= 3) {
    out.forward = beyond(stage1.gather, forward);
    out.backward = beyond(stage1.gather, backward);
  }
  return out;
}

Seconds exposed_data_parallel_sync(const CostModel& cost, const DataParallelSync& sync,
                                   LayerRange layers, const DeviceGroup& group,
                                   int64_t data_parallel, Seconds last_backward,
                                   Seconds first_forward) {
  return exposed_gradient_reduction(
             sync.reduction, cost.gradient_buckets(layers, group, data_parallel), last_backward) +
         exposed_gradient_reduction(sync.gather,
                                    cost.parameter_gather_buckets(layers, group, data_parallel),
                                    first_forward);
}

}  // namespace motley
