// FixedCostModel: a CostModel whose every number is given by the caller — per-layer F/B/W and
// recompute times (optionally per device type), boundary bytes, memory per layer — while
// transfers are priced on the caller's ClusterSpec (its link latencies and bandwidths). For
// tests with closed-form answers and what-if studies; it derives nothing from a model.
// Immutable after construction; thread-safe.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/cost/cost_model.h"

namespace motley {

// Times of one layer for one micro-batch on one device group.
struct FixedLayerTimes {
  Seconds forward;
  Seconds backward_input;   // B
  Seconds backward_weight;  // W
  Seconds recompute;        // charged when the stage's recompute policy is not kNone
  // How much less one fused backward takes than B + W (ComputeTimes::fused_backward_saving).
  Seconds fused_backward_saving = Seconds(0);
};

struct FixedLayer {
  FixedLayerTimes times;  // on device types without an entry in FixedCostSpec::device_times
  Bytes boundary;         // the activation leaving the layer (and its gradient), per micro-batch
  // Whole-layer memory; a tensor-parallel group of t devices holds 1/t of each on every device.
  Bytes weights;
  Bytes gradients;
  Bytes optimizer_state;  // divided again across replicas under ZeRO-1
  // Activations kept per micro-batch, indexed by RecomputePolicy (none, selective, full).
  std::array<Bytes, 3> activations{};
  // An MoE layer's all-to-all bytes per micro-batch (CostModel::expert_dispatch_bytes).
  Bytes expert_dispatch;
  // An attention layer's ring exchange under context parallelism (CostModel::context_exchange),
  // as given on every device and TP degree; zero bytes: none.
  CostModel::ContextExchange context_exchange;
};

struct FixedCostSpec {
  std::vector<FixedLayer> layers;
  // Canonical device type name -> times of every layer (same length as `layers`) on that type.
  std::vector<std::pair<std::string, std::vector<FixedLayerTimes>>> device_times;
  // Every stage's data-parallel gradient reduction is issued in this many buckets under its last
  // backward (CostModel::gradient_buckets).
  int gradient_buckets = 1;
  // And the ZeRO-1 weight all-gather in this many under the first forward.
  int parameter_gather_buckets = 1;
  // Layers whose gradients are summed each iteration (CostModel::tied_layers).
  std::optional<CostModel::TiedLayers> tied;
};

class FixedCostModel final : public CostModel {
 public:
  // Checks what the constructor relies on: a non-empty layer list, device_times entries naming
  // catalog types with one entry per layer, no negative time or size. `source` names the
  // spec in the message.
  static Status validate(const FixedCostSpec& spec, const std::string& source);

  // REQUIRES: validate(spec) is ok; every device type of `cluster` is in the catalog.
  FixedCostModel(const ClusterSpec& cluster, FixedCostSpec spec);

  // Sums of the layers' times as given: the group's tensor-parallel degree does not scale
  // them (give per-device-type entries, or another spec, for that).
  ComputeTimes compute(LayerRange layers, const DeviceGroup& group,
                       RecomputePolicy recompute) const override;
  // Per device: each layer's memory / tp; optimizer state also / data_parallel under ZeRO
  // (MemoryOptions::zero_stage), gradients too from stage 2, weights from stage 3; no
  // communication buffers.
  StageMemory stage_memory(LayerRange layers, const DeviceGroup& group,
                           const MemoryOptions& options) const override;
  Bytes boundary_bytes(int layer) const override;
  Bytes expert_dispatch_bytes(int layer) const override;
  ContextExchange context_exchange(int layer, const DeviceGroup& group) const override;
  // The path's latency + bytes / its bottleneck bandwidth; 0 for src == dst.
  Seconds p2p_time(int src, int dst, Bytes bytes) const override;
  // One ring over `devices` in increasing id order (any algorithm): the largest latency and
  // the smallest bandwidth of the ring's consecutive paths, no sharing between them, in the
  // flat closed forms of collectives.h. 0 for fewer than two devices.
  Seconds collective_time(Collective collective, const std::vector<int>& devices, Bytes bytes,
                          CollectiveAlgorithm algorithm) const override;
  int gradient_buckets(LayerRange layers, const DeviceGroup& group,
                       int64_t data_parallel) const override {
    (void)layers;
    (void)group;
    (void)data_parallel;
    return spec_.gradient_buckets;
  }
  int parameter_gather_buckets(LayerRange layers, const DeviceGroup& group,
                               int64_t data_parallel) const override {
    (void)layers;
    (void)group;
    (void)data_parallel;
    return spec_.parameter_gather_buckets;
  }
  std::optional<TiedLayers> tied_layers() const override { return spec_.tied; }
  const Topology& topology() const override { return topology_; }

  const FixedCostSpec& spec() const { return spec_; }

 private:
  const std::vector<FixedLayerTimes>& times_for(const DeviceGroup& group) const;

  FixedCostSpec spec_;
  Topology topology_;
  std::vector<FixedLayerTimes> default_times_;
  std::vector<int> table_of_device_;  // device id -> index into spec_.device_times, -1: default
};

// A cluster for FixedCostModel: one node per entry of `node_types` (canonical catalog names),
// `devices_per_node` devices each. `intra` is every node's interconnect as given (kNvlink: a
// port per device, so a transfer crosses the sender's tx and the receiver's rx port). Between
// nodes each node has one NIC of `inter`'s bandwidth and the fabric adds `inter`'s latency
// (NIC latencies are 0), so an inter-node path costs exactly inter.latency + bytes /
// inter.bandwidth. PCIe (crossed only between vendors) is given `inter` too.
ClusterSpec make_fixed_cluster(const std::vector<std::string>& node_types, int devices_per_node,
                               LinkSpec intra, LinkSpec inter);

}  // namespace motley
