// Internal to tune/: what every part of the search shares — the specs, the options, the devices
// with their types, nodes and prices, and one cost model per micro-batch size. Built once per
// tune() call; immutable afterwards and safe to read from the evaluation threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/status.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/cost/cost_model.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"
#include "motley/tune/tune.h"

namespace motley::tune_internal {

// options.clock(), or the steady clock's time when it is empty.
Seconds clock_now(const TuneOptions& options);

// Devices of one catalog type.
struct TypeInfo {
  std::string name;
  const DeviceType* type = nullptr;
  std::vector<int> nodes;                      // nodes holding this type, cluster order
  std::vector<std::vector<int>> node_devices;  // per entry of `nodes`: device ids, in order
  int count = 0;
  // Tensor-parallel degrees that tile every node's devices of this type (1, 2, 4, 8).
  std::vector<int> tp_degrees;
  double relative_speed = 1;  // whole-model F+B+W rate relative to the fastest type
};

class Context {
 public:
  // Checks the options (invalid_argument naming the option) and builds the cost models.
  static Result<std::unique_ptr<Context>> create(const TuneOptions& options, const ModelSpec& model,
                                                 const ClusterSpec& cluster);

  const TuneOptions& options() const { return options_; }
  const ModelSpec& model() const { return model_; }
  const ClusterSpec& cluster() const { return cluster_; }
  int num_layers() const { return static_cast<int>(model_.layers.size()); }
  int num_devices() const { return static_cast<int>(devices_.size()); }  // usable ones
  int64_t seq_len() const { return seq_len_; }
  int64_t global_batch() const { return options_.global_batch; }
  // The devices plans may use (the cluster's less the constraints' exclusions), ids as in the
  // cluster; num_cluster_devices() sizes arrays indexed by id.
  const std::vector<Device>& devices() const { return devices_; }
  int num_cluster_devices() const { return static_cast<int>(type_of_device_.size()); }
  const std::vector<TypeInfo>& types() const { return types_; }
  int type_of(int device) const { return type_of_device_[device]; }  // -1: unusable
  // The memory a plan may fill on `device`: its capacity less the constraints' headroom.
  Bytes capacity(int device) const;
  double usable_memory_fraction() const { return 1.0 - options_.constraints.memory_headroom; }
  double price_per_second(int device) const { return price_per_second_[device]; }
  // Whether any node can be interrupted (preemption.h), and each layer's checkpointed state.
  bool interruptible() const { return interruptible_; }
  const std::vector<Bytes>& layer_state() const { return layer_state_; }

  // Micro-batch sizes the search may use, and the one the baselines use.
  const std::vector<int64_t>& micro_batch_sizes() const { return micro_batch_sizes_; }
  int64_t baseline_micro_batch_size() const { return micro_batch_sizes_.front(); }
  // The cost model of micro-batch size b, with Megatron-LM's sequence parallelism inside the
  // tensor-parallel groups when `sequence_parallel`. REQUIRES: b is in micro_batch_sizes(), and
  // searches_sequence_parallel() when `sequence_parallel`.
  // Under context parallelism over `cp` replicas, REQUIRES: cp is 1 or in context_degrees().
  const CostModel& cost(int64_t b, bool sequence_parallel = false, int cp = 1) const;
  // The context-parallel degrees candidates may use beyond 1: the options' degree, or those
  // searched (TuneOptions::context_parallel); empty: none.
  const std::vector<int>& context_degrees() const { return context_degrees_; }
  // Whether candidates with sequence parallelism are built: the analytic cost model (a given
  // factory prices no such option), some device type forming TP groups, and the options not
  // ruling it out.
  bool searches_sequence_parallel() const { return searches_sequence_parallel_; }
  // Partitions refused for memory (no split of the layers fits some stage), counted so that a
  // search that finds nothing can tell memory from options no layout meets. Thread-safe.
  void note_memory_refusal() const { memory_refusals_.fetch_add(1, std::memory_order_relaxed); }
  int64_t memory_refusals() const { return memory_refusals_.load(std::memory_order_relaxed); }
  // Why a tensor-parallel group of t devices cannot split the model's layers the way Megatron-LM
  // does (tensor_parallel_obstacle of the first layer it cannot split, named); nullopt: it can.
  std::optional<std::string> tensor_parallel_obstacle(int t) const;

  // The search's clock (clock_now of the options). Thread-safe.
  Seconds now() const { return clock_now(options_); }

  const SpecRef& model_ref() const { return model_ref_; }
  const SpecRef& cluster_ref() const { return cluster_ref_; }

 private:
  Context(const TuneOptions& options, const ModelSpec& model, const ClusterSpec& cluster)
      : options_(options), model_(model), cluster_(cluster) {}

  const TuneOptions& options_;
  const ModelSpec& model_;
  const ClusterSpec& cluster_;
  int64_t seq_len_ = 0;
  std::vector<Device> devices_;
  std::vector<TypeInfo> types_;
  std::vector<int> type_of_device_;
  std::vector<double> price_per_second_;
  bool interruptible_ = false;
  std::vector<Bytes> layer_state_;
  std::vector<int64_t> micro_batch_sizes_;
  std::map<std::tuple<int64_t, bool, int>, std::unique_ptr<CostModel>> costs_;
  std::vector<int> context_degrees_;
  bool searches_sequence_parallel_ = false;
  mutable std::atomic<int64_t> memory_refusals_{0};
  SpecRef model_ref_;
  SpecRef cluster_ref_;
};

// The micro-batch sizes `options` allows: the given one, or 1, 2 and 4 (those dividing the
// global batch).
std::vector<int64_t> allowed_micro_batch_sizes(const TuneOptions& options);

// The cost model for one workload, from options.cost_model or the analytic model (with
// Megatron-LM's sequence parallelism inside TP groups when `sequence_parallel`). The analytic
// model is built on `paths` when given (REQUIRES: AnalyticCostModel::paths_of(cluster)), so
// that the cost models of one search share the topology and what they learn of its paths.
Result<std::unique_ptr<CostModel>> make_cost_model(
    const TuneOptions& options, const ModelSpec& model, const ClusterSpec& cluster, int64_t seq_len,
    int64_t micro_batch_size, bool sequence_parallel = false, int context_parallel = 1,
    std::shared_ptr<AnalyticCostModel::Paths> paths = nullptr);

// Why `model` at `seq_len` cannot split its sequences over `cp` devices (context parallelism
// needs attention as every layer's sequence mixing and seq_len a multiple of 2 cp, as
// validate_plan checks); nullopt: it can.
std::optional<std::string> context_parallel_obstacle(const ModelSpec& model, int64_t seq_len,
                                                     int cp);
// The degrees beyond 1 candidates may use (Context::context_degrees): the options' fixed
// degree, or where searched 2, 4 and 8 that the model allows and `devices` can hold as
// replicas (none when expert parallelism is fixed, which excludes it, or a cost-model factory
// prices the plans).
std::vector<int> context_degrees(const TuneOptions& options, const ModelSpec& model,
                                 int64_t seq_len, int devices);

// Checks what tune() and iteration_lower_bound() both need from the options.
Status check_options(const TuneOptions& options, const ModelSpec& model,
                     const ClusterSpec& cluster);

// The lower bound with the context's cost models (iteration_lower_bound without rebuilding).
Seconds lower_bound(const Context& ctx);

}  // namespace motley::tune_internal
