#include "motley/cost/cost_model.h"

#include <algorithm>

#include "motley/core/enum_names.h"

namespace motley {

// Indexed by Collective, in declaration order.
constexpr const char* kCollectiveNames[] = {"all-reduce", "reduce-scatter", "all-gather",
                                            "all-to-all"};
static_assert(std::size(kCollectiveNames) == static_cast<size_t>(Collective::kAllToAll) + 1);

const char* collective_name(Collective collective) { return name_in(kCollectiveNames, collective); }

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
                                    const StageMemory& memory, bool zero1,
                                    CollectiveAlgorithm algorithm) {
  DataParallelSync sync;
  sync.reduction = cost.collective_time(zero1 ? Collective::kReduceScatter : Collective::kAllReduce,
                                        ring, memory.gradients, algorithm);
  if (zero1) {
    sync.gather = cost.collective_time(Collective::kAllGather, ring, memory.weights, algorithm);
  }
  return sync;
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
