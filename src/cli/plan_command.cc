// `motley plan`: searches for the fastest (or cheapest) plan of a model on a cluster — or builds
// one baseline's plan with --strategy — prints what it chose and why, and writes the plan file.
// The output paths are checked before the search, and the files written all or none, once
// everything succeeded.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "format.h"
#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/core/output_files.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/model/model_json.h"
#include "motley/plan/plan_json.h"
#include "motley/report/chrome_trace.h"
#include "motley/report/explanation.h"
#include "motley/report/summary.h"
#include "motley/report/svg_timeline.h"
#include "motley/sim/simulator.h"
#include "motley/tune/tune.h"
#include "output_options.h"
#include "tune_options.h"

namespace motley::cli {
namespace {

struct PlanOptions {
  TuneCliOptions tune;
  std::string strategy = "motley";
  bool exhaustive = false;
  std::string out;
  std::string trace;
  std::string svg;
  bool json = false;
};

Json outcome_json(const StrategyOutcome& b, double motley_time) {
  Json j{{"strategy", b.strategy}, {"feasible", b.feasible}, {"detail", b.detail}};
  if (b.feasible) {
    j["iteration_time_s"] = b.iteration_time.value();
    j["throughput_tokens_per_s"] = b.tokens_per_s;
    j["dollars_per_million_tokens"] = b.dollars_per_million_tokens;
    j["on_demand_dollars_per_million_tokens"] = b.on_demand_dollars_per_million_tokens;
    j["motley_speedup"] = b.iteration_time.value() / motley_time;
    j["search_time_s"] = b.search_time.value();
  }
  return j;
}

Status plan_command(const PlanOptions& opt) {
  const std::vector<std::string> strategies = tune_strategy_names();
  if (std::find(strategies.begin(), strategies.end(), opt.strategy) == strategies.end()) {
    return invalid_argument(fmt::format("--strategy: unknown strategy '{}'; expected {}",
                                        opt.strategy, join_alternatives(strategies)));
  }
  MOTLEY_RETURN_IF_ERROR(
      check_output_options({{"--out", opt.out}, {"--trace", opt.trace}, {"--svg", opt.svg}}));
  MOTLEY_ASSIGN_OR_RETURN(TuneSetup setup, prepare_tune(opt.tune));
  setup.options.strategy = opt.strategy;
  setup.options.exhaustive = opt.exhaustive;
  MOTLEY_ASSIGN_OR_RETURN(TuneResult r, tune_with_progress(setup, opt.tune.quiet));
  const ModelSpec& model = setup.model;
  const ClusterSpec& cluster = setup.cluster;
  const TuneOptions& options = setup.options;
  const int64_t devices = static_cast<int64_t>(cluster_devices(cluster).size());

  // The chosen plan simulated once more, recording its timeline, for the trace and the SVG
  // (without them, the search's own simulation of it serves the per-device summary).
  // Priced as the search priced it and as `motley simulate` prices the file: the same stack.
  MOTLEY_ASSIGN_OR_RETURN(AnalyticCostOptions cost_options,
                          plan_cost_options(r.plan, model, cluster, opt.tune.stack, "the plan"));
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<AnalyticCostModel> analytic,
                          AnalyticCostModel::create(model, cluster, cost_options, model.name));
  const AnalyticCostModel& cost = *analytic;
  SimOptions sim_options;
  sim_options.record_timeline = !opt.trace.empty() || !opt.svg.empty();
  if (!options.optimizer_step) sim_options.optimizer_step = OptimizerStepModel::kNone;
  SimResult timeline;
  if (sim_options.record_timeline) {
    MOTLEY_ASSIGN_OR_RETURN(timeline, simulate(sim_options, r.plan, cost));
  } else {
    timeline = r.simulation;
  }
  record_stack(cost_options.stack, &r.plan);
  OutputFiles files;
  if (!opt.out.empty()) files.add(opt.out, plan_to_text(r.plan, model, cluster));
  if (!opt.trace.empty()) {
    files.add(opt.trace, chrome_trace_json(r.plan, timeline, cost.topology(), TraceOptions{}));
  }
  if (!opt.svg.empty()) {
    files.add(opt.svg, svg_timeline(r.plan, timeline, cost.topology(), SvgOptions{}));
  }

  const double t = r.simulation.iteration_time.value();
  std::string out;
  if (opt.json) {
    Json baselines = Json::array();
    for (const StrategyOutcome& b : r.baselines) baselines.push_back(outcome_json(b, t));
    Json j{{"model", model.name},
           {"cluster", cluster.name},
           {"strategy", r.strategy},
           {"objective", tune_objective_name(options.objective)},
           {"global_batch", r.plan.global_batch},
           {"seq_len", r.plan.seq_len},
           {"micro_batch_size", r.plan.micro_batch_size},
           {"schedule", r.plan.schedule},
           {"stages", r.plan.stages.size()},
           {"replicas", r.plan.replicas.size()},
           {"iteration_time_s", t},
           {"throughput_tokens_per_s", r.simulation.throughput_tokens_per_s},
           {"bubble_fraction", r.simulation.bubble_fraction},
           {"dollars_per_million_tokens", r.dollars_per_million_tokens},
           {"on_demand_dollars_per_million_tokens", r.on_demand_dollars_per_million_tokens},
           {"preemption", preemption_json(r.preemption)},
           {"lower_bound_s", r.lower_bound.value()},
           {"efficiency", r.efficiency},
           {"optimizer_step", options.optimizer_step},
           {"search_time_s", r.search_time.value()},
           {"candidates_evaluated", r.candidates_evaluated},
           {"constraints", constraints_json(options.constraints)},
           {"explanation", explanation_lines(r.explanation)},
           {"baselines", baselines}};
    if (!opt.out.empty()) j["plan"] = opt.out;
    out = j.dump(2) + "\n";
  } else {
    out += fmt::format(
        "plan for {} on {} ({} devices): global batch {} x {} tokens, {}\n", model.name,
        cluster.name, devices, r.plan.global_batch, r.plan.seq_len,
        (r.strategy == "motley" ? std::string("full search") : "baseline " + r.strategy) +
            (options.constraints.any() ? " within " + describe_constraints(options.constraints)
                                       : std::string()));
    out += fmt::format(
        "{} per iteration{}, {} tokens/s, bubble {:.1f}%, {}/M tokens; {:.3f} of the lower bound "
        "({})\n",
        format_time(r.simulation.iteration_time),
        options.optimizer_step ? "" : " (without the optimizer step)",
        format_count(r.simulation.throughput_tokens_per_s), 100 * r.simulation.bubble_fraction,
        format_money(r.dollars_per_million_tokens), r.efficiency, format_time(r.lower_bound));
    out += preemption_line(r.preemption, r.dollars_per_million_tokens,
                           r.on_demand_dollars_per_million_tokens);
    out += fmt::format("searched {} plans in {}\n\n", r.candidates_evaluated,
                       format_time(r.search_time));
    for (const std::string& line : explanation_lines(r.explanation)) out += line + "\n";
    if (!r.baselines.empty()) {
      out += "\n";
      Table table({"strategy", "iteration", "tokens/s", "motley speedup", "plan"});
      for (const StrategyOutcome& b : r.baselines) {
        if (!b.feasible) {
          table.add_row({b.strategy, "-", "-", "-", b.detail});
          continue;
        }
        table.add_row({b.strategy, format_time(b.iteration_time), format_count(b.tokens_per_s),
                       fmt::format("{:.2f}x", b.iteration_time.value() / t), b.detail});
      }
      out += table.to_string();
      out += not_run_hint(r.baselines);
    }
    out += "\n" + simulation_summary(r.plan, timeline, cost.topology(), SummaryOptions{});
    for (const std::string* file : {&opt.out, &opt.svg, &opt.trace}) {
      if (!file->empty()) out += "wrote " + *file + "\n";
    }
  }
  MOTLEY_RETURN_IF_ERROR(files.commit());
  std::fputs(out.c_str(), stdout);
  return Status::ok();
}

}  // namespace

void add_plan_command(CLI::App& app, Action* action) {
  auto opt = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Search for the fastest (or cheapest) plan of a model on a cluster");
  add_tune_options(cmd, &opt->tune);
  cmd->add_option("--strategy", opt->strategy,
                  "motley, or a baseline: megatron-1f1b, megatron-tuned, megatron-interleaved, "
                  "zb-h1, zb-v, metis, partition-only, placement-only, schedule-only")
      ->capture_default_str();
  cmd->add_flag("--exhaustive", opt->exhaustive,
                "Enumerate every partition x placement x named schedule (<= 8 devices, <= 16 "
                "layers)");
  cmd->add_option("--out", opt->out, "Write the plan (with predicted metrics) to this file");
  cmd->add_option("--trace", opt->trace, "Write the plan's Chrome trace JSON (Perfetto)");
  cmd->add_option("--svg", opt->svg, "Write the plan's SVG timeline");
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->callback([opt, action] { *action = [opt] { return plan_command(*opt); }; });
}

}  // namespace motley::cli
