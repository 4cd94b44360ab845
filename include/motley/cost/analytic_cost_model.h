// AnalyticCostModel: CostModel from the model's analytic FLOPs and bytes (model/layer_cost.h)
// and the cluster's catalog rates: a roofline of FLOPs over peak x efficiency and bytes over
// memory bandwidth, plus a fixed per-layer launch overhead; measured layers scaled from their
// profile; alpha-beta collectives on the topology's paths. Formulas, constants and their
// sources: docs/timing-model.md. Immutable after construction; thread-safe.
#pragma once

#include <array>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/status.h"
#include "motley/cost/collectives.h"
#include "motley/cost/cost_model.h"
#include "motley/model/layer_cost.h"

namespace motley {

struct AnalyticCostOptions {
  Workload workload;  // micro-batch size, sequence length, dtype
  // Gradients accumulated in fp32 rather than the training dtype: mixed-precision Adam keeps
  // 16 bytes/param, 18 with fp32 gradient accumulation (Megatron's default).
  bool fp32_grad_accumulation = true;
};

// Fixed cost of one kernel on the device's timeline beyond its roofline time (launch and the
// gap to the next kernel). An estimate; measured profiles replace it.
inline constexpr Seconds kKernelOverhead = microseconds(3);
// A pass of `flops` reaches half of the device's best matmul efficiency when it would take this
// long at the device's peak tensor rate (see matmul_efficiency). An estimate.
inline constexpr Seconds kHalfEfficiencyTime = microseconds(2);

// Throughput efficiency of a matmul-bound pass of `flops` on `device`: the device's best
// large-matmul efficiency, degraded for small operations. Exposed for tests and docs.
// eff(F) = device.matmul_efficiency * F / (F + F_half), F_half = peak_tensor * kHalfEfficiencyTime
// with peak_tensor = max(peak_bf16, peak_fp16). 0 for F <= 0.
double matmul_efficiency(const DeviceType& device, Flops flops);

// Kernels one pass of the layer launches (estimates per layer kind, docs/timing-model.md);
// 0 for kMeasured layers, whose times include their overheads already.
struct KernelCounts {
  int forward = 0;
  int backward_input = 0;
  int backward_weight = 0;
};
KernelCounts kernel_counts(const Layer& layer);

// Forward FLOPs of the attention core (scores QK^T and the weighted sum over V, the terms
// that grow with s^2) in `layer`: what selective recomputation repeats. 0 for layers without
// attention. Query-key pairs per head and sample: s(s+1)/2 causal, s^2 bidirectional, and with
// a window of w < s keys w(w+1)/2 + (s-w)w causal, s*w bidirectional, as layer_cost() counts.
Flops attention_core_forward_flops(const Layer& layer, const Workload& workload);

// The roofline time of one pass on one device: max(flops / (peak(dtype) * eff(flops)),
// bytes / memory_bandwidth). Infinite when the device has no rate for `dtype`.
Seconds roofline_time(const DeviceType& device, DType dtype, Flops flops, Bytes bytes);

// Bytes per parameter of mixed-precision Adam, split as StageMemory reports them.
struct OptimizerBytesPerParam {
  double weights = 0;          // the working copy in the training dtype
  double gradients = 0;        // bf16/fp16 grads, or fp32 when accumulating in fp32
  double optimizer_state = 0;  // fp32 master copy (when the dtype is narrower) + two fp32 moments
  double total() const { return weights + gradients + optimizer_state; }
};
OptimizerBytesPerParam optimizer_bytes_per_param(DType dtype, bool fp32_grad_accumulation);

class AnalyticCostModel final : public CostModel {
 public:
  // The cost model of `model` on `cluster`, once validate() accepts the inputs; the only way to
  // build one. `source` names the model in the messages (a file name, or the model's name).
  // REQUIRES: `model` and `cluster` outlive the cost model.
  static Result<std::unique_ptr<AnalyticCostModel>> create(const ModelSpec& model,
                                                           const ClusterSpec& cluster,
                                                           const AnalyticCostOptions& options,
                                                           const std::string& source);

  // Reports what construction would otherwise have to guess: a measured layer whose device
  // type names (measured_on, times_by_device keys) the catalog does not know, a measured layer
  // without its three times, a non-positive workload. `source` names the model in the message.
  static Status validate(const ModelSpec& model, const AnalyticCostOptions& options,
                         const std::string& source);

  // REQUIRES: layers within the model; group non-empty, one device type, in one node.
  ComputeTimes compute(LayerRange layers, const DeviceGroup& group,
                       RecomputePolicy recompute) const override;
  StageMemory stage_memory(LayerRange layers, const DeviceGroup& group,
                           const MemoryOptions& options) const override;
  Bytes boundary_bytes(int layer) const override;
  Seconds p2p_time(int src, int dst, Bytes bytes) const override;
  Seconds collective_time(Collective collective, const std::vector<int>& devices, Bytes bytes,
                          CollectiveAlgorithm algorithm) const override;

  // The latency and bandwidth of one ring over `devices` (taken in increasing id order): the
  // largest latency and the smallest bandwidth among the consecutive paths, where a link
  // crossed by several of the ring's transfers at once gives each an equal share.
  AlphaBeta ring_parameters(std::span<const int> devices) const;

  const Topology& topology() const override { return topology_; }
  // layer_cost() of every layer for options().workload (kMeasured: bytes from the profile).
  const std::vector<LayerCost>& layer_costs() const { return layer_costs_; }
  const AnalyticCostOptions& options() const { return options_; }

 private:
  // REQUIRES: validate(model, options, ...) is ok (create() checks it).
  AnalyticCostModel(const ModelSpec& model, const ClusterSpec& cluster,
                    const AnalyticCostOptions& options);

  // One pass of every kind for one layer on one device of a tensor-parallel group, without the
  // TP collectives.
  struct LayerTimes {
    double forward = 0;
    double backward_input = 0;
    double backward_weight = 0;
    double selective_recompute = 0;
  };
  // A measured layer's times resolved against the catalog at construction.
  struct MeasuredRates {
    std::string measured_on;    // canonical name; empty when unknown
    double reference_rate = 0;  // peak(dtype) * matmul_efficiency of measured_on
    double token_scale = 1;     // workload tokens / measured tokens
    std::vector<std::pair<std::string, MeasuredTimes>> overrides;  // canonical names
  };
  // Prefix sums of LayerTimes over the layers, for one device type and one TP degree.
  struct PrefixTable {
    std::vector<LayerTimes> prefix;  // size layers + 1
  };
  struct DeviceTables {
    const DeviceType* type = nullptr;
    std::vector<PrefixTable> by_tp;  // index t - 1
  };

  LayerTimes layer_times(int layer, const DeviceType& device, int tp) const;
  Seconds flat_time(Collective collective, const std::vector<int>& sorted_devices,
                    Bytes bytes) const;
  Seconds hierarchical_time(Collective collective, const std::vector<int>& sorted_devices,
                            Bytes bytes) const;
  // Alpha-beta of a set of transfers that run at the same time.
  AlphaBeta concurrent_parameters(std::span<const std::pair<int, int>> transfers) const;
  // ring_parameters from node_rings_ when the group lies in one small node.
  AlphaBeta group_ring(const std::vector<int>& devices) const;

  const ModelSpec& model_;
  AnalyticCostOptions options_;
  Topology topology_;
  std::vector<LayerCost> layer_costs_;
  std::vector<KernelCounts> kernels_;
  std::vector<double> attention_core_flops_;
  std::vector<MeasuredRates> measured_;  // per layer; used only for kMeasured layers
  // Prefix sums over layers of device-independent figures.
  std::vector<double> tp_allreduce_count_prefix_;
  std::vector<double> tp_allreduce_bytes_prefix_;  // tp_allreduces * output_bytes
  std::vector<double> stored_params_prefix_;
  std::vector<std::array<double, 3>> activation_prefix_;
  std::vector<DeviceTables> tables_;
  std::vector<int> table_of_device_;  // device id -> index into tables_
  // Ring parameters of every subset of a node's devices, indexed by the bit mask of their local
  // indices; empty for nodes with more than kMaxSubsetDevices devices.
  static constexpr int kMaxSubsetDevices = 8;
  std::vector<std::vector<AlphaBeta>> node_rings_;
};

}  // namespace motley
