#include "context.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "motley/cost/analytic_cost_model.h"
#include "motley/model/layer_cost.h"
#include "motley/plan/spec_hash.h"
#include "motley/tune/preemption.h"

namespace motley::tune_internal {

std::vector<int64_t> allowed_micro_batch_sizes(const TuneOptions& options) {
  if (options.micro_batch_size > 0) return {options.micro_batch_size};
  std::vector<int64_t> out;
  for (int64_t b : {1, 2, 4}) {
    if (options.global_batch % b == 0) out.push_back(b);
  }
  return out;
}

std::optional<std::string> context_parallel_obstacle(const ModelSpec& model, int64_t seq_len,
                                                     int cp) {
  if (cp <= 1) return std::nullopt;
  if (seq_len % (2 * static_cast<int64_t>(cp)) != 0) {
    return fmt::format("the sequence length ({}) is not a multiple of 2 x {}", seq_len, cp);
  }
  for (const Layer& l : model.layers) {
    if (l.kind == LayerKind::kMamba || l.kind == LayerKind::kMeasured) {
      return fmt::format("layer '{}' is {}, not attention", l.name, layer_kind_name(l.kind));
    }
  }
  return std::nullopt;
}

std::vector<int> context_degrees(const TuneOptions& options, const ModelSpec& model,
                                 int64_t seq_len, int devices) {
  if (options.context_parallel > 1) return {options.context_parallel};
  // (Searched only where the analytic model prices the ring; a factory's model may not.)
  if (options.context_parallel == 1 || options.expert_parallel > 1 || options.cost_model) return {};
  std::vector<int> out;
  for (int cp : {2, 4, 8}) {
    if (cp <= devices && !context_parallel_obstacle(model, seq_len, cp)) out.push_back(cp);
  }
  return out;
}

Status check_options(const TuneOptions& o, const ModelSpec& model, const ClusterSpec& cluster) {
  const char* pre = "tune options: ";
  if (o.global_batch <= 0) {
    return invalid_argument(fmt::format(
        "{}'global_batch' must be a positive number of sequences, got {}", pre, o.global_batch));
  }
  if (o.seq_len < 0) {
    return invalid_argument(
        fmt::format("{}'seq_len' must be 0 (the model's) or positive, got {}", pre, o.seq_len));
  }
  if (o.micro_batch_size < 0) {
    return invalid_argument(fmt::format("{}'micro_batch_size' must be 0 (auto) or positive, got {}",
                                        pre, o.micro_batch_size));
  }
  if (o.micro_batch_size > 0 && o.global_batch % o.micro_batch_size != 0) {
    return invalid_argument(fmt::format("{}'micro_batch_size' ({}) must divide 'global_batch' ({})",
                                        pre, o.micro_batch_size, o.global_batch));
  }
  if (o.threads < 1) {
    return invalid_argument(fmt::format("{}'threads' must be at least 1, got {}", pre, o.threads));
  }
  if (o.zero_stage && (*o.zero_stage < 0 || *o.zero_stage > 3)) {
    return invalid_argument(
        fmt::format("{}'zero_stage' must be 0, 1, 2 or 3, got {}", pre, *o.zero_stage));
  }
  if (o.expert_parallel < 0) {
    return invalid_argument(fmt::format(
        "{}'expert_parallel' must be 0 (searched) or positive, got {}", pre, o.expert_parallel));
  }
  if (o.expert_parallel > 1) {
    bool moe = false;
    for (const Layer& l : model.layers) {
      if (layer_routed_expert_params(l) == 0) continue;
      moe = true;
      if (l.moe->num_experts % o.expert_parallel != 0) {
        return invalid_argument(fmt::format(
            "{}'expert_parallel' ({}) must divide every MoE layer's experts: '{}' has {}", pre,
            o.expert_parallel, l.name, l.moe->num_experts));
      }
    }
    if (!moe) {
      return invalid_argument(
          fmt::format("{}'expert_parallel' is {} but model '{}' has no mixture-of-experts layer",
                      pre, o.expert_parallel, model.name));
    }
  }
  if (o.vocab_parallel.value_or(false) && head_vocab(model) == 0) {
    return invalid_argument(fmt::format(
        "{}'vocab_parallel' splits the model's head, but the last layer of model '{}' ('{}') is "
        "no head (a measured layer must state its vocab)",
        pre, model.name, model.layers.empty() ? std::string() : model.layers.back().name));
  }
  if (o.context_parallel < 0) {
    return invalid_argument(fmt::format(
        "{}'context_parallel' must be 0 (searched) or positive, got {}", pre, o.context_parallel));
  }
  if (o.context_parallel > 1) {
    if (o.expert_parallel > 1) {
      return invalid_argument(fmt::format(
          "{}'context_parallel' ({}) and 'expert_parallel' ({}) both group the replicas; give one",
          pre, o.context_parallel, o.expert_parallel));
    }
    const int64_t seq = o.seq_len > 0 ? o.seq_len : model.default_seq_len;
    if (std::optional<std::string> why =
            context_parallel_obstacle(model, seq, o.context_parallel)) {
      return invalid_argument(
          fmt::format("{}'context_parallel' ({}): {}", pre, o.context_parallel, *why));
    }
  }
  if (!(o.time_budget.value() > 0)) {
    return invalid_argument(
        fmt::format("{}'time_budget' must be a positive number of seconds", pre));
  }
  if (o.max_evaluations < 0) {
    return invalid_argument(fmt::format(
        "{}'max_evaluations' must be 0 (no limit) or positive, got {}", pre, o.max_evaluations));
  }
  if (!(o.budget_per_hour >= 0) || !std::isfinite(o.budget_per_hour)) {
    return invalid_argument(
        fmt::format("{}'budget_per_hour' must be 0 (no limit) or a positive number of USD", pre));
  }
  if (!(o.train_tokens >= 0) || !std::isfinite(o.train_tokens) || !(o.deadline.value() >= 0) ||
      !std::isfinite(o.deadline.value()) || (o.train_tokens > 0) != (o.deadline.value() > 0)) {
    return invalid_argument(fmt::format(
        "{}'train_tokens' and 'deadline' go together: both positive (a deadline for that many "
        "tokens) or both 0",
        pre));
  }
  const PlanConstraints& k = o.constraints;
  if (k.tensor_parallel < 0 || k.pipeline_parallel < 0 || k.data_parallel < 0) {
    return invalid_argument(fmt::format(
        "{}'constraints': tensor_parallel, pipeline_parallel and data_parallel must be 0 (free) "
        "or positive, got {}, {} and {}",
        pre, k.tensor_parallel, k.pipeline_parallel, k.data_parallel));
  }
  if (k.tensor_parallel > 0 && (k.tensor_parallel & (k.tensor_parallel - 1)) != 0) {
    return invalid_argument(
        fmt::format("{}'constraints.tensor_parallel' must be a power of two (1, 2, 4, 8), got {}",
                    pre, k.tensor_parallel));
  }
  if (k.pipeline_parallel > static_cast<int>(model.layers.size())) {
    return invalid_argument(
        fmt::format("{}'constraints.pipeline_parallel' is {}, more than model '{}''s {} layers",
                    pre, k.pipeline_parallel, model.name, model.layers.size()));
  }
  const std::vector<std::string> families = schedule_family_names();
  for (const std::string& s : k.schedules) {
    if (std::find(families.begin(), families.end(), s) == families.end()) {
      return invalid_argument(fmt::format("{}'constraints.schedules' names '{}'; expected {}", pre,
                                          s, join_alternatives(families)));
    }
  }
  if (!(k.memory_headroom >= 0 && k.memory_headroom < 1)) {
    return invalid_argument(
        fmt::format("{}'constraints.memory_headroom' must be a share of memory in [0, 1), got {}",
                    pre, k.memory_headroom));
  }
  const std::vector<std::string> names = tune_strategy_names();
  if (std::find(names.begin(), names.end(), o.strategy) == names.end()) {
    return invalid_argument(fmt::format("{}'strategy' is '{}'; expected {}", pre, o.strategy,
                                        join_alternatives(names)));
  }
  if (model.layers.empty()) {
    return invalid_argument(fmt::format("{}model '{}' has no layers", pre, model.name));
  }
  const int devices = static_cast<int>(cluster_devices(cluster).size());
  if (devices == 0) {
    return invalid_argument(fmt::format("{}cluster '{}' has no devices", pre, cluster.name));
  }
  for (size_t i = 0; i < k.excluded_devices.size(); ++i) {
    const int d = k.excluded_devices[i];
    if (d < 0 || d >= devices || (i > 0 && d <= k.excluded_devices[i - 1])) {
      return invalid_argument(fmt::format(
          "{}'constraints.excluded_devices' must be ascending unique device ids of cluster '{}' "
          "(0 to {}), got {} at position {}",
          pre, cluster.name, devices - 1, d, i));
    }
  }
  if (static_cast<int>(k.excluded_devices.size()) == devices) {
    return invalid_argument(
        fmt::format("{}'constraints.excluded_devices' leaves none of cluster '{}''s {} devices",
                    pre, cluster.name, devices));
  }
  const int64_t fixed = static_cast<int64_t>(std::max(1, k.tensor_parallel)) *
                        std::max(1, k.pipeline_parallel) * std::max(1, k.data_parallel);
  if (fixed > devices - static_cast<int64_t>(k.excluded_devices.size())) {
    return invalid_argument(fmt::format(
        "{}'constraints': tensor x pipeline x data parallel is {} devices, more than the {} "
        "cluster '{}' offers",
        pre, fixed, devices - static_cast<int64_t>(k.excluded_devices.size()), cluster.name));
  }
  if (o.exhaustive) {
    if (o.strategy != "motley") {
      return invalid_argument(fmt::format(
          "{}'exhaustive' applies to strategy 'motley' only, not '{}'", pre, o.strategy));
    }
    if (devices > kExhaustiveMaxDevices ||
        static_cast<int>(model.layers.size()) > kExhaustiveMaxLayers) {
      return invalid_argument(
          fmt::format("{}'exhaustive' needs at most {} devices and {} layers; cluster '{}' has {} "
                      "devices and model '{}' {} layers",
                      pre, kExhaustiveMaxDevices, kExhaustiveMaxLayers, cluster.name, devices,
                      model.name, model.layers.size()));
    }
  }
  return Status::ok();
}

Result<std::unique_ptr<CostModel>> make_cost_model(
    const TuneOptions& options, const ModelSpec& model, const ClusterSpec& cluster, int64_t seq_len,
    int64_t micro_batch_size, bool sequence_parallel, int context_parallel,
    std::shared_ptr<AnalyticCostModel::Paths> paths) {
  const Workload workload{seq_len, micro_batch_size, model.dtype, model.dropout, context_parallel};
  if (options.cost_model) {
    std::unique_ptr<CostModel> cost = options.cost_model(model, cluster, workload);
    if (!cost) return internal_error("tune: the cost model factory returned no cost model");
    return cost;
  }
  AnalyticCostOptions cost_options;
  cost_options.workload = workload;
  cost_options.sequence_parallel = sequence_parallel;
  if (options.stack) {
    cost_options.stack = *options.stack;
  } else if (!cluster.software_stack.empty()) {
    Result<SoftwareStack> named = find_software_stack(cluster.software_stack);
    if (!named.is_ok()) {
      return invalid_argument(
          fmt::format("{}: field 'software_stack': {}", cluster.name, named.status().message()));
    }
    cost_options.stack = *named;
  } else {
    cost_options.stack = software_stacks().front();
  }
  if (!paths) paths = AnalyticCostModel::paths_of(cluster);
  MOTLEY_ASSIGN_OR_RETURN(
      std::unique_ptr<AnalyticCostModel> analytic,
      AnalyticCostModel::create(model, cluster, cost_options, model.name, std::move(paths)));
  return std::unique_ptr<CostModel>(std::move(analytic));
}

std::optional<std::string> Context::tensor_parallel_obstacle(int t) const {
  for (size_t l = 0; l < model_.layers.size(); ++l) {
    const Layer& layer = model_.layers[l];
    if (std::optional<std::string> why =
            motley::tensor_parallel_obstacle(layer, t, /*vocabulary=*/false)) {
      return fmt::format("layer {} ('{}'): {}", l, layer.name, *why);
    }
  }
  return std::nullopt;
}

Result<std::unique_ptr<Context>> Context::create(const TuneOptions& options, const ModelSpec& model,
                                                 const ClusterSpec& cluster) {
  MOTLEY_RETURN_IF_ERROR(check_options(options, model, cluster));
  std::unique_ptr<Context> ctx(new Context(options, model, cluster));
  ctx->seq_len_ = options.seq_len > 0 ? options.seq_len : model.default_seq_len;
  ctx->devices_ = cluster_devices(cluster);
  ctx->micro_batch_sizes_ = allowed_micro_batch_sizes(options);
  ctx->context_degrees_ = tune_internal::context_degrees(options, model, ctx->seq_len_,
                                                         static_cast<int>(ctx->devices_.size()));
  // One topology and its paths' parameters for every workload's cost model (a cost model from
  // options.cost_model has its own).
  const auto paths = options.cost_model ? nullptr : AnalyticCostModel::paths_of(cluster);
  for (int64_t b : ctx->micro_batch_sizes_) {
    MOTLEY_ASSIGN_OR_RETURN(
        ctx->costs_[std::make_tuple(b, false, 1)],
        make_cost_model(options, model, cluster, ctx->seq_len_, b, false, 1, paths));
  }
  ctx->model_ref_ = motley::model_ref(model);
  ctx->cluster_ref_ = motley::cluster_ref(cluster);

  const Topology& topo = ctx->cost(ctx->micro_batch_sizes_.front()).topology();
  const std::vector<Device> all = ctx->devices_;
  const PlanConstraints& fixed = options.constraints;
  // Device types whose nodes cannot form groups of the fixed TP degree are left out with the
  // excluded devices; the plans use the rest.
  std::set<std::string> unusable;
  if (fixed.tensor_parallel > 0) {
    std::map<std::pair<std::string, int>, int> per_node_type;
    for (const Device& d : all) ++per_node_type[{d.type, d.node}];
    for (const auto& [key, count] : per_node_type) {
      bool splits = count % fixed.tensor_parallel == 0;
      for (const Layer& layer : model.layers) {
        splits = splits && !motley::tensor_parallel_obstacle(layer, fixed.tensor_parallel, false);
      }
      if (!splits) unusable.insert(key.first);
    }
  }
  ctx->devices_.clear();
  for (const Device& d : all) {
    if (unusable.count(d.type) == 0 &&
        !std::binary_search(fixed.excluded_devices.begin(), fixed.excluded_devices.end(), d.id)) {
      ctx->devices_.push_back(d);
    }
  }
  if (ctx->devices_.empty()) {
    return invalid_argument(fmt::format(
        "tune options: 'constraints.tensor_parallel' {}: no device type of cluster '{}' has nodes "
        "whose devices split into groups of {} that divide every layer's heads and widths",
        fixed.tensor_parallel, cluster.name, fixed.tensor_parallel));
  }
  ctx->type_of_device_.assign(all.size(), -1);
  for (const Device& d : ctx->devices_) {
    int t = -1;
    for (size_t i = 0; i < ctx->types_.size(); ++i) {
      if (ctx->types_[i].name == d.type) t = static_cast<int>(i);
    }
    if (t < 0) {
      TypeInfo info;
      info.name = d.type;
      info.type = &topo.device_type(d.id);
      ctx->types_.push_back(info);
      t = static_cast<int>(ctx->types_.size()) - 1;
    }
    TypeInfo& info = ctx->types_[t];
    if (info.nodes.empty() || info.nodes.back() != d.node) {
      info.nodes.push_back(d.node);
      info.node_devices.emplace_back();
    }
    info.node_devices.back().push_back(d.id);
    ++info.count;
    ctx->type_of_device_[d.id] = t;
  }
  for (TypeInfo& info : ctx->types_) {
    for (int tp : {1, 2, 4, 8}) {
      bool tiles = true;
      for (const auto& nd : info.node_devices) tiles = tiles && nd.size() % tp == 0;
      // Only degrees that split every layer evenly (heads, widths), as Megatron-LM requires.
      tiles = tiles && !ctx->tensor_parallel_obstacle(tp);
      if (tiles && (fixed.tensor_parallel == 0 || tp == fixed.tensor_parallel)) {
        info.tp_degrees.push_back(tp);
      }
    }
  }
  // Node prices are for the whole node: each device carries its share.
  std::vector<int> per_node(cluster.nodes.size(), 0);
  for (const Device& d : all) ++per_node[d.node];
  for (const Device& d : all) {
    ctx->price_per_second_.push_back(cluster.nodes[d.node].price_per_hour / per_node[d.node] /
                                     3600.0);
  }
  ctx->interruptible_ = cluster_interruptible(cluster);
  bool tensor_parallel = false;
  for (const TypeInfo& info : ctx->types_) {
    for (int tp : info.tp_degrees) tensor_parallel = tensor_parallel || tp > 1;
  }
  ctx->searches_sequence_parallel_ =
      options.search_sequence_parallel && !options.cost_model && tensor_parallel;
  if (ctx->searches_sequence_parallel_) {
    for (int64_t b : ctx->micro_batch_sizes_) {
      MOTLEY_ASSIGN_OR_RETURN(ctx->costs_[std::make_tuple(b, true, 1)],
                              make_cost_model(options, model, cluster, ctx->seq_len_, b,
                                              /*sequence_parallel=*/true, 1, paths));
    }
  }
  for (int cp : ctx->context_degrees_) {
    for (int64_t b : ctx->micro_batch_sizes_) {
      for (const bool sp : {false, true}) {
        if (sp && !ctx->searches_sequence_parallel_) continue;
        MOTLEY_ASSIGN_OR_RETURN(
            ctx->costs_[std::make_tuple(b, sp, cp)],
            make_cost_model(options, model, cluster, ctx->seq_len_, b, sp, cp, paths));
      }
    }
  }
  // Relative speeds from the whole model on one device of each type.
  const CostModel& cost = ctx->cost(ctx->micro_batch_sizes_.front());
  double fastest = 0;
  std::vector<double> rate;
  for (const TypeInfo& info : ctx->types_) {
    const ComputeTimes t =
        cost.compute(LayerRange{0, ctx->num_layers()}, DeviceGroup{{info.node_devices[0][0]}},
                     RecomputePolicy::kNone);
    const double total = (t.forward + t.backward()).value();
    rate.push_back(total > 0 ? 1.0 / total : 1.0);
    fastest = std::max(fastest, rate.back());
  }
  for (size_t i = 0; i < ctx->types_.size(); ++i) ctx->types_[i].relative_speed = rate[i] / fastest;
  ctx->layer_state_ = layer_state_bytes(cost, ctx->num_layers(), 0);
  return ctx;
}

Seconds clock_now(const TuneOptions& options) {
  if (options.clock) return options.clock();
  return Seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

Bytes Context::capacity(int device) const {
  return types_[type_of_device_[device]].type->memory * usable_memory_fraction();
}

const CostModel& Context::cost(int64_t b, bool sequence_parallel, int cp) const {
  auto it = costs_.find(std::make_tuple(b, sequence_parallel, cp));
  MOTLEY_CHECK(it != costs_.end(),
               fmt::format("no cost model for micro-batch size {}{}{}", b,
                           sequence_parallel ? " with sequence parallelism" : "",
                           cp > 1 ? fmt::format(" under context parallelism {}", cp) : ""));
  return *it->second;
}

}  // namespace motley::tune_internal
