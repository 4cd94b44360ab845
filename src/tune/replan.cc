#include "motley/tune/replan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "context.h"
#include "motley/sim/simulator.h"

namespace motley {
namespace {

std::vector<std::string> node_names(const ClusterSpec& cluster) {
  std::vector<std::string> names;
  for (const NodeSpec& n : cluster.nodes) names.push_back(n.name);
  return names;
}

// `links` with device ids renamed by `map`, those of a device gone left out.
std::vector<MeasuredLink> renamed_links(const std::vector<MeasuredLink>& links,
                                        const std::vector<int>& map) {
  std::vector<MeasuredLink> out;
  for (MeasuredLink link : links) {
    const bool known =
        link.src < static_cast<int>(map.size()) && link.dst < static_cast<int>(map.size());
    if (!known || map[link.src] < 0 || map[link.dst] < 0) continue;
    link.src = map[link.src];
    link.dst = map[link.dst];
    out.push_back(link);
  }
  return out;
}

// `collectives` with device ids renamed by `map`; a collective over a device gone is left out
// (its sweep measured a set of devices that no longer exists).
std::vector<MeasuredCollective> renamed_collectives(
    const std::vector<MeasuredCollective>& collectives, const std::vector<int>& map) {
  std::vector<MeasuredCollective> out;
  for (MeasuredCollective c : collectives) {
    const bool kept = std::all_of(c.devices.begin(), c.devices.end(), [&](int d) {
      return d < static_cast<int>(map.size()) && map[d] >= 0;
    });
    if (!kept) continue;
    for (int& d : c.devices) d = map[d];
    out.push_back(std::move(c));
  }
  return out;
}

Seconds since(std::chrono::steady_clock::time_point start) {
  return Seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

Result<ClusterSpec> cluster_without(const ClusterSpec& cluster,
                                    const std::vector<std::string>& lost) {
  std::set<std::string> gone;
  for (const std::string& name : lost) {
    const bool known = std::any_of(cluster.nodes.begin(), cluster.nodes.end(),
                                   [&](const NodeSpec& n) { return n.name == name; });
    if (!known) {
      return invalid_argument(fmt::format("--lost: cluster '{}' has no node '{}'; its nodes: {}",
                                          cluster.name, name,
                                          fmt::join(node_names(cluster), ", ")));
    }
    if (!gone.insert(name).second) {
      return invalid_argument(fmt::format("--lost: node '{}' is named twice", name));
    }
  }
  ClusterSpec out = cluster;
  out.nodes.clear();
  for (const NodeSpec& n : cluster.nodes) {
    if (gone.count(n.name) == 0) out.nodes.push_back(n);
  }
  if (out.nodes.empty()) {
    return invalid_argument(fmt::format(
        "--lost: that is every node of cluster '{}'; nothing is left to plan on", cluster.name));
  }
  const std::vector<int> map = device_map(cluster, out);
  out.measured_links = renamed_links(cluster.measured_links, map);
  out.measured_collectives = renamed_collectives(cluster.measured_collectives, map);
  return out;
}

Result<ClusterSpec> cluster_with(const ClusterSpec& cluster, const ClusterSpec& gained) {
  ClusterSpec out = cluster;
  for (const NodeSpec& n : gained.nodes) {
    const bool taken = std::any_of(out.nodes.begin(), out.nodes.end(),
                                   [&](const NodeSpec& m) { return m.name == n.name; });
    if (taken) {
      return invalid_argument(fmt::format(
          "--gained: node '{}' of cluster '{}' is already a node of cluster '{}'; give the new "
          "nodes names of their own",
          n.name, gained.name, cluster.name));
    }
    out.nodes.push_back(n);
  }
  return out;
}

std::vector<int> device_map(const ClusterSpec& from, const ClusterSpec& to) {
  // (node name, index in node) -> device of `to`.
  std::map<std::pair<std::string, int>, Device> target;
  for (const Device& d : cluster_devices(to)) target[{to.nodes[d.node].name, d.local_index}] = d;
  std::vector<int> map;
  for (const Device& d : cluster_devices(from)) {
    auto it = target.find({from.nodes[d.node].name, d.local_index});
    map.push_back(it != target.end() && it->second.type == d.type ? it->second.id : -1);
  }
  return map;
}

std::optional<Plan> surviving_structure(const Plan& plan, const std::vector<int>& map) {
  Plan out = plan;
  out.replicas.clear();
  out.predicted.reset();
  for (const Replica& replica : plan.replicas) {
    Replica kept = replica;
    bool whole = true;
    for (DeviceGroupSchedule& g : kept.groups) {
      g.actions.clear();
      for (int& d : g.devices) {
        d = d >= 0 && d < static_cast<int>(map.size()) ? map[d] : -1;
        whole = whole && d >= 0;
      }
    }
    if (whole) out.replicas.push_back(std::move(kept));
  }
  if (out.replicas.empty()) return std::nullopt;
  return out;
}

std::vector<int> device_layers(const Plan& plan, int device) {
  std::set<int> layers;
  for (const Replica& replica : plan.replicas) {
    for (size_t s = 0; s < replica.stage_group.size() && s < plan.stages.size(); ++s) {
      const std::vector<int>& devices = replica.groups[replica.stage_group[s]].devices;
      if (std::find(devices.begin(), devices.end(), device) == devices.end()) continue;
      for (int l = plan.stages[s].layer_begin; l < plan.stages[s].layer_end; ++l) layers.insert(l);
    }
  }
  return {layers.begin(), layers.end()};
}

std::string layer_ranges(const std::vector<int>& layers) {
  if (layers.empty()) return "-";
  std::vector<std::string> parts;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    parts.push_back(j == i ? std::to_string(layers[i])
                           : fmt::format("{}-{}", layers[i], layers[j]));
    i = j + 1;
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::vector<int> DeviceChange::arriving_layers() const {
  std::vector<int> out;
  std::set_difference(new_layers.begin(), new_layers.end(), old_layers.begin(), old_layers.end(),
                      std::back_inserter(out));
  return out;
}

Result<ReplanResult> replan(const Plan& old_plan, const ModelSpec& model,
                            const ClusterSpec& old_cluster, const ClusterSpec& new_cluster,
                            const ReplanOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  ReplanResult result;
  result.old_replicas = static_cast<int>(old_plan.replicas.size());

  // The old plan on the old cluster, priced as the new one will be.
  MOTLEY_ASSIGN_OR_RETURN(
      std::unique_ptr<CostModel> old_cost,
      tune_internal::make_cost_model(options.tune, model, old_cluster, old_plan.seq_len,
                                     old_plan.micro_batch_size, old_plan.sequence_parallel,
                                     old_plan.context_parallel));
  SimOptions old_options;
  if (!options.tune.optimizer_step) old_options.optimizer_step = OptimizerStepModel::kNone;
  MOTLEY_ASSIGN_OR_RETURN(SimResult old_sim, simulate(old_options, old_plan, *old_cost));
  result.old_iteration_time = old_sim.iteration_time;
  result.old_tokens_per_s = old_sim.throughput_tokens_per_s;

  const std::vector<int> map = device_map(old_cluster, new_cluster);
  TuneOptions tune = options.tune;
  tune.global_batch = old_plan.global_batch;
  tune.seq_len = old_plan.seq_len;
  tune.strategy = "motley";
  tune.warm_starts.clear();
  if (std::optional<Plan> kept = surviving_structure(old_plan, map)) {
    result.surviving_replicas = static_cast<int>(kept->replicas.size());
    tune.warm_starts.push_back(std::move(*kept));
    result.warm_started = true;
  }
  MOTLEY_ASSIGN_OR_RETURN(result.tuned, motley::tune(tune, model, new_cluster));

  const std::vector<Device> old_devices = cluster_devices(old_cluster);
  const std::vector<Device> new_devices = cluster_devices(new_cluster);
  std::vector<bool> matched(new_devices.size(), false);
  for (const Device& d : old_devices) {
    DeviceChange c;
    c.node = old_cluster.nodes[d.node].name;
    c.index_in_node = d.local_index;
    c.type = d.type;
    c.old_device = d.id;
    c.new_device = map[d.id];
    c.old_layers = device_layers(old_plan, d.id);
    if (c.new_device >= 0) {
      matched[c.new_device] = true;
      c.new_layers = device_layers(result.tuned.plan, c.new_device);
    }
    result.devices.push_back(std::move(c));
  }
  for (const Device& d : new_devices) {
    if (matched[d.id]) continue;
    DeviceChange c;
    c.node = new_cluster.nodes[d.node].name;
    c.index_in_node = d.local_index;
    c.type = d.type;
    c.new_device = d.id;
    c.new_layers = device_layers(result.tuned.plan, d.id);
    result.devices.push_back(std::move(c));
  }
  result.replan_time = since(start);
  return result;
}

}  // namespace motley
