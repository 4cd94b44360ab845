// `motley replan`: a new plan when the cluster changes — nodes lost or preempted (--lost),
// nodes added (--gained), or a whole new cluster (--cluster) — for the plan's model, global
// batch and sequence length, warm-started from the old plan's replicas that survive whole
// (tune/replan.h). Prints the old plan's throughput against the new one's, the survivors as they
// were, and what each device holds before and after; writes the new plan with --out.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "cost_options.h"
#include "format.h"
#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/core/output_files.h"
#include "motley/plan/plan_json.h"
#include "motley/tune/replan.h"
#include "option_checks.h"
#include "output_options.h"
#include "tune_options.h"

namespace motley::cli {
namespace {

struct ReplanCliOptions {
  std::string plan;
  std::string cluster;
  std::vector<std::string> lost;
  std::string gained;
  std::string out;
  bool json = false;
  double time_budget = 1;
  std::optional<int64_t> max_plans;
  uint64_t seed = 1;
  int threads = 2;
};

// The cluster the new plan is for, and how it differs from the plan's, in words.
Result<std::pair<ClusterSpec, std::string>> new_cluster(const ReplanCliOptions& opt,
                                                        const ClusterSpec& old) {
  const int given = !opt.cluster.empty() + !opt.lost.empty() + !opt.gained.empty();
  if (given != 1) {
    return invalid_argument(
        "replan: give exactly one of --cluster NEW, --lost NODE... and --gained FILE");
  }
  if (!opt.lost.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(ClusterSpec c, cluster_without(old, opt.lost));
    return std::pair{c, fmt::format("less {}", fmt::join(opt.lost, ", "))};
  }
  if (!opt.gained.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(ClusterSpec more, load_cluster(opt.gained));
    MOTLEY_ASSIGN_OR_RETURN(ClusterSpec c, cluster_with(old, more));
    return std::pair{c, fmt::format("with the nodes of {}", opt.gained)};
  }
  MOTLEY_ASSIGN_OR_RETURN(ClusterSpec c, load_cluster(opt.cluster));
  return std::pair{c, fmt::format("replaced by {}", opt.cluster)};
}

// Whether two devices print as one row: one node and type, the same layers before and after.
bool same_row(const DeviceChange& a, const DeviceChange& b) {
  return a.node == b.node && a.type == b.type && a.old_layers == b.old_layers &&
         a.new_layers == b.new_layers && (a.old_device < 0) == (b.old_device < 0) &&
         (a.new_device < 0) == (b.new_device < 0);
}

Json device_json(const DeviceChange& d) {
  Json j{{"node", d.node},
         {"index_in_node", d.index_in_node},
         {"type", d.type},
         {"old_layers", layer_ranges(d.old_layers)},
         {"new_layers", d.new_device < 0 ? "gone" : layer_ranges(d.new_layers)},
         {"arriving_layers", layer_ranges(d.arriving_layers())}};
  if (d.old_device >= 0) j["old_device"] = d.old_device;
  if (d.new_device >= 0) j["new_device"] = d.new_device;
  return j;
}

Status replan_command(const ReplanCliOptions& opt) {
  MOTLEY_RETURN_IF_ERROR(check_output_options({{"--out", opt.out}}));
  MOTLEY_ASSIGN_OR_RETURN(const PlanInputs in, load_plan_inputs(opt.plan));
  MOTLEY_ASSIGN_OR_RETURN(auto changed, new_cluster(opt, in.cluster));
  const ClusterSpec& cluster = changed.first;
  ReplanOptions options;
  options.tune.time_budget = Seconds(opt.time_budget);
  options.tune.max_evaluations = opt.max_plans.value_or(0);
  options.tune.seed = opt.seed;
  options.tune.threads = opt.threads;
  if (in.plan.zero_stage > 0) options.tune.zero_stage = in.plan.zero_stage;
  // Priced as the old plan was, with or without the optimizer step.
  options.tune.optimizer_step = plan_optimizer_step(in.plan);
  // The new plan is priced, and recorded, with the stack the old one was.
  MOTLEY_ASSIGN_OR_RETURN(options.tune.stack,
                          resolve_plan_stack(StackChoice{}, in.plan, in.cluster, opt.plan));
  MOTLEY_ASSIGN_OR_RETURN(ReplanResult r, replan(in.plan, in.model, in.cluster, cluster, options));
  record_stack(*options.tune.stack, &r.tuned.plan);
  const Plan& plan = r.tuned.plan;
  OutputFiles files;
  if (!opt.out.empty()) files.add(opt.out, plan_to_text(plan, in.model, cluster));

  const double new_tokens = r.tuned.simulation.throughput_tokens_per_s;
  const double change = new_tokens / r.old_tokens_per_s - 1;
  const StrategyOutcome* kept = r.tuned.warm_starts.empty() ? nullptr : &r.tuned.warm_starts[0];
  std::string text;
  if (opt.json) {
    Json devices = Json::array();
    for (const DeviceChange& d : r.devices) devices.push_back(device_json(d));
    Json j{{"model", in.model.name},
           {"old_cluster_devices", cluster_devices(in.cluster).size()},
           {"new_cluster_devices", cluster_devices(cluster).size()},
           {"change", changed.second},
           {"global_batch", plan.global_batch},
           {"old_iteration_time_s", r.old_iteration_time.value()},
           {"old_throughput_tokens_per_s", r.old_tokens_per_s},
           {"iteration_time_s", r.tuned.simulation.iteration_time.value()},
           {"throughput_tokens_per_s", new_tokens},
           {"throughput_change", change},
           {"surviving_replicas", r.surviving_replicas},
           {"old_replicas", r.old_replicas},
           {"replicas", plan.replicas.size()},
           {"stages", plan.stages.size()},
           {"schedule", plan.schedule},
           {"search_time_s", r.tuned.search_time.value()},
           {"replan_time_s", r.replan_time.value()},
           {"candidates_evaluated", r.tuned.candidates_evaluated},
           {"devices", devices}};
    if (kept != nullptr && kept->feasible) {
      j["survivors_iteration_time_s"] = kept->iteration_time.value();
      j["survivors_throughput_tokens_per_s"] = kept->tokens_per_s;
    }
    if (!opt.out.empty()) j["plan"] = opt.out;
    text = j.dump(2) + "\n";
  } else {
    text += fmt::format(
        "replan of {} for {}: cluster '{}' {} ({} -> {} devices), global batch {} x {} tokens\n",
        opt.plan, in.model.name, in.cluster.name, changed.second,
        cluster_devices(in.cluster).size(), cluster_devices(cluster).size(), plan.global_batch,
        plan.seq_len);
    text += fmt::format("old plan on the old cluster: {} per iteration, {} tokens/s\n",
                        format_time(r.old_iteration_time), format_count(r.old_tokens_per_s));
    if (!r.warm_started) {
      text += fmt::format("survivors: none of the {} replicas is whole; searched afresh\n",
                          r.old_replicas);
    } else if (kept != nullptr && kept->feasible) {
      text += fmt::format(
          "survivors as they were ({} of {} replicas, the global batch spread over "
          "them): {} per iteration, {} tokens/s\n",
          r.surviving_replicas, r.old_replicas, format_time(kept->iteration_time),
          format_count(kept->tokens_per_s));
    } else if (kept != nullptr) {
      text += fmt::format("survivors as they were ({} of {} replicas): {}\n", r.surviving_replicas,
                          r.old_replicas, kept->detail);
    }
    text += fmt::format(
        "new plan: {} per iteration, {} tokens/s ({:+.1f}% against the old plan), {} replicas x "
        "{} stages, {}; searched {} plans, replanned in {}\n\n",
        format_time(r.tuned.simulation.iteration_time), format_count(new_tokens), 100 * change,
        plan.replicas.size(), plan.stages.size(), plan.schedule, r.tuned.candidates_evaluated,
        format_time(r.replan_time));
    // Devices of one node that hold the same layers before and after share a row.
    Table table({"devices", "old layers", "new layers", "reads from the checkpoint"});
    for (size_t i = 0; i < r.devices.size();) {
      const DeviceChange& d = r.devices[i];
      size_t j = i + 1;
      while (j < r.devices.size() && same_row(r.devices[j], d) &&
             r.devices[j].index_in_node == r.devices[j - 1].index_in_node + 1) {
        ++j;
      }
      const std::string indices =
          j == i + 1 ? std::to_string(d.index_in_node)
                     : fmt::format("{}-{}", d.index_in_node, r.devices[j - 1].index_in_node);
      table.add_row({fmt::format("{}/{} ({})", d.node, indices, d.type), layer_ranges(d.old_layers),
                     d.new_device < 0 ? "gone" : layer_ranges(d.new_layers),
                     d.new_device < 0 ? "-" : layer_ranges(d.arriving_layers())});
      i = j;
    }
    text += table.to_string();
    if (!opt.out.empty()) text += "wrote " + opt.out + "\n";
  }
  MOTLEY_RETURN_IF_ERROR(files.commit());
  std::fputs(text.c_str(), stdout);
  return Status::ok();
}

}  // namespace

void add_replan_command(CLI::App& app, Action* action) {
  auto opt = std::make_shared<ReplanCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "replan", "A new plan for the devices that remain or arrive, warm-started from the old one");
  cmd->add_option("--plan", opt->plan, "The plan to replan (it carries its model and cluster)")
      ->required();
  cmd->add_option("--cluster", opt->cluster, "The whole new cluster (preset or YAML file)");
  cmd->add_option("--lost", opt->lost,
                  "Nodes lost or preempted, by name (several: NODE NODE or "
                  "NODE,NODE)")
      ->delimiter(',');
  cmd->add_option("--gained", opt->gained,
                  "A cluster YAML of the nodes that arrive (kept after the plan's nodes)");
  cmd->add_option("--out", opt->out, "Write the new plan (with its model and cluster) here");
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->add_option("--time-budget", opt->time_budget, "Search time limit in seconds")
      ->check(positive_number(kMaxOptionSeconds))
      ->capture_default_str();
  add_search_limits(cmd, &opt->max_plans, &opt->seed, &opt->threads);
  cmd->callback([opt, action] { *action = [opt] { return replan_command(*opt); }; });
}

}  // namespace motley::cli
