// `motley report`: a plan as one self-contained HTML page (report/html_report.h): its simulated
// timeline, layout, devices and cost; with --trace, a measured run of the plan drawn beside the
// simulation with the error per device; with --compare, the strategies motley compare weighs.
// The page's path is checked before any work and written only once everything succeeded.
#include "report_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "measured_trace.h"
#include "motley/calibrate/fidelity.h"
#include "motley/core/output_files.h"
#include "motley/exec/rank_layout.h"
#include "motley/model/layer_cost.h"
#include "motley/plan/plan_json.h"
#include "motley/report/units_format.h"
#include "motley/sim/simulator.h"
#include "motley/tune/preemption.h"
#include "motley/tune/tune.h"
#include "option_checks.h"
#include "output_options.h"
#include "tune_options.h"

namespace motley::cli {

Result<PlanReport> prepare_plan_report(Plan plan, ModelSpec model, ModelSpec priced,
                                       ClusterSpec cluster, const StackChoice& stack,
                                       bool optimizer_step) {
  PlanReport r;
  MOTLEY_ASSIGN_OR_RETURN(AnalyticCostOptions cost_options,
                          plan_cost_options(plan, priced, cluster, stack, "the plan"));
  MOTLEY_ASSIGN_OR_RETURN(r.cost,
                          AnalyticCostModel::create(priced, cluster, cost_options, priced.name));
  SimOptions sim;
  sim.record_timeline = true;
  if (!optimizer_step) sim.optimizer_step = OptimizerStepModel::kNone;
  MOTLEY_ASSIGN_OR_RETURN(r.result, simulate(sim, plan, *r.cost));

  TuneOptions bound;
  bound.optimizer_step = optimizer_step;
  bound.global_batch = plan.global_batch;
  bound.seq_len = plan.seq_len;
  bound.micro_batch_size = plan.micro_batch_size;
  if (plan.zero_stage > 0) bound.zero_stage = plan.zero_stage;
  bound.stack = cost_options.stack;
  Result<Seconds> lower = iteration_lower_bound(bound, priced, cluster);
  if (lower.is_ok()) r.lower_bound = *lower;

  const PlanPricing pricing = price_plan(plan, *r.cost, cluster, r.result.iteration_time);
  r.prices.dollars_per_hour = pricing.dollars_per_hour;
  r.prices.on_demand_dollars_per_hour = pricing.on_demand_dollars_per_hour;
  r.prices.dollars_per_million_tokens = pricing.dollars_per_million_tokens;
  r.prices.on_demand_dollars_per_million_tokens = pricing.on_demand_dollars_per_million_tokens;
  r.prices.interruptible = pricing.preemption.interruptible();
  r.prices.goodput = pricing.preemption.goodput;
  if (r.prices.interruptible) {
    r.prices.mean_hours_between_interruptions =
        pricing.preemption.mean_time_between_interruptions.value() / 3600.0;
    r.prices.checkpoint_interval_s = pricing.preemption.interval.value();
  }
  for (const Layer& layer : model.layers) {
    r.layers.push_back(ReportLayer{layer.name, layer_kind_name(layer.kind),
                                   static_cast<double>(layer_params(layer))});
  }
  r.plan = std::move(plan);
  r.model = std::move(model);
  r.priced = std::move(priced);
  r.cluster = std::move(cluster);
  return r;
}

HtmlReportInput html_input(const PlanReport& report, std::string generator) {
  HtmlReportInput in;
  in.generator = std::move(generator);
  in.plan = &report.plan;
  in.result = &report.result;
  in.topology = &report.cost->topology();
  in.layers = report.layers;
  if (report.lower_bound) in.lower_bound_s = report.lower_bound->value();
  in.cost = report.prices;
  return in;
}

namespace {

struct ReportOptions {
  std::string plan;
  std::string profile;  // prices the plan instead of its model, layer for layer
  std::string trace;
  int warmup = 1;
  bool compare = false;
  double time_budget = 8;
  std::optional<int64_t> max_plans;
  uint64_t seed = 1;
  int threads = 2;
  StackChoice stack;
  std::string html;
};

TimelineKind drawn_kind(MeasuredKind kind) {
  switch (kind) {
    case MeasuredKind::kForward:
      return TimelineKind::kForward;
    case MeasuredKind::kBackwardInput:
      return TimelineKind::kBackwardInput;
    case MeasuredKind::kBackwardWeight:
      return TimelineKind::kBackwardWeight;
    case MeasuredKind::kBackward:
      return TimelineKind::kBackward;
    case MeasuredKind::kRecompute:
      return TimelineKind::kRecompute;
    case MeasuredKind::kOptimizer:
      return TimelineKind::kOptimizerStep;
    case MeasuredKind::kAllReduceWait:
      return TimelineKind::kAllReduce;
    case MeasuredKind::kInputWait:
    case MeasuredKind::kSendPost:
    case MeasuredKind::kSendWait:
      break;
  }
  return TimelineKind::kTransfer;
}

// The measured run beside the simulation: the step whose iteration (its slowest rank) is the
// median of the steps after the warm-up, one row per device group (its first rank), each
// rank's step from its own start; and the error of the simulated step of every group.
Result<ReportMeasured> measured_report(const ReportOptions& opt, const Plan& plan,
                                       const SimResult& predicted) {
  MOTLEY_ASSIGN_OR_RETURN(const Json doc, read_json_file(opt.trace));
  const Json other = doc.is_object() ? doc.value("otherData", Json::object()) : Json::object();
  if (other.is_object() && other.contains("schedule") && other["schedule"].is_string() &&
      other["schedule"].get<std::string>() != plan.schedule) {
    return invalid_argument(fmt::format(
        "--trace {}: measured with schedule '{}', but the plan's is '{}'; give the trace of a "
        "run of this plan",
        opt.trace, other["schedule"].get<std::string>(), plan.schedule));
  }
  if (other.is_object() && other.contains("model") && other["model"].is_string() &&
      other["model"].get<std::string>() != plan.model.name) {
    return invalid_argument(
        fmt::format("--trace {}: measured on model '{}', but the plan is for '{}'", opt.trace,
                    other["model"].get<std::string>(), plan.model.name));
  }
  MOTLEY_ASSIGN_OR_RETURN(const MeasuredTrace trace,
                          measured_trace_from_chrome(doc, plan, opt.trace));
  FidelityOptions fidelity;
  fidelity.warmup_steps = opt.warmup;
  Result<FidelityReport> compared = fidelity_report(fidelity, predicted, trace);
  if (!compared.is_ok()) return compared.status().with_context("--trace " + opt.trace);
  const FidelityReport& f = *compared;

  // Steps after the warm-up by their iteration time; the median's index.
  const size_t steps = trace.ranks.front().step_times.size();
  std::vector<std::pair<double, size_t>> iterations;
  for (size_t k = static_cast<size_t>(opt.warmup); k < steps; ++k) {
    double slowest = 0;
    for (const MeasuredRank& r : trace.ranks) {
      if (k < r.step_times.size()) slowest = std::max(slowest, r.step_times[k].value());
    }
    iterations.emplace_back(slowest, k);
  }
  std::sort(iterations.begin(), iterations.end());
  const size_t step = iterations[(iterations.size() - 1) / 2].second;

  ReportMeasured m;
  m.source = opt.trace;
  m.step = fmt::format("step {} (the median of the {} after the warm-up)", step, iterations.size());
  m.iteration_s = f.iteration.measured_s;
  const RankLayout layout(plan);
  std::set<std::pair<int, int>> drawn;
  for (const MeasuredRank& r : trace.ranks) {
    if (!drawn.insert({r.replica, r.group}).second) continue;  // one row per group
    TimelineTrack track;
    track.name = fmt::format("rank {} (measured)", r.rank);
    track.replica = r.replica;
    track.group = r.group;
    track.sort_key = r.device;
    const std::vector<int>& stages = layout.stages_of(r.rank);
    track.first_stage = stages.empty() ? -1 : stages.front();
    const int id = static_cast<int>(m.timeline.tracks.size());
    m.timeline.tracks.push_back(track);
    for (const MeasuredEvent& e : r.events) {
      if (e.step != static_cast<int64_t>(step) || e.kind == MeasuredKind::kInputWait) continue;
      TimelineEvent ev;
      ev.track = id;
      ev.kind = drawn_kind(e.kind);
      ev.name = measured_kind_name(e.kind);
      ev.start = e.start;
      ev.end = e.start + e.duration;
      if (e.stage >= 0) ev.args["stage"] = e.stage;
      if (e.micro_batch >= 0) ev.args["micro_batch"] = e.micro_batch;
      const auto chunk = std::find(stages.begin(), stages.end(), e.stage);
      ev.chunk = chunk == stages.end() ? 0 : static_cast<int>(chunk - stages.begin());
      m.timeline.span = std::max(m.timeline.span, ev.end);
      m.timeline.events.push_back(std::move(ev));
    }
    if (step < r.step_times.size()) {
      m.timeline.span = std::max(m.timeline.span, r.step_times[step]);
    }
  }
  for (const DeviceFidelity& d : f.devices) {
    if (std::any_of(m.devices.begin(), m.devices.end(), [&](const ReportMeasured::DeviceError& e) {
          return e.replica == d.replica && e.group == d.group;
        })) {
      continue;
    }
    m.devices.push_back(ReportMeasured::DeviceError{d.replica, d.group, d.step.predicted_s,
                                                    d.step.measured_s, d.step.error_pct});
  }
  return m;
}

// motley's search and the baselines on the plan's model, cluster and batch shape, as rows.
Result<std::vector<ReportStrategy>> compared_strategies(const ReportOptions& opt,
                                                        const PlanReport& report) {
  TuneSetup setup{report.priced, report.cluster, TuneOptions{}};
  TuneOptions& o = setup.options;
  o.global_batch = report.plan.global_batch;
  o.seq_len = report.plan.seq_len;
  o.time_budget = Seconds(opt.time_budget);
  o.max_evaluations = opt.max_plans.value_or(0);
  o.seed = opt.seed;
  o.threads = opt.threads;
  o.report_baselines = true;
  MOTLEY_ASSIGN_OR_RETURN(o.stack, resolve_stack(opt.stack, report.cluster));
  MOTLEY_ASSIGN_OR_RETURN(TuneResult r, tune_with_progress(setup, /*quiet=*/true));
  std::vector<ReportStrategy> rows;
  ReportStrategy plan_row;
  plan_row.name = "this plan";
  plan_row.feasible = true;
  plan_row.detail = opt.plan;
  plan_row.iteration_s = report.result.iteration_time.value();
  plan_row.tokens_per_s = report.result.throughput_tokens_per_s;
  plan_row.bubble_fraction = report.result.bubble_fraction;
  for (const DeviceStats& d : report.result.devices) {
    plan_row.peak_memory_ratio = std::max(plan_row.peak_memory_ratio, d.peak_memory / d.capacity);
  }
  plan_row.dollars_per_million_tokens = report.prices.dollars_per_million_tokens;
  plan_row.on_demand_dollars_per_million_tokens =
      report.prices.on_demand_dollars_per_million_tokens;
  plan_row.goodput = report.prices.goodput;
  rows.push_back(plan_row);
  const StrategyOutcome mine =
      motley_outcome(r, "motley's search on the plan's model, cluster and batch");
  std::vector<StrategyOutcome> outcomes = {mine};
  outcomes.insert(outcomes.end(), r.baselines.begin(), r.baselines.end());
  MOTLEY_ASSIGN_OR_RETURN(std::vector<ReportStrategy> more,
                          report_strategies(outcomes, report.priced, report.cluster, opt.stack));
  rows.insert(rows.end(), more.begin(), more.end());
  return rows;
}

Status report_command(const ReportOptions& opt) {
  MOTLEY_RETURN_IF_ERROR(check_output_options({{"--html", opt.html}}));
  MOTLEY_ASSIGN_OR_RETURN(PlanInputs in, load_plan_inputs(opt.plan, PlanSpecOverrides{}));
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec priced, profile_pricing_model(opt.profile, in.model));
  {
    MOTLEY_ASSIGN_OR_RETURN(AnalyticCostOptions options,
                            plan_cost_options(in.plan, priced, in.cluster, opt.stack, opt.plan));
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<AnalyticCostModel> cost,
                            AnalyticCostModel::create(priced, in.cluster, options, priced.name));
    MOTLEY_RETURN_IF_ERROR(validate_priced_plan(in.plan, in.model, in.cluster, *cost, opt.plan));
  }
  MOTLEY_ASSIGN_OR_RETURN(
      const PlanReport report,
      prepare_plan_report(in.plan, std::move(in.model), std::move(priced), std::move(in.cluster),
                          opt.stack, plan_optimizer_step(in.plan)));
  HtmlReportInput input = html_input(report, "motley report");
  if (!opt.trace.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(input.measured, measured_report(opt, report.plan, report.result));
  }
  if (opt.compare) {
    MOTLEY_ASSIGN_OR_RETURN(input.strategies, compared_strategies(opt, report));
  }
  const std::string page = html_report(input);
  OutputFiles files;
  files.add(opt.html, page);
  MOTLEY_RETURN_IF_ERROR(files.commit());
  std::string line =
      fmt::format("{}: {} of HTML for {} ({} devices, iteration {}", opt.html,
                  format_bytes(Bytes(static_cast<double>(page.size()))), opt.plan,
                  report.result.devices.size(), format_time(report.result.iteration_time));
  if (input.measured) {
    line += fmt::format(", measured {}", format_time(Seconds(input.measured->iteration_s)));
  }
  const std::vector<int> fold =
      fold_identical_replicas(report.plan, report.result, report.cost->topology());
  int64_t folded = 0;
  for (size_t r = 0; r < fold.size(); ++r) folded += fold[r] != static_cast<int>(r) ? 1 : 0;
  if (folded > 0 && !input.measured) line += fmt::format(", {} identical replicas folded", folded);
  line += ")\n";
  std::fputs(line.c_str(), stdout);
  return Status::ok();
}

}  // namespace

Result<std::vector<ReportStrategy>> report_strategies(const std::vector<StrategyOutcome>& outcomes,
                                                      const ModelSpec& model,
                                                      const ClusterSpec& cluster,
                                                      const StackChoice& stack) {
  std::vector<ReportStrategy> rows;
  for (const StrategyOutcome& b : outcomes) {
    ReportStrategy s;
    s.name = b.strategy;
    s.feasible = b.feasible;
    s.not_run = b.not_run;
    s.detail = b.detail;
    if (b.feasible) {
      // Bubble and memory from one more simulation (the outcomes carry times only).
      MOTLEY_ASSIGN_OR_RETURN(AnalyticCostOptions options,
                              plan_cost_options(b.plan, model, cluster, stack, b.strategy));
      MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<AnalyticCostModel> cost,
                              AnalyticCostModel::create(model, cluster, options, model.name));
      SimOptions sim_options;
      if (!plan_optimizer_step(b.plan)) sim_options.optimizer_step = OptimizerStepModel::kNone;
      MOTLEY_ASSIGN_OR_RETURN(SimResult sim, simulate(sim_options, b.plan, *cost));
      s.iteration_s = b.iteration_time.value();
      s.tokens_per_s = b.tokens_per_s;
      s.bubble_fraction = sim.bubble_fraction;
      for (const DeviceStats& d : sim.devices) {
        s.peak_memory_ratio = std::max(s.peak_memory_ratio, d.peak_memory / d.capacity);
      }
      s.dollars_per_million_tokens = b.dollars_per_million_tokens;
      s.on_demand_dollars_per_million_tokens = b.on_demand_dollars_per_million_tokens;
      s.goodput = b.preemption.goodput;
    }
    rows.push_back(s);
  }
  return rows;
}

void add_report_command(CLI::App& app, Action* action) {
  auto opt = std::make_shared<ReportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Write a plan as one self-contained HTML page (timeline, layout, devices, cost)");
  cmd->footer(
      "The page opens offline in any browser: its style, script and data are inside it.\n"
      "--trace draws a measured run of the plan (motley run --trace, or motley fidelity --trace)\n"
      "under the simulated rows, with the simulated step's error per device group. --compare\n"
      "adds motley's search and the baselines on the plan's model, cluster and batch.\n"
      "Example: motley report --plan plan.json --compare --html plan.html");
  cmd->add_option("--plan", opt->plan, "The plan file")->required();
  cmd->add_option("--html", opt->html, "Write the page to this file")->required();
  cmd->add_option("--profile", opt->profile,
                  "A motley.profile file of the plan's model measured on this machine: it prices "
                  "the plan layer for layer (as motley fidelity --profile)");
  cmd->add_option("--trace", opt->trace,
                  "A measured trace of this plan (motley run --trace under motley launch)");
  cmd->add_option("--warmup", opt->warmup,
                  "With --trace: measured steps dropped from the start before the medians")
      ->check(integer_in(0, kMaxOptionCount))
      ->capture_default_str();
  cmd->add_flag("--compare", opt->compare,
                "Add the strategies compared: motley's search and the baselines");
  cmd->add_option("--time-budget", opt->time_budget, "With --compare: seconds of search")
      ->check(positive_number(kMaxOptionSeconds))
      ->capture_default_str();
  add_search_limits(cmd, &opt->max_plans, &opt->seed, &opt->threads);
  add_stack_options(cmd, &opt->stack);
  cmd->callback([opt, action] { *action = [opt] { return report_command(*opt); }; });
}

}  // namespace motley::cli
