// AnalyticCostModel: CostModel pricing each layer as the sum of its kernels (model/layer_cost.h's
// layer_kernels: GEMMs by shape, the attention core by implementation, memory-bound work at
// achieved bandwidth, a launch overhead per kernel) with the efficiencies of a named software
// stack (software_stack.h), plus the tensor-parallel collectives on the critical path; measured
// layers from their profile, TP priced when the profile lacks it; alpha-beta collectives on the
// topology's paths. Formulas and sources: docs/timing-model.md. Immutable (but for a guarded
// cache of ring shapes); thread-safe.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/status.h"
#include "motley/cost/collectives.h"
#include "motley/cost/cost_model.h"
#include "motley/cost/software_stack.h"
#include "motley/model/layer_cost.h"

namespace motley {

struct AnalyticCostOptions {
  Workload workload;  // micro-batch size, sequence length, dtype
  // Gradients accumulated in fp32 rather than the training dtype: mixed-precision Adam keeps
  // 16 bytes/param, 18 with fp32 gradient accumulation (Megatron's default).
  bool fp32_grad_accumulation = true;
  // The software the cluster trains with: its efficiencies price every kernel.
  SoftwareStack stack = SoftwareStack{};
  // Megatron-LM's sequence parallelism: the residual-stream work (norms, dropout, residual adds)
  // split across a TP group, its all-reduces done as reduce-scatter + all-gather.
  bool sequence_parallel = false;
};

// Fraction of the dense peak a GEMM of m x k times k x n reaches under `stack` on `device`:
// matmul_efficiency * stack.gemm_efficiency * prod over x in {m, n, k} of x / (x + half_dim).
double gemm_efficiency(const SoftwareStack& stack, const DeviceType& device, double m, double n,
                       double k);

// The time of one kernel of a layer on one device of a TP group of `tp` (its share of the work),
// launch overhead included, TP collectives excluded. `dropout`: the attention probabilities go
// through dropout (eager attention prices its passes).
// A GEMM kernel of an FP8 linear layer (SoftwareStack::fp8_linear): the product at the device's
// FP8 peak times the GEMM rule's efficiency times stack.fp8_gemm_efficiency, reading one-byte
// inputs and writing `dtype`, plus a memory-bound pass casting its m x k operand from `dtype`
// to FP8; a launch each. REQUIRES: a kGemm kernel, a device with FP8 units.
Seconds fp8_gemm_time(const Kernel& kernel, const DeviceType& device, DType dtype, int tp,
                      const SoftwareStack& stack);

Seconds kernel_time(const Kernel& kernel, const DeviceType& device, DType dtype, int tp,
                    bool sequence_parallel, bool dropout, const SoftwareStack& stack);

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
  // A cluster's topology and what pricing on it learns of its paths: every small node's rings,
  // the link parameters of the device sets collectives run over. None of it depends on the
  // workload or the software stack, so the cost models of one cluster for different workloads
  // and stacks may share one (thread-safe); a search prices the same data-parallel rings under
  // every micro-batch size.
  class Paths;
  // REQUIRES: `cluster` is valid (load_cluster, the presets).
  static std::shared_ptr<Paths> paths_of(const ClusterSpec& cluster);
  // create() on the paths of `cluster` made by paths_of, shared with other cost models.
  // REQUIRES: `paths` was made from `cluster`.
  static Result<std::unique_ptr<AnalyticCostModel>> create(const ModelSpec& model,
                                                           const ClusterSpec& cluster,
                                                           const AnalyticCostOptions& options,
                                                           const std::string& source,
                                                           std::shared_ptr<Paths> paths);

  // Reports what construction would otherwise have to guess: a measured layer whose device
  // type names (measured_on, times_by_device keys) the catalog does not know, a measured layer
  // without its three times, a non-positive workload. `source` names the model in the message.
  static Status validate(const ModelSpec& model, const AnalyticCostOptions& options,
                         const std::string& source);

  // REQUIRES: layers within the model; group non-empty, one device type, in one node.
  ComputeTimes compute(LayerRange layers, const DeviceGroup& group,
                       RecomputePolicy recompute) const override;
  PipelineMessage pipeline_message(const DeviceGroup& src, const DeviceGroup& dst,
                                   Bytes bytes) const override;
  StageMemory stage_memory(LayerRange layers, const DeviceGroup& group,
                           const MemoryOptions& options) const override;
  // Measured layers' optimizer_step, on another device type scaled by the ratio of memory
  // bandwidths, divided over the TP group and, under ZeRO, over the replicas; every other
  // layer's update priced from its memory traffic at the stack's memory_efficiency
  // (docs/timing-model.md, "The optimizer step"). Never nullopt.
  std::optional<Seconds> optimizer_step_time(LayerRange layers, const DeviceGroup& group,
                                             const MemoryOptions& options) const override;
  Bytes boundary_bytes(int layer) const override;
  Bytes expert_dispatch_bytes(int layer) const override;
  // Under the stack's node_deduplicated_dispatch and an expert group over several nodes: the
  // dispatcher's cross-node sends (one per token and other node holding any of its experts)
  // beside its NVLink sends and forwards (timing-model.md); else the all-to-all.
  Seconds expert_exchange_time(int layer, const std::vector<int>& devices, Bytes bytes,
                               CollectiveAlgorithm algorithm) const override;
  ContextExchange context_exchange(int layer, const DeviceGroup& group) const override;
  Seconds p2p_time(int src, int dst, Bytes bytes) const override;
  Seconds collective_time(Collective collective, const std::vector<int>& devices, Bytes bytes,
                          CollectiveAlgorithm algorithm) const override;
  // 1 unless the stack overlaps the gradient reduction; then the stage's parameters per device
  // over the stack's bucket size (SoftwareStack::gradient_bucket_parameters), rounded up.
  int gradient_buckets(LayerRange layers, const DeviceGroup& group,
                       int64_t data_parallel) const override;
  // The same buckets when the stack overlaps the parameter all-gather, else 1.
  int parameter_gather_buckets(LayerRange layers, const DeviceGroup& group,
                               int64_t data_parallel) const override;
  // The last layer whose head is tied, and the first embedding layer of its vocab and width
  // (found once, at construction).
  std::optional<TiedLayers> tied_layers() const override { return tied_; }

  // The latency and bandwidth of one ring over `devices` (taken in increasing id order): the
  // largest latency and the smallest bandwidth among the consecutive paths, where a link
  // crossed by several of the ring's transfers at once gives each an equal share.
  AlphaBeta ring_parameters(std::span<const int> devices) const;
  // The same ring as the collective library runs it inside one xGMI node of at most
  // kMaxSubsetDevices devices: on several channels, each its own order of the devices. Every
  // pair of such a node has a link of its own, so the channels use disjoint links, up to the
  // k - 1 of a device; their rate is that of every device exchanging its shards with every
  // peer at once, k - 1 blocks under way per device (docs/timing-model.md). Behind one port per
  // device (NVSwitch) that would be the ring's own rate, over shared PCIe uplinks less:
  // elsewhere, and across nodes, ring_parameters.
  AlphaBeta channel_parameters(std::span<const int> devices) const;

  const Topology& topology() const override;
  // layer_cost() of every layer for options().workload (kMeasured: bytes from the profile).
  const std::vector<LayerCost>& layer_costs() const { return layer_costs_; }
  const AnalyticCostOptions& options() const { return options_; }

 private:
  // REQUIRES: validate(model, options, ...) is ok (create() checks it).
  AnalyticCostModel(const ModelSpec& model, const ClusterSpec& cluster,
                    std::shared_ptr<Paths> paths, const AnalyticCostOptions& options);

  // One pass of every kind for one layer on one device of a tensor-parallel group, without the
  // TP collectives, and those collectives: how many per forward (and per input-gradient) pass,
  // and their bytes summed.
  struct LayerTimes {
    double forward = 0;
    double backward_input = 0;
    double backward_weight = 0;
    double selective_recompute = 0;
    double fused_saving = 0;  // B + W - a measured fused backward
    double collectives = 0;
    double collective_bytes = 0;
  };
  // A measured layer's times resolved against the catalog at construction.
  struct MeasuredRates {
    std::string measured_on;      // canonical name; empty when unknown
    double reference_rate = 0;    // peak(dtype) * matmul_efficiency of measured_on
    double memory_bandwidth = 0;  // of measured_on, bytes/s; 0 when unknown
    double token_scale = 1;       // workload tokens / measured tokens
    std::vector<std::pair<std::string, MeasuredTimes>> overrides;  // canonical names
    std::vector<std::pair<std::string, std::map<int, MeasuredTimes>>> tp_overrides;
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
  // Whether the profile gives the layer's optimizer step.
  bool has_measured_step(size_t layer) const;
  // Mixed-precision AdamW over `layers` on one device of `group` as memory traffic: the loss
  // scale's unscale (fp16), the gradient norm, the update, the copy into the working weights
  // and the gradient buffer's zeroing, at the stack's memory-bound rate.
  Seconds update_traffic_time(LayerRange layers, const DeviceGroup& group,
                              const MemoryOptions& options, const DeviceType& device) const;
  // The stage's parameters per device over the stack's bucket size, rounded up.
  int stack_buckets(LayerRange layers, const DeviceGroup& group, int64_t data_parallel) const;
  Seconds flat_time(Collective collective, const std::vector<int>& sorted_devices,
                    Bytes bytes) const;
  Seconds hierarchical_time(Collective collective, const std::vector<int>& sorted_devices,
                            Bytes bytes) const;
  // Alpha-beta of a set of transfers that run at the same time.
  AlphaBeta concurrent_parameters(std::span<const std::pair<int, int>> transfers) const;
  // The ring's bandwidth at the stack's collective efficiency (nccl-tests' busbw over link rate).
  AlphaBeta achieved(AlphaBeta ring) const;
  // ring_parameters from the paths' table when the group lies in one small node.
  AlphaBeta group_ring(const std::vector<int>& devices) const;
  // What a set of devices' ring collectives cost apart from their bytes: the flat ring's
  // alpha-beta and the hierarchical algorithm's (every node's own ring, deduplicated, and the
  // inter-node rings, as the links give them: achieved() applies the stack's collective
  // efficiency). The search prices the same data-parallel rings for many candidates, and a
  // ring of R devices resolves R paths, so shapes are kept in the Paths per sorted device set
  // (ring_shape; at most kMaxShapeDevices device ids in all, then forgotten at once).
  struct RingShape {
    AlphaBeta flat;
    int nodes = 1;
    size_t local_min = 0;                          // fewest devices in one node
    std::vector<std::pair<int, AlphaBeta>> intra;  // (devices in a node, its ring)
    AlphaBeta inter;                               // the nodes' rings, all at once
  };
  std::shared_ptr<const RingShape> ring_shape(const std::vector<int>& sorted_devices) const;
  // Every ordered pair of the devices sending at once (an all-to-all's blocks): the largest
  // latency and the smallest share of a link any block gets, at the collective efficiency.
  // Kept with the ring shapes (as the links give them), under the same limit.
  AlphaBeta all_to_all_parameters(const std::vector<int>& sorted_devices) const;
  // The same as the links give it, before the collective efficiency (kept in the Paths).
  AlphaBeta link_all_to_all(const std::vector<int>& sorted_devices) const;
  // What a node-deduplicating dispatcher over a set of devices costs apart from its bytes and
  // routing: the members per node, the sends across nodes (each device to its position in
  // every other node, all at once) and the slowest node's all-to-all shares, as the links give
  // them. Kept with the ring shapes, under the same limit.
  struct DispatchShape {
    std::vector<size_t> members;  // per node
    AlphaBeta across;
    double intra_seconds_per_byte = 0;  // per block inside the slowest node
    Seconds intra_latency;              // (members - 1) latencies, the slowest node's
  };
  std::shared_ptr<const DispatchShape> dispatch_shape(const std::vector<int>& sorted_devices) const;
  static constexpr size_t kMaxShapeDevices = size_t{1} << 22;
  struct RingShapes {
    std::mutex mu;
    std::map<std::vector<int>, std::shared_ptr<const RingShape>> shapes;
    std::map<std::vector<int>, AlphaBeta> all_to_all;  // all_to_all_parameters
    std::map<std::vector<int>, std::shared_ptr<const DispatchShape>> dispatch;
    void forget() {
      shapes.clear();
      all_to_all.clear();
      dispatch.clear();
      device_ids = 0;
    }
    size_t device_ids = 0;
  };
  // The cluster's measured sweep of `collective` over exactly `sorted_devices` (sorted, no
  // repeats); null when none was measured (ClusterSpec::measured_collectives).
  const std::vector<CollectiveSample>* measured_sweep(Collective collective,
                                                      const std::vector<int>& sorted_devices) const;

  const ModelSpec& model_;
  AnalyticCostOptions options_;
  std::shared_ptr<Paths> paths_;
  const Topology* topology_;  // the paths'
  std::vector<LayerCost> layer_costs_;
  std::vector<std::vector<Kernel>> kernels_;
  std::vector<MeasuredRates> measured_;  // per layer; used only for kMeasured layers
  // The first layer is measured with WeightPass::kFullBackward: a stage starting there prices
  // its B as nothing and its W as the whole backward (docs/cost-model.md, "Measured layers").
  bool first_weight_pass_walks_all_ = false;
  // Prefix sums over layers of device-independent figures.
  std::vector<double> stored_params_prefix_;
  std::vector<double> expert_params_prefix_;  // routed experts' parameters, prefix sums
  std::vector<int> measured_steps_prefix_;    // layers whose profile gives the optimizer step
  std::vector<std::array<double, 3>> activation_prefix_;
  // Bytes FP8 linear layers save on the activations above (without full recompute).
  std::vector<double> fp8_saving_prefix_;
  // What a fused cross-entropy spares of the head's kept fp32 softmax (it keeps the logits'
  // gradient in the model's dtype), prefix sums.
  std::vector<double> loss_saving_prefix_;
  // The two largest layers by stored parameters in [i, i + 2^k), at [k][i] (a sparse table):
  // ZeRO-3 holds the whole weights of the layer in use and of the one gathered ahead, and the
  // partition search asks for them over many ranges.
  struct LargestTwo {
    double first = 0, second = 0;
    int first_layer = -1, second_layer = -1;
  };
  std::vector<std::vector<LargestTwo>> largest_params_;
  // The two largest distinct layers of the ranges `a` and `b` cover (they may overlap).
  static LargestTwo larger_two(const LargestTwo& a, const LargestTwo& b);
  // The sum of the two largest layers' stored parameters in [begin, end) (one layer: its own).
  double largest_two_params(int begin, int end) const;
  std::vector<DeviceTables> tables_;
  std::vector<int> table_of_device_;  // device id -> index into tables_
  // Nodes of at most this many devices have every subset's ring kept in the Paths.
  static constexpr int kMaxSubsetDevices = 8;
  // Measured collectives, each op over a sorted device set; usually none (searched in order).
  struct MeasuredSweep {
    Collective op = Collective::kAllReduce;
    std::vector<int> devices;  // sorted
    std::vector<CollectiveSample> samples;
  };
  std::vector<MeasuredSweep> measured_collectives_;
  std::optional<TiedLayers> tied_;
};

}  // namespace motley
