// `motley estimate`: the model and cluster summaries and the cost of one training step of the
// model on one device of each type, before any parallelism. The built-in default example runs
// here when no options are given.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "commands.h"
#include "format.h"
#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/model/layer_cost.h"
#include "motley/model/model_json.h"
#include "option_checks.h"

namespace motley::cli {
namespace {

struct EstimateOptions {
  std::string model = kDefaultModel;
  std::string cluster = kDefaultCluster;
  std::optional<int64_t> seq_len;  // unset: the model's
  int64_t micro_batch_size = 1;
  int64_t global_batch = 64;
  bool all_device_types = false;
  bool json = false;
};

struct DeviceEstimate {
  std::string type;
  bool in_cluster = false;
  ComputeTimes per_micro_batch;
  Seconds step;
  double tokens_per_s = 0;
  Bytes memory;       // whole model on one device, one micro-batch in flight, no recompute
  Bytes memory_full;  // the same with full recompute
  Bytes capacity;
  int64_t devices_to_hold = 0;  // devices of this type needed just to hold the model state
  double usd_per_step = 0;
  double usd_per_million_tokens = 0;
};

DeviceEstimate estimate_device(const AnalyticCostModel& cost, int device, LayerRange all,
                               int64_t micro_batches, double tokens_per_step, bool in_cluster) {
  const DeviceType& t = cost.topology().device_type(device);
  DeviceGroup one{{device}};
  DeviceEstimate e;
  e.type = t.name;
  e.in_cluster = in_cluster;
  e.per_micro_batch = cost.compute(all, one, RecomputePolicy::kNone);
  e.step = (e.per_micro_batch.forward + e.per_micro_batch.backward()) *
           static_cast<double>(micro_batches);
  e.tokens_per_s = tokens_per_step / e.step.value();
  e.memory =
      cost.stage_memory(all, one, MemoryOptions{RecomputePolicy::kNone, 1, 1, false}).total();
  e.memory_full =
      cost.stage_memory(all, one, MemoryOptions{RecomputePolicy::kFull, 1, 1, false}).total();
  e.capacity = t.memory;
  e.devices_to_hold = static_cast<int64_t>(std::ceil(e.memory_full / e.capacity));
  e.usd_per_step = e.step.value() / 3600.0 * t.price_on_demand_per_hour;
  e.usd_per_million_tokens = e.usd_per_step / tokens_per_step * 1e6;
  return e;
}

Status estimate(const EstimateOptions& opt) {
  if (opt.global_batch % opt.micro_batch_size != 0) {
    return invalid_argument(fmt::format(
        "--global-batch: expected a positive multiple of the micro-batch size {}, got {}",
        opt.micro_batch_size, opt.global_batch));
  }
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec model, load_model(opt.model));
  MOTLEY_ASSIGN_OR_RETURN(ClusterSpec cluster, load_cluster(opt.cluster));
  AnalyticCostOptions cost_options;
  cost_options.workload.seq_len = opt.seq_len.value_or(model.default_seq_len);
  cost_options.workload.micro_batch_size = opt.micro_batch_size;
  cost_options.workload.dtype = model.dtype;
  cost_options.workload.dropout = model.dropout;
  const Workload& w = cost_options.workload;
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<AnalyticCostModel> analytic,
                          AnalyticCostModel::create(model, cluster, cost_options, opt.model));
  const AnalyticCostModel& cost = *analytic;
  const Topology& topo = cost.topology();
  ModelTotals totals = model_totals(model, w);
  LayerRange all{0, static_cast<int>(model.layers.size())};
  int64_t micro_batches = opt.global_batch / opt.micro_batch_size;
  double tokens_per_step = static_cast<double>(opt.global_batch * w.seq_len);

  // Model state alone (weights, gradients, optimizer) against the whole cluster's memory.
  Bytes cluster_memory;
  for (const auto& d : topo.devices()) cluster_memory += topo.device_type(d.id).memory;
  StageMemory whole =
      cost.stage_memory(all, DeviceGroup{{0}}, MemoryOptions{RecomputePolicy::kFull, 1, 1, false});
  Bytes state = whole.weights + whole.gradients + whole.optimizer_state;
  if (state > cluster_memory) {
    return infeasible(fmt::format(
        "model {} does not fit cluster {}: its weights, gradients and optimizer state need {} "
        "but all {} devices together have {}; use a larger cluster (--cluster)",
        model.name, cluster.name, format_bytes(state), topo.devices().size(),
        format_bytes(cluster_memory)));
  }

  std::set<std::string> present;
  std::vector<int> representative;  // one device id per type in the cluster
  for (const auto& d : topo.devices()) {
    if (present.insert(d.type).second) representative.push_back(d.id);
  }

  std::vector<DeviceEstimate> rows;
  for (int id : representative) {
    rows.push_back(estimate_device(cost, id, all, micro_batches, tokens_per_step, true));
  }
  if (opt.all_device_types) {
    // Every other catalog device is priced on a one-device cluster of its own.
    for (const auto& t : device_catalog()) {
      if (present.count(t.name)) continue;
      ClusterSpec single;
      single.name = "single-" + t.name;
      NodeSpec node;
      node.name = "node";
      node.devices = {NodeDevices{t.name, 1}};
      node.interconnect = LinkSpec{t.intra_node_link, t.intra_node_bandwidth, Seconds(0)};
      node.pcie = LinkSpec{LinkKind::kPcie, t.pcie_bandwidth, Seconds(0)};
      node.nic = LinkSpec{LinkKind::kEthernet, t.pcie_bandwidth, Seconds(0)};
      node.price_per_hour = t.price_on_demand_per_hour;
      single.nodes = {node};
      single.network = node.nic;
      MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<AnalyticCostModel> single_cost,
                              AnalyticCostModel::create(model, single, cost_options, opt.model));
      rows.push_back(estimate_device(*single_cost, 0, all, micro_batches, tokens_per_step, false));
    }
  }

  std::string out;
  if (opt.json) {
    Json devices = Json::array();
    for (const auto& e : rows) {
      devices.push_back({{"type", e.type},
                         {"in_cluster", e.in_cluster},
                         {"forward_s", e.per_micro_batch.forward.value()},
                         {"backward_input_s", e.per_micro_batch.backward_input.value()},
                         {"backward_weight_s", e.per_micro_batch.backward_weight.value()},
                         {"step_time_s", e.step.value()},
                         {"tokens_per_s", e.tokens_per_s},
                         {"memory_bytes", e.memory.value()},
                         {"memory_full_recompute_bytes", e.memory_full.value()},
                         {"memory_capacity_bytes", e.capacity.value()},
                         {"fits", e.memory <= e.capacity},
                         {"devices_to_hold_model", e.devices_to_hold},
                         {"usd_per_step", e.usd_per_step},
                         {"usd_per_million_tokens", e.usd_per_million_tokens}});
    }
    Json j{{"model",
            {{"name", model.name},
             {"total_params", totals.total_params},
             {"active_params", totals.active_params},
             {"layers", model.layers.size()}}},
           {"cluster", {{"name", cluster.name}, {"total_devices", topo.devices().size()}}},
           {"seq_len", w.seq_len},
           {"micro_batch_size", w.micro_batch_size},
           {"global_batch", opt.global_batch},
           {"micro_batches", micro_batches},
           {"training_flops_per_step",
            (totals.forward + totals.backward_input + totals.backward_weight).value() *
                static_cast<double>(micro_batches)},
           {"devices", devices}};
    out = j.dump(2) + "\n";
  } else {
    out += fmt::format("model {}: {} layers, {} parameters ({} active per token)\n", model.name,
                       model.layers.size(), format_count(static_cast<double>(totals.total_params)),
                       format_count(static_cast<double>(totals.active_params)));
    std::map<std::string, int> by_type;
    for (const auto& d : topo.devices()) ++by_type[d.type];
    std::string types;
    for (const auto& [t, n] : by_type) {
      types += fmt::format("{}{} x {}", types.empty() ? "" : ", ", n, t);
    }
    out += fmt::format("cluster {}: {} devices ({}) in {} nodes, {} memory in all\n", cluster.name,
                       topo.devices().size(), types, cluster.nodes.size(),
                       format_bytes(cluster_memory));
    Flops step_flops = (totals.forward + totals.backward_input + totals.backward_weight) *
                       static_cast<double>(micro_batches);
    out += fmt::format(
        "one training step: global batch {} x {} tokens = {} micro-batches of {}, {} of work\n\n",
        opt.global_batch, w.seq_len, micro_batches, opt.micro_batch_size, format_flops(step_flops));
    out += "cost of the whole step on ONE device of each type (no parallelism yet):\n";
    Table t({"device", "F/mb", "B/mb", "W/mb", "step", "tokens/s", "memory", "capacity", "fits",
             "devices to hold", "$/step", "$/M tokens"});
    for (const auto& e : rows) {
      t.add_row({e.type + (e.in_cluster ? "" : " *"), format_time(e.per_micro_batch.forward),
                 format_time(e.per_micro_batch.backward_input),
                 format_time(e.per_micro_batch.backward_weight), format_time(e.step),
                 format_count(e.tokens_per_s), format_bytes(e.memory), format_bytes(e.capacity),
                 e.memory <= e.capacity ? "yes" : "no", std::to_string(e.devices_to_hold),
                 fmt::format("${:.4f}", e.usd_per_step),
                 fmt::format("${:.2f}", e.usd_per_million_tokens)});
    }
    out += t.to_string();
    out +=
        "\nmemory: weights, gradients, optimizer state and one micro-batch of activations;\n"
        "devices to hold: the model state with full recompute divided by the capacity.\n";
    if (opt.all_device_types) out += "* not in this cluster\n";
  }
  std::fputs(out.c_str(), stdout);
  return Status::ok();
}

}  // namespace

void add_estimate_command(CLI::App& app, Action* action) {
  auto opt = std::make_shared<EstimateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "estimate", "Model and cluster summary and the cost of one training step per device type");
  cmd->add_option("--model", opt->model, "Preset, HF config.json, profile or model JSON")
      ->capture_default_str();
  cmd->add_option("--cluster", opt->cluster, "Preset or cluster YAML")->capture_default_str();
  cmd->add_option("--seq-len", opt->seq_len, "Sequence length (default: the model's)")
      ->check(integer_in(1, kMaxOptionSeqLen));
  cmd->add_option("--micro-batch-size", opt->micro_batch_size, "Sequences per micro-batch")
      ->check(integer_in(1, kMaxOptionCount))
      ->capture_default_str();
  cmd->add_option("--global-batch", opt->global_batch, "Sequences per training step")
      ->check(integer_in(1, kMaxOptionCount))
      ->capture_default_str();
  cmd->add_flag("--all-device-types", opt->all_device_types,
                "Also price every device type of the catalog");
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->callback([opt, action] { *action = [opt] { return estimate(*opt); }; });
}

}  // namespace motley::cli
