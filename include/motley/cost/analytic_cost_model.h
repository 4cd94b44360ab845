// AnalyticCostModel: CostModel from the model's analytic FLOPs and bytes (model/layer_cost.h)
// and the cluster's catalog rates: a roofline of FLOPs over peak x efficiency and bytes over
// memory bandwidth, plus a fixed per-layer launch overhead; alpha-beta collectives on the
// topology's paths. Constants and their sources: docs/cost-model.md. Immutable after
// construction; thread-safe.
#pragma once

#include <memory>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/cost/cost_model.h"
#include "motley/model/layer_cost.h"

namespace motley {

struct AnalyticCostOptions {
  Workload workload;  // micro-batch size, sequence length, dtype
  // Fraction of the fp32 gradient buffer kept beside bf16 grads: mixed-precision Adam keeps
  // 16 bytes/param (18 with fp32 gradient accumulation, Megatron's default).
  bool fp32_grad_accumulation = true;
};

// Throughput efficiency of a matmul-bound pass of `flops` on `device`: the device's best
// large-matmul efficiency, degraded for small operations. Exposed for tests and docs.
double matmul_efficiency(const DeviceType& device, Flops flops);

class AnalyticCostModel final : public CostModel {
 public:
  // REQUIRES: `model` and `cluster` outlive the cost model.
  AnalyticCostModel(const ModelSpec& model, const ClusterSpec& cluster,
                    const AnalyticCostOptions& options);

  ComputeTimes compute(LayerRange layers, const DeviceGroup& group,
                       RecomputePolicy recompute) const override;
  StageMemory stage_memory(LayerRange layers, const DeviceGroup& group,
                           const MemoryOptions& options) const override;
  Bytes boundary_bytes(int layer) const override;
  Seconds p2p_time(int src, int dst, Bytes bytes) const override;
  Seconds collective_time(Collective collective, const std::vector<int>& devices, Bytes bytes,
                          CollectiveAlgorithm algorithm) const override;

  const Topology& topology() const { return topology_; }
  const std::vector<LayerCost>& layer_costs() const { return layer_costs_; }
  const AnalyticCostOptions& options() const { return options_; }

 private:
  const ModelSpec& model_;
  AnalyticCostOptions options_;
  Topology topology_;
  std::vector<LayerCost> layer_costs_;
};

}  // namespace motley
