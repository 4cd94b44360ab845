// `motley compare`: plans a model on a cluster with motley and with every baseline, all priced
// by the same simulator under the same memory limits, and prints one row per strategy (tokens/s,
// speedup over megatron-1f1b, efficiency against the lower bound, cost, search time).
// Optionally writes every strategy's plan into a directory (checked before the search, created
// if missing), all plans or none, once everything succeeded.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "cost_options.h"
#include "format.h"
#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/core/output_files.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/model/model_json.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/plan_workload.h"
#include "motley/report/explanation.h"
#include "motley/sim/simulator.h"
#include "motley/tune/tune.h"
#include "output_options.h"
#include "report_command.h"
#include "tune_options.h"

namespace motley::cli {
namespace {

struct CompareOptions {
  TuneCliOptions tune;
  std::string out_dir;
  std::string html;  // the comparison as an HTML page (report_command.h)
  bool json = false;
};

Status compare_command(const CompareOptions& opt) {
  if (!opt.out_dir.empty()) {
    MOTLEY_RETURN_IF_ERROR(check_output_directory("--out-dir", opt.out_dir));
  }
  MOTLEY_RETURN_IF_ERROR(check_output_options({{"--html", opt.html}}));
  MOTLEY_ASSIGN_OR_RETURN(TuneSetup setup, prepare_tune(opt.tune));
  setup.options.report_baselines = true;
  MOTLEY_ASSIGN_OR_RETURN(TuneResult r, tune_with_progress(setup, opt.tune.quiet));
  const ModelSpec& model = setup.model;
  const ClusterSpec& cluster = setup.cluster;
  const TuneOptions& options = setup.options;
  const int64_t devices = static_cast<int64_t>(cluster_devices(cluster).size());

  // motley first, then the baselines, as one list.
  std::vector<StrategyOutcome> rows;
  const std::vector<std::string> explanation = explanation_lines(r.explanation);
  const StrategyOutcome mine = motley_outcome(r, explanation.front());
  rows.push_back(mine);
  rows.insert(rows.end(), r.baselines.begin(), r.baselines.end());
  double megatron = 0, tuned = 0;  // megatron-1f1b's and megatron-tuned's iterations
  for (const StrategyOutcome& b : r.baselines) {
    if (b.strategy == "megatron-1f1b" && b.feasible) megatron = b.iteration_time.value();
    if (b.strategy == "megatron-tuned" && b.feasible) tuned = b.iteration_time.value();
  }

  // Bubble fraction and the fullest device's memory of every feasible plan, from one more
  // simulation of each (the outcomes carry times only).
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<ReportStrategy> shapes,
                          report_strategies(rows, model, cluster, opt.tune.stack));
  std::string out;
  if (opt.json) {
    Json list = Json::array();
    for (size_t i = 0; i < rows.size(); ++i) {
      const StrategyOutcome& b = rows[i];
      Json j{{"name", b.strategy}, {"feasible", b.feasible}, {"detail", b.detail}};
      if (b.not_run) j["not_run"] = true;
      if (b.feasible) {
        j["bubble_fraction"] = shapes[i].bubble_fraction;
        j["peak_memory_ratio"] = shapes[i].peak_memory_ratio;
        j["iteration_time_s"] = b.iteration_time.value();
        j["throughput_tokens_per_s"] = b.tokens_per_s;
        j["efficiency"] = r.lower_bound.value() / b.iteration_time.value();
        j["dollars_per_million_tokens"] = b.dollars_per_million_tokens;
        j["on_demand_dollars_per_million_tokens"] = b.on_demand_dollars_per_million_tokens;
        j["preemption"] = preemption_json(b.preemption);
        if (megatron > 0) j["speedup_over_megatron_1f1b"] = megatron / b.iteration_time.value();
        if (tuned > 0) j["speedup_over_megatron_tuned"] = tuned / b.iteration_time.value();
        j["search_time_s"] = b.search_time.value();
        if (!opt.out_dir.empty()) j["plan"] = opt.out_dir + "/" + b.strategy + ".json";
      }
      list.push_back(j);
    }
    Json j{{"model", model.name},
           {"cluster", cluster.name},
           {"devices", devices},
           {"global_batch", options.global_batch},
           {"objective", tune_objective_name(options.objective)},
           {"lower_bound_s", r.lower_bound.value()},
           {"constraints", constraints_json(options.constraints)},
           {"strategies", list}};
    out = j.dump(2) + "\n";
  } else {
    out += fmt::format("{} on {} ({} devices), global batch {}{}: lower bound {} per iteration\n\n",
                       model.name, cluster.name, devices, options.global_batch,
                       options.constraints.any()
                           ? ", within " + describe_constraints(options.constraints)
                           : std::string(),
                       format_time(r.lower_bound));
    // With nodes that can be interrupted: the expected cost on the cluster as it is (spot
    // prices, interruptions priced), the cost bought on demand, and the goodput.
    const bool spot = cluster_interruptible(cluster);
    std::vector<std::string> header = {
        "strategy",    "iteration",        "tokens/s",          "bubble",
        "peak memory", "vs megatron-1f1b", "vs megatron-tuned", "efficiency"};
    if (spot) {
      header.insert(header.end(), {"goodput", "$/M tokens", "$/M on demand"});
    } else {
      header.push_back("$/M tokens");
    }
    header.push_back("search");
    Table table(header);
    for (size_t i = 0; i < rows.size(); ++i) {
      const StrategyOutcome& b = rows[i];
      if (!b.feasible) {
        std::vector<std::string> row = {b.strategy, b.not_run ? "not run" : "infeasible"};
        row.resize(header.size() - 1, "-");
        row.push_back(format_time(b.search_time));
        table.add_row(row);
        continue;
      }
      std::vector<std::string> row = {
          b.strategy,
          format_time(b.iteration_time),
          format_count(b.tokens_per_s),
          format_percent(shapes[i].bubble_fraction),
          format_percent(shapes[i].peak_memory_ratio),
          megatron > 0 ? fmt::format("{:.2f}x", megatron / b.iteration_time.value())
                       : std::string("-"),
          tuned > 0 ? fmt::format("{:.2f}x", tuned / b.iteration_time.value()) : std::string("-"),
          fmt::format("{:.3f}", r.lower_bound.value() / b.iteration_time.value())};
      if (spot) row.push_back(format_percent(b.preemption.goodput));
      row.push_back(format_money(b.dollars_per_million_tokens));
      if (spot) row.push_back(format_money(b.on_demand_dollars_per_million_tokens));
      row.push_back(format_time(b.search_time));
      table.add_row(row);
    }
    out += table.to_string() + "\n";
    out += preemption_line(r.preemption, r.dollars_per_million_tokens,
                           r.on_demand_dollars_per_million_tokens);
    if (spot) out += "\n";
    for (const StrategyOutcome& b : rows) {
      out += b.strategy + ": " + (b.strategy == "motley" ? std::string() : b.detail) + "\n";
      if (b.strategy == "motley") {
        for (const std::string& line : explanation) out += "  " + line + "\n";
      }
    }
    out += not_run_hint(r.baselines);
    out +=
        "\nmotley may return any plan it evaluated, the baselines' included, so it is never "
        "slower than they are.\n";
  }
  OutputFiles files;
  if (!opt.html.empty()) {
    // The page draws motley's plan, simulated once more with its timeline, and every row.
    MOTLEY_ASSIGN_OR_RETURN(
        const PlanReport report,
        prepare_plan_report(r.plan, model, model, cluster, opt.tune.stack, options.optimizer_step));
    HtmlReportInput input = html_input(report, "motley compare");
    input.title = fmt::format("{} on {}: motley against the baselines", model.name, cluster.name);
    input.lower_bound_s = r.lower_bound.value();
    input.strategies = shapes;
    files.add(opt.html, html_report(input));
  }
  if (!opt.out_dir.empty()) {
    files.add_directory(opt.out_dir);
    for (const StrategyOutcome& b : rows) {
      if (b.feasible) {
        Plan priced = b.plan;
        record_stack(*options.stack, &priced);
        files.add(opt.out_dir + "/" + b.strategy + ".json", plan_to_text(priced, model, cluster));
      }
    }
  }
  MOTLEY_RETURN_IF_ERROR(files.commit());
  std::fputs(out.c_str(), stdout);
  return Status::ok();
}

}  // namespace

void add_compare_command(CLI::App& app, Action* action) {
  auto opt = std::make_shared<CompareOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Compare motley's plan with the baselines (Megatron-LM, ZB, Metis, ...)");
  add_tune_options(cmd, &opt->tune);
  cmd->add_option("--out-dir", opt->out_dir, "Write every strategy's plan as DIR/<strategy>.json");
  cmd->add_option("--html", opt->html,
                  "Write the comparison as one self-contained HTML page (motley's plan drawn, "
                  "every strategy as a bar)");
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->callback([opt, action] { *action = [opt] { return compare_command(*opt); }; });
}

}  // namespace motley::cli
