// `motley simulate`: simulates one training iteration of a plan file, or of a named schedule on
// a counted partition (uniform or Megatron-LM's), and prints the summary (or JSON), optionally
// writing the plan, a Chrome trace and an SVG timeline. Their paths are checked before anything
// is simulated, and they are written all or none, once everything succeeded.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "cost_options.h"
#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/core/output_files.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/model/model_json.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/plan_workload.h"
#include "motley/plan/torch_pp.h"
#include "motley/report/chrome_trace.h"
#include "motley/report/summary.h"
#include "motley/report/svg_timeline.h"
#include "motley/schedule/uniform_plan.h"
#include "motley/sim/simulator.h"
#include "motley/tune/preemption.h"
#include "option_checks.h"
#include "output_options.h"
#include "tune_options.h"

namespace motley::cli {
namespace {

struct SimulateOptions {
  std::string plan;
  std::string model;
  std::string cluster;
  std::string schedule;
  std::optional<int> stages;             // unset: the whole cluster
  std::optional<int> virtual_stages;     // unset: 2 for interleaved, zb-v and dualpipev, else 1
  std::optional<int64_t> micro_batches;  // unset: 4 per pipeline stage
  int64_t micro_batch_size = 1;
  std::optional<int64_t> seq_len;  // unset: the model's
  int tensor_parallel = 1;
  std::string recompute = "none";
  int recompute_layers = 0;  // Megatron's --recompute-num-layers with the block method
  std::string partition = "uniform";
  std::string rank_order = "pipeline";  // or "megatron": UniformPlanOptions::megatron_rank_order
  bool sequence_parallel = false;
  bool zero1 = false;  // --zero1: --zero-stage 1
  int zero_stage = 0;
  int expert_parallel = 1;
  int context_parallel = 1;
  bool vocab_parallel = false;
  int data_parallel = 0;  // 0: as many replicas as the cluster holds
  bool no_optimizer_step = false;
  bool optimizer_step = false;  // include it even where the plan was predicted without it
  StackChoice stack;
  std::string torch_pp_csv;  // the orders, from a PyTorch pipelining CSV
  std::string out;
  std::string trace;
  std::string svg;
  bool json = false;
};

// Everything a simulated plan is checked and priced against.
struct Scenario {
  ModelSpec model;
  ClusterSpec cluster;
  Plan plan;
};

Result<Scenario> scenario_from_plan_file(const SimulateOptions& opt) {
  // The plan carries what it was made for; --model and --cluster may stand in for it.
  MOTLEY_ASSIGN_OR_RETURN(PlanInputs in,
                          load_plan_inputs(opt.plan, PlanSpecOverrides{opt.model, opt.cluster}));
  if (!opt.torch_pp_csv.empty()) {
    // The structure stays the plan's; the order is the CSV's, checked by the validator below.
    MOTLEY_ASSIGN_OR_RETURN(std::string csv, read_text_file(opt.torch_pp_csv));
    MOTLEY_ASSIGN_OR_RETURN(in.plan, plan_with_torch_pp_order(in.plan, csv, opt.torch_pp_csv));
    in.plan.schedule = "torch-pp-csv";
  }
  return Scenario{std::move(in.model), std::move(in.cluster), std::move(in.plan)};
}

Result<Scenario> scenario_from_schedule(const SimulateOptions& opt) {
  Scenario s;
  auto kind = parse_schedule_kind(opt.schedule);
  if (!kind) {
    return invalid_argument(fmt::format("--schedule: unknown schedule '{}'; expected {}",
                                        opt.schedule, join_alternatives(schedule_kind_names())));
  }
  auto recompute = parse_recompute_policy(opt.recompute);
  if (!recompute) {
    return invalid_argument(fmt::format("--recompute: expected {}, got '{}'",
                                        join_alternatives(recompute_policy_names()),
                                        opt.recompute));
  }
  if (opt.recompute_layers > 0 && *recompute != RecomputePolicy::kNone) {
    return invalid_argument(fmt::format(
        "--recompute-layers {} recomputes the first layers of every stage and leaves the others' "
        "activations; it cannot be combined with --recompute {}",
        opt.recompute_layers, opt.recompute));
  }
  if (opt.rank_order != "pipeline" && opt.rank_order != "megatron") {
    return invalid_argument(
        fmt::format("--rank-order: expected pipeline or megatron, got '{}'", opt.rank_order));
  }
  auto partition = parse_layer_split(opt.partition);
  std::vector<int> layer_counts;
  if (!partition) {
    // Else layer counts per stage: "4,8,8,4".
    size_t start = 0;
    while (start <= opt.partition.size()) {
      const size_t comma = std::min(opt.partition.find(',', start), opt.partition.size());
      const std::string item = opt.partition.substr(start, comma - start);
      int count = 0;
      const auto [end, err] = std::from_chars(item.data(), item.data() + item.size(), count);
      if (item.empty() || err != std::errc() || end != item.data() + item.size() || count < 1) {
        return invalid_argument(
            fmt::format("--partition: expected {} or layer counts per stage (positive integers, "
                        "comma-separated, e.g. 4,8,8,4), got '{}'",
                        join_alternatives(layer_split_names()), opt.partition));
      }
      layer_counts.push_back(count);
      start = comma + 1;
    }
    partition = LayerSplit::kUniform;
  }
  if (opt.zero1 && opt.zero_stage > 1) {
    return invalid_argument(fmt::format(
        "--zero1 is --zero-stage 1 and contradicts --zero-stage {}; give one", opt.zero_stage));
  }
  MOTLEY_ASSIGN_OR_RETURN(s.model, load_model(opt.model.empty() ? kDefaultModel : opt.model));
  MOTLEY_ASSIGN_OR_RETURN(s.cluster,
                          load_cluster(opt.cluster.empty() ? kDefaultCluster : opt.cluster));

  UniformPlanOptions u;
  u.kind = *kind;
  u.stages = opt.stages.value_or(0);  // UniformPlanOptions' 0: the whole cluster
  bool chunked = *kind == ScheduleKind::kInterleaved || *kind == ScheduleKind::kZbV ||
                 *kind == ScheduleKind::kDualPipeV;
  u.virtual_stages = opt.virtual_stages.value_or(chunked ? 2 : 1);
  u.tensor_parallel = opt.tensor_parallel;
  u.micro_batch_size = opt.micro_batch_size;
  u.seq_len = opt.seq_len.value_or(s.model.default_seq_len);
  u.recompute = *recompute;
  u.recompute_layers = opt.recompute_layers;
  u.partition = *partition;
  u.layer_counts = layer_counts;
  u.megatron_rank_order = opt.rank_order == "megatron";
  u.zero_stage = opt.zero1 ? 1 : opt.zero_stage;
  u.expert_parallel = opt.expert_parallel;
  u.context_parallel = opt.context_parallel;
  u.vocab_parallel = opt.vocab_parallel;
  u.sequence_parallel = opt.sequence_parallel;
  u.data_parallel = opt.data_parallel;
  const int p = opt.stages.value_or(static_cast<int>(cluster_devices(s.cluster).size()) /
                                    opt.tensor_parallel / std::max(opt.data_parallel, 1));
  u.micro_batches = opt.micro_batches.value_or(4 * static_cast<int64_t>(p));

  AnalyticCostOptions cost_options;
  cost_options.workload =
      Workload{u.seq_len, u.micro_batch_size, s.model.dtype, s.model.dropout, opt.context_parallel};
  cost_options.sequence_parallel = opt.sequence_parallel;
  MOTLEY_ASSIGN_OR_RETURN(cost_options.stack, resolve_stack(opt.stack, s.cluster));
  MOTLEY_ASSIGN_OR_RETURN(
      std::unique_ptr<AnalyticCostModel> cost,
      AnalyticCostModel::create(s.model, s.cluster, cost_options, s.model.name));
  MOTLEY_ASSIGN_OR_RETURN(s.plan, make_uniform_plan(u, s.model, s.cluster, *cost));
  return s;
}

Json device_json(const DeviceStats& d, const Topology& topo) {
  return Json{{"device", d.device},
              {"type", topo.devices()[d.device].type},
              {"replica", d.replica},
              {"group", d.group},
              {"busy_s", d.busy.value()},
              {"idle_s", d.idle.value()},
              {"exposed_communication_s", d.exposed_communication.value()},
              {"peak_memory_bytes", d.peak_memory.value()},
              {"memory_capacity_bytes", d.capacity.value()},
              {"peak_in_flight", d.peak_in_flight}};
}

Status simulate_command(const SimulateOptions& opt) {
  if (opt.plan.empty() && opt.schedule.empty()) {
    return invalid_argument("give --plan FILE or --schedule NAME (see 'motley simulate --help')");
  }
  if (!opt.plan.empty() && !opt.schedule.empty()) {
    return invalid_argument("--plan and --schedule exclude each other");
  }
  MOTLEY_RETURN_IF_ERROR(
      check_output_options({{"--out", opt.out}, {"--trace", opt.trace}, {"--svg", opt.svg}}));
  MOTLEY_ASSIGN_OR_RETURN(
      Scenario s, opt.plan.empty() ? scenario_from_schedule(opt) : scenario_from_plan_file(opt));
  const std::string source = opt.plan.empty()           ? "plan"
                             : opt.torch_pp_csv.empty() ? opt.plan
                                                        : opt.plan + " with " + opt.torch_pp_csv;

  MOTLEY_ASSIGN_OR_RETURN(AnalyticCostOptions cost_options,
                          plan_cost_options(s.plan, s.model, s.cluster, opt.stack, source));
  MOTLEY_ASSIGN_OR_RETURN(
      std::unique_ptr<AnalyticCostModel> analytic,
      AnalyticCostModel::create(s.model, s.cluster, cost_options, s.model.name));
  const AnalyticCostModel& cost = *analytic;

  // The validator proves the plan runnable, memory included, before anything is simulated.
  MOTLEY_RETURN_IF_ERROR(validate_priced_plan(s.plan, s.model, s.cluster, cost, source));

  SimOptions sim_options;
  sim_options.source = source;
  sim_options.record_timeline = !opt.trace.empty() || !opt.svg.empty();
  // A plan file is priced as it was predicted, with or without the optimizer step, unless a
  // flag says otherwise.
  const bool with_step = opt.optimizer_step      ? true
                         : opt.no_optimizer_step ? false
                         : opt.plan.empty()      ? true
                                                 : plan_optimizer_step(s.plan);
  if (!with_step) sim_options.optimizer_step = OptimizerStepModel::kNone;
  MOTLEY_ASSIGN_OR_RETURN(SimResult result, simulate(sim_options, s.plan, cost));
  s.plan.predicted = PredictedMetrics{result.iteration_time, result.throughput_tokens_per_s,
                                      result.bubble_fraction, "analytic"};
  s.plan.predicted->optimizer_step = with_step;
  record_stack(cost_options.stack, &s.plan);

  // Render everything first, then write: a failure leaves no partial output behind.
  const Topology& topo = cost.topology();
  OutputFiles files;
  if (!opt.out.empty()) files.add(opt.out, plan_to_text(s.plan, s.model, s.cluster));
  if (!opt.trace.empty()) {
    files.add(opt.trace, chrome_trace_json(s.plan, result, topo, TraceOptions{}));
  }
  if (!opt.svg.empty()) files.add(opt.svg, svg_timeline(s.plan, result, topo, SvgOptions{}));
  // What interruptions cost, where a node the cluster has can be interrupted.
  const bool interruptible = cluster_interruptible(s.cluster);
  const PlanPricing pricing = price_plan(s.plan, cost, s.cluster, result.iteration_time);
  std::string out;
  if (opt.json) {
    Json devices = Json::array();
    for (const auto& d : result.devices) devices.push_back(device_json(d, topo));
    Json j{{"model", s.model.name},
           {"cluster", s.cluster.name},
           {"schedule", s.plan.schedule},
           {"stages", s.plan.stages.size()},
           {"replicas", s.plan.replicas.size()},
           {"micro_batch_size", s.plan.micro_batch_size},
           {"seq_len", s.plan.seq_len},
           {"global_batch", s.plan.global_batch},
           {"iteration_time_s", result.iteration_time.value()},
           {"throughput_tokens_per_s", result.throughput_tokens_per_s},
           {"bubble_fraction", result.bubble_fraction},
           {"fits_memory", result.fits_memory},
           {"tasks", result.tasks},
           {"replicas_simulated", result.replicas_simulated},
           {"optimizer_step", with_step},
           {"devices", devices}};
    if (!opt.out.empty()) j["plan"] = opt.out;
    if (interruptible) {
      j["preemption"] = preemption_json(pricing.preemption);
      j["dollars_per_million_tokens"] = pricing.dollars_per_million_tokens;
      j["on_demand_dollars_per_million_tokens"] = pricing.on_demand_dollars_per_million_tokens;
    }
    out = j.dump(2) + "\n";
  } else {
    out = simulation_summary(s.plan, result, topo, SummaryOptions{});
    if (!with_step) {
      out += opt.no_optimizer_step
                 ? "(without the optimizer step)\n"
                 : "(without the optimizer step, as the plan was predicted; --optimizer-step "
                   "includes it)\n";
    }
    out += preemption_line(pricing.preemption, pricing.dollars_per_million_tokens,
                           pricing.on_demand_dollars_per_million_tokens);
  }
  MOTLEY_RETURN_IF_ERROR(files.commit());
  std::fputs(out.c_str(), stdout);
  return Status::ok();
}

// The options that shape a plan built from --schedule; a plan file fixes all of them, so
// giving one with --plan is refused rather than ignored.
std::vector<CLI::Option*> add_schedule_shape_options(CLI::App* cmd, SimulateOptions* opt) {
  return {
      cmd->add_option("--stages,--pipeline-parallel", opt->stages,
                      "Pipeline depth: device groups per pipeline (default: the whole cluster)")
          ->check(integer_in(1, kMaxOptionCount)),
      cmd->add_option("--virtual-stages", opt->virtual_stages,
                      "Chunks per device (default 2 for interleaved, zb-v, dualpipev; else 1)")
          ->check(integer_in(1, kMaxOptionCount)),
      cmd->add_option("--micro-batches", opt->micro_batches,
                      "Micro-batches per pipeline (default: 4 per stage)")
          ->check(integer_in(1, kMaxOptionCount)),
      cmd->add_option("--micro-batch-size", opt->micro_batch_size, "Sequences per micro-batch")
          ->check(integer_in(1, kMaxOptionCount))
          ->capture_default_str(),
      cmd->add_option("--seq-len", opt->seq_len, "Sequence length (default: the model's)")
          ->check(integer_in(1, kMaxOptionSeqLen)),
      cmd->add_option("--tensor-parallel", opt->tensor_parallel,
                      "Devices per stage (inside a node)")
          ->check(integer_in(1, kMaxOptionCount))
          ->capture_default_str(),
      cmd->add_option("--recompute", opt->recompute, "none, selective or full")
          ->capture_default_str(),
      cmd->add_option("--recompute-layers", opt->recompute_layers,
                      "Recompute the first N layers of every stage in full, the others none "
                      "(Megatron-LM's --recompute-method block --recompute-num-layers N)")
          ->check(integer_in(1, kMaxOptionCount)),
      cmd->add_flag("--sequence-parallel", opt->sequence_parallel,
                    "Megatron-LM's sequence parallelism in the tensor-parallel groups"),
      cmd->add_option("--data-parallel", opt->data_parallel,
                      "Pipeline replicas (default: as many as the cluster holds)")
          ->check(integer_in(1, kMaxOptionCount)),
      cmd->add_option("--zero-stage", opt->zero_stage,
                      "ZeRO across the replicas: 0 none, 1 the optimizer state (Megatron-LM's "
                      "distributed optimizer), 2 also the gradients, 3 also the weights (FSDP)")
          ->check(integer_in(0, 3)),
      cmd->add_flag("--zero1", opt->zero1, "The same as --zero-stage 1"),
      cmd->add_option("--expert-parallel", opt->expert_parallel,
                      "Split every MoE layer's experts over groups of this many consecutive "
                      "replicas (expert parallelism)")
          ->check(integer_in(1, kMaxOptionCount)),
      cmd->add_option("--context-parallel", opt->context_parallel,
                      "Split every sequence over groups of this many consecutive replicas "
                      "(context parallelism, ring attention); the replicas of --data-parallel "
                      "count every member")
          ->check(integer_in(1, kMaxOptionCount)),
      cmd->add_flag("--vocab-parallel", opt->vocab_parallel,
                    "Split the head by vocabulary rows over every group of each pipeline "
                    "(vocabulary parallelism), ordered by the adaptive scheduler on the "
                    "schedule's stage shape"),
      cmd->add_option("--partition", opt->partition,
                      "Layers per stage: uniform (every layer alike), megatron (decoder layers "
                      "evenly, embedding first, head last) or the counts per stage, e.g. "
                      "4,8,8,4")
          ->capture_default_str(),
      cmd->add_option("--rank-order", opt->rank_order,
                      "Where the groups of t devices go, in cluster order: pipeline (each "
                      "replica's stages on consecutive groups) or megatron (Megatron-LM's "
                      "order: the replicas of a stage on consecutive groups, the pipeline rank "
                      "outermost)")
          ->capture_default_str(),
  };
}

}  // namespace

void add_simulate_command(CLI::App& app, Action* action) {
  auto opt = std::make_shared<SimulateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Simulate one training iteration of a plan file or of a named schedule");
  CLI::Option* plan = cmd->add_option(
      "--plan", opt->plan,
      "A plan file (it carries its model and cluster; motley.plan/1 files name them)");
  cmd->add_option("--model", opt->model,
                  std::string("Model (default: the one the plan carries, or ") + kDefaultModel +
                      "); with --plan it must be the plan's (same hash)");
  cmd->add_option("--cluster", opt->cluster,
                  std::string("Cluster (default: the one the plan carries, or ") + kDefaultCluster +
                      "); with --plan it must be the plan's (same hash)");
  cmd->add_option("--schedule", opt->schedule,
                  "gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v or dualpipev");
  for (CLI::Option* shape : add_schedule_shape_options(cmd, opt.get())) shape->excludes(plan);
  cmd->add_option("--torch-pp-csv", opt->torch_pp_csv,
                  "With --plan: run the order of this PyTorch pipelining CSV (one row per "
                  "pipeline rank, compute-only or with SEND/RECV) on the plan's stages")
      ->needs(plan);
  add_stack_options(cmd, &opt->stack);
  CLI::Option* without = cmd->add_flag(
      "--no-optimizer-step", opt->no_optimizer_step,
      "Simulate the iteration without the optimizer step (to compare with times published that "
      "way; the default for a plan predicted without it)");
  cmd->add_flag("--optimizer-step", opt->optimizer_step,
                "Simulate the iteration with the optimizer step, also for a plan predicted "
                "without it")
      ->excludes(without);
  cmd->add_option("--out", opt->out, "Write the plan (with predicted metrics) to this file");
  cmd->add_option("--trace", opt->trace, "Write a Chrome trace JSON (Perfetto, chrome://tracing)");
  cmd->add_option("--svg", opt->svg, "Write an SVG timeline");
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->callback([opt, action] { *action = [opt] { return simulate_command(*opt); }; });
}

}  // namespace motley::cli
