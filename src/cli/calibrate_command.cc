// `motley calibrate`: prices published (or measured) end-to-end training runs — each a model, a
// cluster and the exact layout it ran with — and measured layer passes under a software stack,
// prints predicted against measured time per case, and with --fit fits the stack's parameters to
// them (bounded least squares on ln(predicted / measured)), writing a calibration file that plan,
// compare and simulate accept (--calibration). The cases file format is docs/calibration.md's.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "cost_options.h"
#include "motley/calibrate/stack_fit.h"
#include "motley/cluster/cluster.h"
#include "motley/core/enum_names.h"
#include "motley/core/json.h"
#include "motley/core/output_files.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/model/model_json.h"
#include "motley/plan/plan_workload.h"
#include "motley/plan/validate.h"
#include "motley/schedule/uniform_plan.h"
#include "motley/sim/simulator.h"
#include "output_options.h"

namespace motley::cli {
namespace {

inline constexpr const char* kCasesFormat = "calibration-cases/1";

struct CalibrateOptions {
  std::vector<std::string> cases;
  StackChoice stack;
  std::string fit;  // comma-separated parameter names, or "all"; empty: evaluate only
  std::string out;
  bool json = false;
};

// What a case measured: a whole iteration, or one layer's forward or backward pass.
enum class Metric { kIteration, kLayerForward, kLayerBackward };
constexpr const char* kMetricNames[] = {"iteration_time_s", "layer_forward_s", "layer_backward_s"};

// One measurement, ready to price: its model and cluster, and for an iteration the plan (which
// depends on the layout only, not on the stack being fitted); for a layer, the layer and how it
// ran (on the first `tp` devices of the cluster's first node).
struct Case {
  std::string id;
  std::string file;
  Metric metric = Metric::kIteration;
  double published_s = 0;
  ModelSpec model;
  ClusterSpec cluster;
  Plan plan;
  int layer = -1;
  int tp = 1;
  RecomputePolicy recompute = RecomputePolicy::kNone;
  bool sequence_parallel = false;
  Workload workload;
};

Result<int64_t> case_int(const JsonField& c, std::string_view key, int64_t fallback) {
  return c.get_int_in_or(key, IntRange{1, 1 << 24}, fallback);
}

Result<std::optional<RecomputePolicy>> case_recompute(const JsonField& c) {
  MOTLEY_ASSIGN_OR_RETURN(std::string name, c.get_string_or("recompute", "none"));
  std::optional<RecomputePolicy> recompute = parse_recompute_policy(name);
  if (!recompute) {
    return c.child_error(
        "recompute",
        fmt::format("expected {}, got \"{}\"", join_alternatives(recompute_policy_names()), name));
  }
  return recompute;
}

// A layer case: `layer` names one of the model's layers; its pass is priced on the first `tp`
// devices of the cluster's first node. The backward includes what the recompute policy repeats.
Status parse_layer_case(const JsonField& c, Case& out) {
  MOTLEY_RETURN_IF_ERROR(
      c.check_keys({"id", "model", "cluster", "layer", "tp", "micro_batch_size", "seq_len",
                    "recompute", "sequence_parallel", "metric", "published", "note", "source"}));
  MOTLEY_ASSIGN_OR_RETURN(std::string layer, c.get_string("layer"));
  for (size_t i = 0; i < out.model.layers.size(); ++i) {
    if (out.model.layers[i].name == layer) out.layer = static_cast<int>(i);
  }
  if (out.layer < 0) {
    return c.child_error("layer",
                         fmt::format("the model {} has no layer \"{}\"", out.model.name, layer));
  }
  MOTLEY_ASSIGN_OR_RETURN(int64_t tp, case_int(c, "tp", 1));
  // The group: the cluster's first tp devices, which must share a node and a type.
  const std::vector<Device> devices = cluster_devices(out.cluster);
  int64_t local = 0;
  while (local < static_cast<int64_t>(devices.size()) && devices[local].node == devices[0].node &&
         devices[local].type == devices[0].type) {
    ++local;
  }
  if (tp > local) {
    return c.child_error("tp", fmt::format("{} devices; the cluster's first node has {} of its "
                                           "first device type",
                                           tp, local));
  }
  out.tp = static_cast<int>(tp);
  MOTLEY_ASSIGN_OR_RETURN(int64_t mbs, case_int(c, "micro_batch_size", 1));
  MOTLEY_ASSIGN_OR_RETURN(int64_t seq_len, case_int(c, "seq_len", out.model.default_seq_len));
  out.workload = Workload{seq_len, mbs, out.model.dtype, out.model.dropout};
  MOTLEY_ASSIGN_OR_RETURN(std::optional<RecomputePolicy> recompute, case_recompute(c));
  out.recompute = *recompute;
  MOTLEY_ASSIGN_OR_RETURN(out.sequence_parallel, c.get_bool_or("sequence_parallel", false));
  return Status::ok();
}

Result<Case> parse_case(const JsonField& c, const std::filesystem::path& dir) {
  Case out;
  out.file = c.source();
  MOTLEY_ASSIGN_OR_RETURN(out.id, c.get_string("id"));
  MOTLEY_ASSIGN_OR_RETURN(std::string metric, c.get_string_or("metric", kMetricNames[0]));
  std::optional<Metric> parsed = parse_name_in<Metric>(kMetricNames, metric);
  if (!parsed) {
    return c.child_error("metric", fmt::format("expected {}, got \"{}\"",
                                               join_alternatives(names_in(kMetricNames)), metric));
  }
  out.metric = *parsed;
  // A nanosecond to 10^7 seconds (four months): errors against anything smaller or larger
  // printed as numbers of hundreds of digits.
  MOTLEY_ASSIGN_OR_RETURN(out.published_s, c.get_double_in("published", 1e-9, 1e7));
  auto resolve = [&](const std::string& p) {
    const std::filesystem::path path(p);
    return path.is_absolute() || !std::filesystem::exists(dir / path) ? p : (dir / path).string();
  };
  MOTLEY_ASSIGN_OR_RETURN(std::string model_path, c.get_string("model"));
  MOTLEY_ASSIGN_OR_RETURN(std::string cluster_path, c.get_string("cluster"));
  Result<ModelSpec> model = load_model(resolve(model_path));
  if (!model.is_ok()) return c.child_error("model", model.status().message());
  out.model = std::move(model).value();
  Result<ClusterSpec> cluster = load_cluster(resolve(cluster_path));
  if (!cluster.is_ok()) return c.child_error("cluster", cluster.status().message());
  out.cluster = std::move(cluster).value();
  if (out.metric != Metric::kIteration) {
    MOTLEY_RETURN_IF_ERROR(parse_layer_case(c, out));
    return out;
  }
  MOTLEY_RETURN_IF_ERROR(c.check_keys({"id",
                                       "model",
                                       "cluster",
                                       "gpus",
                                       "tp",
                                       "pp",
                                       "dp",
                                       "cp",
                                       "ep",
                                       "global_batch",
                                       "micro_batch_size",
                                       "seq_len",
                                       "schedule",
                                       "virtual_stages",
                                       "recompute",
                                       "recompute_layers",
                                       "partition",
                                       "rank_order",
                                       "zero1",
                                       "zero_stage",
                                       "sequence_parallel",
                                       "metric",
                                       "published",
                                       "note",
                                       "flops",
                                       "source",
                                       "config_source"}));
  MOTLEY_ASSIGN_OR_RETURN(int64_t tp, case_int(c, "tp", 1));
  MOTLEY_ASSIGN_OR_RETURN(int64_t pp, case_int(c, "pp", 1));
  MOTLEY_ASSIGN_OR_RETURN(int64_t dp, case_int(c, "dp", 1));
  // Megatron's layout: tp x pp x cp x dp devices, each of the dp replicas' sequences split over
  // cp of them; motley counts every member of a context group as a replica.
  MOTLEY_ASSIGN_OR_RETURN(int64_t cp, case_int(c, "cp", 1));
  // Megatron's --expert-model-parallel-size: the routed experts split over ep of the replicas.
  MOTLEY_ASSIGN_OR_RETURN(int64_t ep, case_int(c, "ep", 1));
  MOTLEY_ASSIGN_OR_RETURN(int64_t mbs, case_int(c, "micro_batch_size", 1));
  MOTLEY_ASSIGN_OR_RETURN(int64_t global_batch, c.get_int_in("global_batch", IntRange{1, 1 << 24}));
  MOTLEY_ASSIGN_OR_RETURN(int64_t seq_len, case_int(c, "seq_len", out.model.default_seq_len));
  MOTLEY_ASSIGN_OR_RETURN(int64_t virtual_stages, case_int(c, "virtual_stages", 1));
  if (global_batch % (dp * mbs) != 0) {
    return c.child_error(
        "global_batch",
        fmt::format("{} is not a multiple of dp x micro_batch_size = {}", global_batch, dp * mbs));
  }
  const int64_t devices = static_cast<int64_t>(cluster_devices(out.cluster).size());
  // (In double: four factors of up to 2^24 overflow 64 bits.)
  const double wanted = static_cast<double>(tp) * static_cast<double>(pp) *
                        static_cast<double>(cp) * static_cast<double>(dp);
  if (wanted > static_cast<double>(devices)) {
    return c.child_error(
        "gpus", fmt::format("tp x pp x cp x dp = {} devices, the cluster has {}", wanted, devices));
  }
  MOTLEY_ASSIGN_OR_RETURN(std::string schedule, c.get_string_or("schedule", "1f1b"));
  std::optional<ScheduleKind> kind = parse_schedule_kind(schedule);
  if (!kind) {
    return c.child_error(
        "schedule",
        fmt::format("expected {}, got \"{}\"", join_alternatives(schedule_kind_names()), schedule));
  }
  MOTLEY_ASSIGN_OR_RETURN(std::optional<RecomputePolicy> recompute, case_recompute(c));
  // Megatron-LM's --recompute-num-layers with the block method: the first layers of every
  // stage recomputed in full, the others keeping their activations.
  MOTLEY_ASSIGN_OR_RETURN(const int64_t recompute_layers,
                          c.get_int_in_or("recompute_layers", IntRange{0, 1 << 20}, 0));
  if (recompute_layers > 0 && *recompute != RecomputePolicy::kNone) {
    return c.child_error(
        "recompute_layers",
        fmt::format("{} layers recomputed per stage leave the others' activations; "
                    "it needs \"recompute\": \"none\", got \"{}\"",
                    recompute_layers, recompute_policy_name(*recompute)));
  }
  MOTLEY_ASSIGN_OR_RETURN(std::string partition_name, c.get_string_or("partition", "megatron"));
  std::optional<LayerSplit> partition = parse_layer_split(partition_name);
  if (!partition) {
    return c.child_error(
        "partition", fmt::format("expected {}, got \"{}\"", join_alternatives(layer_split_names()),
                                 partition_name));
  }
  UniformPlanOptions u;
  u.kind = *kind;
  u.stages = static_cast<int>(pp);
  u.virtual_stages = static_cast<int>(virtual_stages);
  u.tensor_parallel = static_cast<int>(tp);
  u.data_parallel = static_cast<int>(dp * cp);
  u.context_parallel = static_cast<int>(cp);
  u.expert_parallel = static_cast<int>(ep);
  // "pipeline" (motley's default) or "megatron": UniformPlanOptions::megatron_rank_order.
  MOTLEY_ASSIGN_OR_RETURN(std::string rank_order, c.get_string_or("rank_order", "pipeline"));
  if (rank_order != "pipeline" && rank_order != "megatron") {
    return c.child_error(
        "rank_order", fmt::format("expected \"pipeline\" or \"megatron\", got \"{}\"", rank_order));
  }
  u.megatron_rank_order = rank_order == "megatron";
  u.micro_batch_size = mbs;
  u.seq_len = seq_len;
  u.micro_batches = global_batch / (dp * mbs);
  u.recompute = *recompute;
  u.recompute_layers = static_cast<int>(recompute_layers);
  u.partition = *partition;
  MOTLEY_ASSIGN_OR_RETURN(const bool zero1, c.get_bool_or("zero1", false));
  MOTLEY_ASSIGN_OR_RETURN(const int64_t zero_stage,
                          c.get_int_in_or("zero_stage", IntRange{0, 3}, zero1 ? 1 : 0));
  u.zero_stage = static_cast<int>(zero_stage);
  // Korthikanti et al.'s tables ran selective recomputation with sequence parallelism, and
  // full recomputation without; a case may say otherwise.
  MOTLEY_ASSIGN_OR_RETURN(
      u.sequence_parallel,
      c.get_bool_or("sequence_parallel", *recompute == RecomputePolicy::kSelective && tp > 1));
  AnalyticCostOptions cost_options;
  cost_options.workload = Workload{seq_len, mbs, out.model.dtype, out.model.dropout, cp};
  cost_options.sequence_parallel = u.sequence_parallel;
  MOTLEY_ASSIGN_OR_RETURN(
      std::unique_ptr<AnalyticCostModel> cost,
      AnalyticCostModel::create(out.model, out.cluster, cost_options, out.model.name));
  Result<Plan> plan = make_uniform_plan(u, out.model, out.cluster, *cost);
  if (!plan.is_ok()) return c.error(plan.status().message());
  // Checked as simulate checks a plan (expert and context groups, the global batch, no
  // deadlock), except memory: a published run is priced whether or not motley's memory model
  // would let it fit.
  ValidateOptions check;
  check.check_spec_hashes = false;
  if (Status valid = validate_plan(plan.value(), out.model, out.cluster, check); !valid.is_ok()) {
    return c.error(valid.message());
  }
  out.plan = std::move(plan).value();
  return out;
}

Result<std::vector<Case>> load_cases(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(Json doc, read_json_file(path));
  JsonField root(doc, path);
  if (!root.is_object()) return root.error("expected an object with 'format' and 'cases'");
  MOTLEY_RETURN_IF_ERROR(root.check_keys({"format", "about", "cases"}));
  MOTLEY_ASSIGN_OR_RETURN(std::string format, root.get_string("format"));
  if (format != kCasesFormat) {
    return root.child_error("format",
                            fmt::format("expected \"{}\", got \"{}\"", kCasesFormat, format));
  }
  MOTLEY_ASSIGN_OR_RETURN(JsonField cases, root.get("cases"));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> items, cases.items());
  if (items.empty()) return cases.error("expected at least one case");
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::vector<Case> out;
  for (const JsonField& item : items) {
    MOTLEY_ASSIGN_OR_RETURN(Case c, parse_case(item, dir));
    out.push_back(std::move(c));
  }
  return out;
}

// A layer case's pass under `stack`: F, or B + W + what the recompute policy repeats.
Result<double> predict_layer(const Case& c, const SoftwareStack& stack) {
  AnalyticCostOptions options;
  options.workload = c.workload;
  options.sequence_parallel = c.sequence_parallel;
  options.stack = stack;
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<AnalyticCostModel> cost,
                          AnalyticCostModel::create(c.model, c.cluster, options, c.model.name));
  DeviceGroup group;
  for (int d = 0; d < c.tp; ++d) group.devices.push_back(d);
  const ComputeTimes t = cost->compute(LayerRange{c.layer, c.layer + 1}, group, c.recompute);
  return c.metric == Metric::kLayerForward ? t.forward.value()
                                           : (t.backward() + t.recompute).value();
}

// The predicted time of every case under `stack`: its iteration, or its layer's pass.
Result<std::vector<double>> predict(const std::vector<Case>& cases, const SoftwareStack& stack) {
  std::vector<double> out;
  Simulator simulator;
  for (const Case& c : cases) {
    if (c.metric != Metric::kIteration) {
      MOTLEY_ASSIGN_OR_RETURN(double t, predict_layer(c, stack));
      out.push_back(t);
      continue;
    }
    AnalyticCostOptions options;
    options.workload = plan_workload(c.plan, c.model);
    options.sequence_parallel = c.plan.sequence_parallel;
    options.stack = stack;
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<AnalyticCostModel> cost,
                            AnalyticCostModel::create(c.model, c.cluster, options, c.model.name));
    SimOptions sim;
    sim.source = c.id;
    MOTLEY_ASSIGN_OR_RETURN(SimResult r, simulator.run(sim, c.plan, *cost));
    out.push_back(r.iteration_time.value());
  }
  return out;
}

std::vector<std::string> split_names(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

struct Errors {
  double mean_abs_pct = 0;
  double max_abs_pct = 0;
};

Errors errors_of(const std::vector<Case>& cases, const std::vector<double>& predicted) {
  Errors e;
  for (size_t i = 0; i < cases.size(); ++i) {
    const double pct = 100.0 * (predicted[i] / cases[i].published_s - 1.0);
    e.mean_abs_pct += std::abs(pct) / static_cast<double>(cases.size());
    e.max_abs_pct = std::max(e.max_abs_pct, std::abs(pct));
  }
  return e;
}

Status calibrate_command(const CalibrateOptions& opt) {
  MOTLEY_RETURN_IF_ERROR(check_output_options({{"--out", opt.out}}));
  if (!opt.out.empty() && opt.fit.empty()) {
    return invalid_argument("--out writes a fitted calibration: give --fit too");
  }
  std::vector<Case> cases;
  for (const std::string& file : opt.cases) {
    MOTLEY_ASSIGN_OR_RETURN(std::vector<Case> more, load_cases(file));
    for (Case& c : more) cases.push_back(std::move(c));
  }
  // The cases' clusters are the reference for a stack named nowhere else.
  MOTLEY_ASSIGN_OR_RETURN(SoftwareStack start, resolve_stack(opt.stack, cases.front().cluster));
  std::string base = start.name;
  if (!opt.stack.calibration.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(Calibration c, load_calibration(opt.stack.calibration));
    base = c.base;
  }

  std::vector<std::string> names;
  if (opt.fit == "all") {
    names = stack_parameter_names();
  } else {
    names = split_names(opt.fit);
  }
  MOTLEY_ASSIGN_OR_RETURN(std::vector<double> before, predict(cases, start));
  SoftwareStack fitted = start;
  std::vector<double> after = before;
  StackFitResult fit;
  if (!names.empty()) {
    StackFitOptions fit_options;
    fit_options.parameters = names;
    auto residuals = [&](const SoftwareStack& s) -> Result<std::vector<double>> {
      MOTLEY_ASSIGN_OR_RETURN(std::vector<double> p, predict(cases, s));
      std::vector<double> r;
      for (size_t i = 0; i < cases.size(); ++i) r.push_back(std::log(p[i] / cases[i].published_s));
      return r;
    };
    Result<StackFitResult> result = fit_stack(start, fit_options, residuals);
    if (!result.is_ok()) return result.status().with_context("--fit");
    fit = std::move(result).value();
    fitted = fit.stack;
    MOTLEY_ASSIGN_OR_RETURN(after, predict(cases, fitted));
  }

  const Errors e0 = errors_of(cases, before);
  const Errors e1 = errors_of(cases, after);
  Json rows = Json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    rows.push_back(Json{{"id", cases[i].id},
                        {"measured_s", cases[i].published_s},
                        {"predicted_s", after[i]},
                        {"error_pct", 100.0 * (after[i] / cases[i].published_s - 1.0)}});
  }
  OutputFiles files;
  if (!opt.out.empty()) {
    Calibration cal;
    cal.stack = fitted;
    cal.base = base;
    cal.fitted = names;
    cal.fit = Json{{"method", "bounded Levenberg-Marquardt on ln(predicted / measured)"},
                   {"cases_files", opt.cases},
                   {"cases", rows},
                   {"mean_abs_error_pct", e1.mean_abs_pct},
                   {"max_abs_error_pct", e1.max_abs_pct},
                   {"parameters_at_bound", fit.at_bound}};
    files.add(opt.out, calibration_to_json(cal).dump(1) + "\n");
  }
  std::string text;
  if (opt.json) {
    Json j{{"stack", fitted.name},
           {"cases", rows},
           {"mean_abs_error_pct", e1.mean_abs_pct},
           {"max_abs_error_pct", e1.max_abs_pct}};
    if (!names.empty()) {
      Json params = Json::object();
      for (const std::string& n : names) params[n] = stack_parameter_value(fitted, n);
      j["fitted"] = params;
      j["start_mean_abs_error_pct"] = e0.mean_abs_pct;
      j["start_max_abs_error_pct"] = e0.max_abs_pct;
    }
    text = j.dump(2) + "\n";
  } else {
    text += fmt::format("stack {}{}\n", fitted.name, names.empty() ? "" : " (fitted)");
    size_t width = 34;
    for (const Case& c : cases) width = std::max(width, c.id.size() + 1);
    text += fmt::format("{:<{}} {:>11} {:>11} {:>8}", "case", width, "measured_s", "predicted_s",
                        "error");
    if (!names.empty()) text += fmt::format(" {:>11}", "start_error");
    text += "\n";
    for (size_t i = 0; i < cases.size(); ++i) {
      text += fmt::format("{:<{}} {:>11.4g} {:>11.4g} {:>+7.1f}%", cases[i].id, width,
                          cases[i].published_s, after[i],
                          100.0 * (after[i] / cases[i].published_s - 1.0));
      if (!names.empty()) {
        text += fmt::format(" {:>+10.1f}%", 100.0 * (before[i] / cases[i].published_s - 1.0));
      }
      text += "\n";
    }
    text += fmt::format("mean |error| {:.1f}%, max {:.1f}%", e1.mean_abs_pct, e1.max_abs_pct);
    if (!names.empty()) {
      text += fmt::format(" (from {:.1f}% and {:.1f}%; {} iterations, {} evaluations)",
                          e0.mean_abs_pct, e0.max_abs_pct, fit.iterations, fit.evaluations);
    }
    text += "\n";
    for (const std::string& n : names) {
      const bool bound =
          std::find(fit.at_bound.begin(), fit.at_bound.end(), n) != fit.at_bound.end();
      text +=
          fmt::format("  {:<30} {:>10.4g} (from {:.4g}){}\n", n, stack_parameter_value(fitted, n),
                      stack_parameter_value(start, n), bound ? " at its bound" : "");
    }
  }
  MOTLEY_RETURN_IF_ERROR(files.commit());
  std::fputs(text.c_str(), stdout);
  return Status::ok();
}

}  // namespace

void add_calibrate_command(CLI::App& app, Action* action) {
  auto opt = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Price measured training runs under a software stack and fit its parameters to them");
  cmd->add_option("--cases", opt->cases,
                  "Cases files (calibration-cases/1): runs with their model, cluster, layout "
                  "and measured iteration time, or layers with their measured pass")
      ->required();
  add_stack_options(cmd, &opt->stack);
  cmd->add_option("--fit", opt->fit,
                  "Stack parameters to fit, comma-separated, or 'all' (" +
                      join_alternatives(stack_parameter_names()) + ")");
  cmd->add_option("--out", opt->out, "Write the fitted calibration file");
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->callback([opt, action] { *action = [opt] { return calibrate_command(*opt); }; });
}

}  // namespace motley::cli
