// CostModel: the times and bytes every planning decision is priced with — compute time of
// F/B/W/recompute for a range of layers on a device group, memory of a stage, point-to-point
// and collective transfer times. AnalyticCostModel (analytic_cost_model.h) derives them from
// formulas; a measured implementation can replace it behind the same interface.
// Implementations are immutable after construction and safe to call from several threads.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/units.h"
#include "motley/model/model.h"

namespace motley {

// Layers [begin, end) of ModelSpec::layers.
struct LayerRange {
  int begin = 0;
  int end = 0;
  // A vocabulary shard of the head (plan.h, Stage): the range is the head's one layer and this
  // its share of the vocabulary rows, (0, 1]. The shard is priced as that share of the whole
  // head: its GEMM, loss and activations scale with the rows (the final norm, which each shard
  // runs whole, is a small part and scales too); its weights and their state scale exactly.
  double vocab_share = 1.0;
  int size() const { return end - begin; }
};

// The devices running one pipeline stage together: one device, or a tensor-parallel group.
// REQUIRES (checked by callers that build groups): all devices in one node, of one type.
struct DeviceGroup {
  std::vector<int> devices;  // global device ids
  int tp() const { return static_cast<int>(devices.size()); }
};

struct ComputeTimes {
  Seconds forward;
  Seconds backward_input;   // B
  Seconds backward_weight;  // W
  Seconds recompute;        // the extra forward work before B under the recompute policy
  // What one fused backward (B and W in one pass, as schedules without split backwards run it)
  // saves over B then W; measured profiles may give it, formulas do not (0).
  Seconds fused_backward_saving = Seconds(0);
  Seconds backward() const { return backward_input + backward_weight; }
  Seconds fused_backward() const { return backward() - fused_backward_saving; }
};

struct MemoryOptions {
  RecomputePolicy recompute = RecomputePolicy::kNone;
  int64_t in_flight_micro_batches = 1;  // activations held at the peak of the schedule
  int64_t data_parallel = 1;            // replicas the optimizer state may be sharded across
  // ZeRO across the data_parallel replicas (Plan::zero_stage): 1 shards the optimizer state,
  // 2 also the gradients (plus two buckets of whole ones), 3 also the weights (plus the whole
  // weights of the two largest layers, the one in use and the one prefetched).
  int zero_stage = 0;
  // Expert parallelism (Plan::expert_parallel): the routed experts split over this many of the
  // data_parallel replicas; ZeRO shards their state over the data_parallel / e holding them.
  int64_t expert_parallel = 1;
};

struct StageMemory {
  Bytes weights;
  Bytes gradients;
  Bytes optimizer_state;
  Bytes activations_per_micro_batch;
  // What a micro-batch keeps when the stage recomputes it alone, in full: each layer's input
  // (an R action on a stage that keeps its activations; plan/dependencies.h). Set by
  // stage_memory_with.
  Bytes recomputed_activations_per_micro_batch;
  Bytes activations;  // activations_per_micro_batch * in_flight_micro_batches
  Bytes communication_buffers;
  Bytes total() const {
    return weights + gradients + optimizer_state + activations + communication_buffers;
  }
};

enum class Collective { kAllReduce, kReduceScatter, kAllGather, kAllToAll };
const char* collective_name(Collective collective);

enum class CollectiveAlgorithm {
  kRing,          // one ring over all participants
  kHierarchical,  // reduce-scatter inside nodes, across nodes, all-gather inside nodes
  kAuto,          // the faster of the two
};

// The part of a gradient reduction taking `reduction` seconds in `buckets` equal buckets that is
// left after the backward pass producing the gradients (`last_pass` seconds) ends. Bucket k of
// n is final k/n of the way through the pass and the buckets are reduced one after another, so
// the last one ends max(reduction / n, reduction - last_pass * (n - 1) / n) after the pass
// (docs/simulator.md, "Task graph"). buckets <= 1: all of it.
Seconds exposed_gradient_reduction(Seconds reduction, int buckets, Seconds last_pass);

// Ring attention under context parallelism over `members` devices: what the exchange adds to a
// pass whose attention core takes `own_attention` on this device, when the ring's slowest step
// (the longest of the members' attention shares, attention / members, and of the transfers of
// one chunk) takes `slowest_step`: each of the members - 1 steps after the first adds what it
// exceeds this device's share by (docs/simulator.md). 0 for one member.
Seconds ring_exchange_exposure(int members, Seconds slowest_step, Seconds own_attention);

class CostModel {
 public:
  virtual ~CostModel() = default;

  // Per micro-batch, on every device of `group` (tensor-parallel work split t ways, with the
  // TP collectives included in the times).
  virtual ComputeTimes compute(LayerRange layers, const DeviceGroup& group,
                               RecomputePolicy recompute) const = 0;
  // Per device of `group`.
  virtual StageMemory stage_memory(LayerRange layers, const DeviceGroup& group,
                                   const MemoryOptions& options) const = 0;
  // Bytes of the activation leaving layer `layer` (and of its gradient coming back), per
  // micro-batch: what crosses a stage boundary placed after that layer.
  virtual Bytes boundary_bytes(int layer) const = 0;
  // Bytes one all-to-all moves per micro-batch, on one device without tensor parallelism, to
  // send layer `layer`'s tokens to its routed experts (and as many to combine them back) under
  // expert parallelism. 0, the default: not an MoE layer, or a model without the figure.
  virtual Bytes expert_dispatch_bytes(int layer) const {
    (void)layer;
    return Bytes(0);
  }
  // One all-to-all of layer `layer`'s tokens to their experts (or back) over `devices`, one
  // device per member of an expert group, `bytes` from each (expert_dispatch_bytes over its TP
  // degree). The default: collective_time's all-to-all; a cost model may price the stack's
  // dispatcher instead.
  virtual Seconds expert_exchange_time(int layer, const std::vector<int>& devices, Bytes bytes,
                                       CollectiveAlgorithm algorithm) const {
    (void)layer;
    return collective_time(Collective::kAllToAll, devices, bytes, algorithm);
  }
  // Context parallelism (Workload::context_parallel, Plan::context_parallel): what layer
  // `layer` passes to the next member of its group's ring at every ring step, per micro-batch,
  // from each device of `group` (its chunk's keys and values, its TP rank's heads), and the
  // layer's attention core on that device in the forward and input-gradient passes, which the
  // ring's steps run beside the transfers. Zero bytes, the default: nothing to exchange.
  struct ContextExchange {
    Bytes bytes;
    Seconds forward_attention;
    Seconds backward_attention;
  };
  virtual ContextExchange context_exchange(int layer, const DeviceGroup& group) const {
    (void)layer;
    (void)group;
    return ContextExchange{};
  }
  // How a pipeline message of `bytes` between two stages' groups travels: the bytes crossing the
  // path from src.devices[0] to dst.devices[0] (a share when the group's ranks send shares in
  // parallel on disjoint paths) and the fraction of that path's bandwidth the transfer reaches.
  struct PipelineMessage {
    Bytes bytes;
    double bandwidth_efficiency = 1.0;
  };
  virtual PipelineMessage pipeline_message(const DeviceGroup& src, const DeviceGroup& dst,
                                           Bytes bytes) const {
    (void)src;
    (void)dst;
    return PipelineMessage{bytes, 1.0};
  }
  // The optimizer step over `layers`' parameters on each device of `group`, once per
  // iteration, when the model knows it (the analytic model always does); nullopt: the caller
  // prices it from the stage's memory (optimizer_step_or_state_pass below).
  virtual std::optional<Seconds> optimizer_step_time(LayerRange layers, const DeviceGroup& group,
                                                     const MemoryOptions& options) const {
    (void)layers;
    (void)group;
    (void)options;
    return std::nullopt;
  }
  // latency + bytes / bandwidth on the path between two devices; 0 for src == dst.
  virtual Seconds p2p_time(int src, int dst, Bytes bytes) const = 0;
  // `bytes` is the per-participant buffer size (as nccl-tests' "size").
  virtual Seconds collective_time(Collective collective, const std::vector<int>& devices,
                                  Bytes bytes, CollectiveAlgorithm algorithm) const = 0;
  // The number of buckets a stage's data-parallel gradient reduction (across `data_parallel`
  // replicas, per device of `group`) is issued in, each as soon as its gradients are final
  // during the stage's last backward pass. 1, the default: one reduction after that pass.
  virtual int gradient_buckets(LayerRange layers, const DeviceGroup& group,
                               int64_t data_parallel) const {
    (void)layers;
    (void)group;
    (void)data_parallel;
    return 1;
  }
  // Under ZeRO-1, the same for the all-gather of the updated weights, issued bucket by bucket
  // as the next iteration's first forward pass needs them. 1, the default: all of it before.
  virtual int parameter_gather_buckets(LayerRange layers, const DeviceGroup& group,
                                       int64_t data_parallel) const {
    (void)layers;
    (void)group;
    (void)data_parallel;
    return 1;
  }
  // Two layers that hold copies of one weight matrix, whose gradients are summed every
  // iteration where different device groups hold them (an LM head tied to the embedding, as
  // Megatron-LM's embedding group all-reduces it). nullopt, the default: none.
  struct TiedLayers {
    int first = 0;   // the embedding
    int second = 0;  // the layer reusing its matrix (the head)
  };
  virtual std::optional<TiedLayers> tied_layers() const { return std::nullopt; }
  // The devices and shared links the times above are priced on; the simulator shares link
  // bandwidth between concurrent transfers on the same paths.
  virtual const Topology& topology() const = 0;
};

// A vocabulary shard's layer range as the whole head, and a whole head's times and memory as
// the shard's share of them (LayerRange::vocab_share): what every cost model does for a shard.
// REQUIRES: a shard's range is one layer and its share in (0, 1].
LayerRange whole(LayerRange shard);

// Per-layer recompute (Stage::recompute_layers in plan.h): the layers `full_layers` of `layers`
// recompute in full and the others under `policy`. Times: F, B and W as compute() gives them
// for the range (recompute changes none of them), the recompute the sum of each layer's under
// its own policy. Memory: as stage_memory() under `policy`, with the activations per
// micro-batch of `full_layers` those of full recompute (their input only). With `full_layers`
// empty these are compute() and stage_memory() themselves.
ComputeTimes stage_compute(const CostModel& cost, LayerRange layers, const DeviceGroup& group,
                           RecomputePolicy policy, const std::vector<int>& full_layers);
StageMemory stage_memory_with(const CostModel& cost, LayerRange layers, const DeviceGroup& group,
                              const MemoryOptions& options, const std::vector<int>& full_layers);
ComputeTimes scaled(const ComputeTimes& whole, LayerRange shard);
StageMemory scaled(const StageMemory& whole, LayerRange shard);

// One pass over a stage's model state at `bandwidth`: (gradients + 2 optimizer_state + weights)
// / bandwidth, the optimizer step of a cost model that does not price it itself.
Seconds state_pass_time(const StageMemory& memory, BytesPerSecond bandwidth);
// cost.optimizer_step_time where it answers, else state_pass_time of the range's stage_memory.
Seconds optimizer_step_or_state_pass(const CostModel& cost, LayerRange layers,
                                     const DeviceGroup& group, const MemoryOptions& options,
                                     BytesPerSecond bandwidth);

// A stage's data-parallel synchronization over one ring of devices (one per replica) at the end
// of an iteration: the gradients all-reduced, or under ZeRO reduce-scattered (the last
// micro-batch's, under ZeRO-2 and -3), and under ZeRO-1 and -2 the updated weights all-gathered
// (ZeRO-3 gathers them before each pass instead); zero otherwise. `unsharded` is the stage's
// StageMemory without ZeRO (zero_stage 0): the bytes each member of the ring sums or gathers.
struct DataParallelSync {
  Seconds reduction;
  Seconds gather;
};
DataParallelSync data_parallel_sync(const CostModel& cost, const std::vector<int>& ring,
                                    const StageMemory& unsharded, int zero_stage,
                                    CollectiveAlgorithm algorithm);
// What ZeRO-2 and -3 add to every micro-batch's passes of a stage: the reduce-scatter of the
// gradients each backward finishes and, under ZeRO-3, the all-gather of the weights before the
// forward and again before the backward. Each runs on the communication stream under the pass
// it belongs to (the gather prefetched during the pass before), so a pass only lengthens by
// what its collective takes beyond it: max(0, collective - pass). `stage1` is one ring's
// collectives of the whole stage (data_parallel_sync of zero stage 1). All zero below stage 2.
// The last micro-batch's reduce-scatter is the end-of-iteration sync's.
struct ShardedPassOverhead {
  Seconds forward;   // each forward (the gather)
  Seconds backward;  // each backward needing the weights, B or fused (the gather)
  Seconds gradient;  // each pass finishing gradients, W or fused (the reduce-scatter)
};
ShardedPassOverhead sharded_pass_overhead(int zero_stage, const DataParallelSync& stage1,
                                          Seconds forward, Seconds backward, Seconds gradient_pass);
// The sum of a tied matrix's gradients (CostModel::tied_layers) between the group holding its
// first copy and the group holding its second: an all-reduce of the second layer's gradients
// (stage_memory of that layer on `second`, per device), TP rank k with rank k and the slowest
// pair pricing it, or one ring over both groups when their degrees differ. 0 when the model
// ties nothing or one group holds both.
Seconds tied_gradient_sum(const CostModel& cost, const std::vector<int>& first,
                          const std::vector<int>& second, CollectiveAlgorithm algorithm);

// What `sync` leaves exposed: the reduction bucketed under the stage's last backward pass and
// the gather under its first forward pass (exposed_gradient_reduction with the cost model's
// gradient_buckets and parameter_gather_buckets).
Seconds exposed_data_parallel_sync(const CostModel& cost, const DataParallelSync& sync,
                                   LayerRange layers, const DeviceGroup& group,
                                   int64_t data_parallel, Seconds last_backward,
                                   Seconds first_forward);

}  // namespace motley
