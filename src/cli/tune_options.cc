#include "tune_options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>
#include <memory>
#include <set>
#include <string_view>

#include "commands.h"
#include "format.h"
#include "motley/model/model_json.h"
#include "motley/report/units_format.h"
#include "option_checks.h"

namespace motley::cli {
namespace {

class ProgressLine {
 public:
  explicit ProgressLine(bool enabled) : enabled_(enabled && ::isatty(STDERR_FILENO) == 1) {}
  ~ProgressLine() {
    if (shown_) std::fprintf(stderr, "\r%*s\r", static_cast<int>(width_), "");
  }
  // The bar fills with whichever budget is nearer its end.
  void update(const TuneProgress& p, Seconds budget, int64_t max_plans) {
    if (!enabled_ || p.elapsed < Seconds(1)) return;
    double spent = p.elapsed / budget;
    if (max_plans > 0) {
      spent = std::max(spent, static_cast<double>(p.candidates_evaluated) / max_plans);
    }
    const int filled = static_cast<int>(20 * std::min(1.0, spent));
    std::string line =
        fmt::format("[{}{}] {:<12} {} plans, best {}, {:.1f} s", std::string(filled, '#'),
                    std::string(20 - filled, '.'), p.phase, p.candidates_evaluated,
                    p.best_iteration_time > Seconds(0) ? format_time(p.best_iteration_time) : "-",
                    p.elapsed.value());
    width_ = std::max(width_, line.size());
    std::fprintf(stderr, "\r%-*s", static_cast<int>(width_), line.c_str());
    std::fflush(stderr);
    shown_ = true;
  }

 private:
  bool enabled_;
  bool shown_ = false;
  size_t width_ = 0;
};

}  // namespace

void add_search_limits(CLI::App* cmd, std::optional<int64_t>* max_plans, uint64_t* seed,
                       int* threads) {
  cmd->add_option("--max-plans", *max_plans,
                  "Stop the search after simulating this many plans (default: no limit); unlike "
                  "the time budget, the plan found then does not depend on the machine's speed")
      ->check(integer_in(1, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--seed", *seed, "Seed of the search's random moves")
      ->check(unsigned_integer())
      ->capture_default_str();
  cmd->add_option("--threads", *threads, "Plans simulated in parallel")
      ->check(integer_in(1, kMaxOptionThreads))
      ->capture_default_str();
}

void add_tune_options(CLI::App* cmd, TuneCliOptions* opt) {
  cmd->add_option("--model", opt->model, std::string("Model (default ") + kDefaultModel + ")");
  cmd->add_option("--cluster", opt->cluster,
                  std::string("Cluster (default ") + kDefaultCluster + ")");
  cmd->add_option("--global-batch", opt->global_batch,
                  "Sequences per iteration (default: 8 per device)")
      ->check(integer_in(1, kMaxOptionCount));
  cmd->add_option("--seq-len", opt->seq_len, "Sequence length (default: the model's)")
      ->check(integer_in(1, kMaxOptionSeqLen));
  cmd->add_option("--micro-batch-size", opt->micro_batch_size,
                  "Sequences per micro-batch (default: motley chooses 1, 2 or 4; baselines use 1)")
      ->check(integer_in(1, kMaxOptionCount));
  cmd->add_option("--objective", opt->objective, "throughput or cost")->capture_default_str();
  cmd->add_option("--time-budget", opt->time_budget, "Search time limit in seconds")
      ->check(positive_number(kMaxOptionSeconds))
      ->capture_default_str();
  add_search_limits(cmd, &opt->max_plans, &opt->seed, &opt->threads);
  CLI::Option* zero_stage =
      cmd->add_option("--zero-stage", opt->zero_stage,
                      "ZeRO stage of every plan across its data-parallel replicas: 0 none, 1 the "
                      "optimizer state (Megatron-LM's distributed optimizer), 2 also the "
                      "gradients, 3 also the weights (FSDP) (default: searched)")
          ->check(integer_in(0, 3));
  cmd->add_flag("--zero1", opt->zero1, "The same as --zero-stage 1")->excludes(zero_stage);
  cmd->add_option("--expert-parallel", opt->expert_parallel,
                  "Split every MoE layer's experts over groups of this many replicas (default: "
                  "searched)")
      ->check(integer_in(1, kMaxOptionCount));
  CLI::Option* vocab =
      cmd->add_flag("--vocab-parallel", opt->vocab_parallel,
                    "Split the model's head by vocabulary rows over every group of each pipeline "
                    "(vocabulary parallelism; default: searched where the last layer is a head)");
  cmd->add_flag("--no-vocab-parallel", opt->no_vocab_parallel,
                "Never split the head (default: searched)")
      ->excludes(vocab);
  cmd->add_option("--context-parallel", opt->context_parallel,
                  "Split every sequence over groups of this many replicas (context parallelism, "
                  "ring attention); 1 rules it out (default: searched)")
      ->check(integer_in(1, kMaxOptionCount));
  cmd->add_flag("--no-optimizer-step", opt->no_optimizer_step,
                "Iterations without the optimizer step, searched, reported and bounded so "
                "(to compare with times published that way)");
  cmd->add_option("--budget", opt->budget,
                  "Most USD per hour the devices of a plan may cost (every strategy's plan)")
      ->check(positive_number(kMaxBudgetPerHour));
  CLI::Option* deadline =
      cmd->add_option("--deadline", opt->deadline_hours,
                      "Hours within which --train-tokens tokens must be trained, expected time "
                      "with interruptions and checkpoints included")
          ->check(positive_number(kMaxDeadlineHours));
  CLI::Option* tokens =
      cmd->add_option("--train-tokens", opt->train_tokens,
                      "Tokens the whole training run processes (for --deadline), e.g. 1e12")
          ->check(positive_number(kMaxTrainTokens));
  deadline->needs(tokens);
  tokens->needs(deadline);
  cmd->add_flag("--quiet", opt->quiet, "No progress bar on stderr");
  add_stack_options(cmd, &opt->stack);
  add_constraint_options(cmd, opt);
}

void add_constraint_options(CLI::App* cmd, TuneCliOptions* opt) {
  cmd->add_option("--tensor-parallel", opt->tensor_parallel,
                  "Devices in every tensor-parallel group (1, 2, 4 or 8; default: searched)")
      ->check(CLI::IsMember({1, 2, 4, 8}))
      ->group("Constraints");
  cmd->add_option("--pipeline-parallel", opt->pipeline_parallel,
                  "Device groups in every pipeline (default: searched)")
      ->check(integer_in(1, kMaxOptionCount))
      ->group("Constraints");
  cmd->add_option("--data-parallel", opt->data_parallel,
                  "Pipeline replicas, each member of a context-parallel group counted "
                  "(Megatron-LM's DP x CP; default: searched)")
      ->check(integer_in(1, kMaxOptionCount))
      ->group("Constraints");
  cmd->add_option("--schedule", opt->schedules,
                  "Schedule families plans may use, comma-separated: " +
                      fmt::format("{}", fmt::join(schedule_family_names(), ", ")) +
                      " (default: any)")
      ->delimiter(',')
      ->check(CLI::IsMember(schedule_family_names()))
      ->group("Constraints");
  CLI::Option* only =
      cmd->add_option("--devices", opt->devices,
                      "The only devices plans may use: ids, ranges (8-15), node names or device "
                      "types, comma-separated")
          ->group("Constraints");
  CLI::Option* except = cmd->add_option("--exclude-devices", opt->exclude_devices,
                                        "Devices no plan may use, written as for --devices")
                            ->group("Constraints");
  only->excludes(except);
  cmd->add_option("--memory-headroom", opt->memory_headroom,
                  "Share of every device's memory plans leave free, e.g. 0.1 (default 0)")
      ->check(fraction_below(1))
      ->group("Constraints");
}

std::string describe_constraints(const PlanConstraints& c) {
  std::vector<std::string> parts;
  if (c.tensor_parallel > 0) parts.push_back(fmt::format("TP {}", c.tensor_parallel));
  if (c.pipeline_parallel > 0) parts.push_back(fmt::format("PP {}", c.pipeline_parallel));
  if (c.data_parallel > 0) parts.push_back(fmt::format("DP {}", c.data_parallel));
  if (!c.schedules.empty()) {
    parts.push_back(fmt::format("schedule{} {}", c.schedules.size() == 1 ? "" : "s",
                                fmt::join(c.schedules, " or ")));
  }
  if (!c.excluded_devices.empty()) {
    parts.push_back(fmt::format("{} device{} left out", c.excluded_devices.size(),
                                c.excluded_devices.size() == 1 ? "" : "s"));
  }
  if (c.memory_headroom > 0) {
    parts.push_back(fmt::format("{:.0f}% of memory left free", 100 * c.memory_headroom));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

Json constraints_json(const PlanConstraints& c) {
  Json j = Json::object();
  if (c.tensor_parallel > 0) j["tensor_parallel"] = c.tensor_parallel;
  if (c.pipeline_parallel > 0) j["pipeline_parallel"] = c.pipeline_parallel;
  if (c.data_parallel > 0) j["data_parallel"] = c.data_parallel;
  if (!c.schedules.empty()) j["schedules"] = c.schedules;
  if (!c.excluded_devices.empty()) j["excluded_devices"] = c.excluded_devices;
  if (c.memory_headroom > 0) j["memory_headroom"] = c.memory_headroom;
  return j;
}

Result<std::vector<int>> parse_device_list(const std::string& option, const std::string& list,
                                           const ClusterSpec& cluster) {
  const std::vector<Device> devices = cluster_devices(cluster);
  const int n = static_cast<int>(devices.size());
  std::set<int> ids;
  auto number = [](std::string_view text, int* out) {
    const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), *out);
    return err == std::errc() && end == text.data() + text.size();
  };
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) {
      return invalid_argument(fmt::format("{}: an empty item in '{}'", option, list));
    }
    int first = 0, last = 0;
    const size_t dash = item.find('-');
    const bool single = number(item, &first);
    const bool range = !single && dash != std::string::npos &&
                       number(std::string_view(item).substr(0, dash), &first) &&
                       number(std::string_view(item).substr(dash + 1), &last);
    if (single || range) {
      if (single) last = first;
      if (first > last) {
        return invalid_argument(
            fmt::format("{}: '{}' runs from {} down to {}; write a range from its lower id", option,
                        item, first, last));
      }
      if (first < 0 || last >= n) {
        return invalid_argument(fmt::format("{}: '{}' is outside cluster '{}''s device ids 0 to {}",
                                            option, item, cluster.name, n - 1));
      }
      for (int d = first; d <= last; ++d) ids.insert(d);
      continue;
    }
    bool matched = false;
    for (const Device& d : devices) {
      if (cluster.nodes[d.node].name == item || d.type == item) {
        ids.insert(d.id);
        matched = true;
      }
    }
    if (!matched) {
      return invalid_argument(fmt::format(
          "{}: '{}' is neither a device id, an id range, a node name nor a device type of "
          "cluster '{}'",
          option, item, cluster.name));
    }
  }
  return std::vector<int>(ids.begin(), ids.end());
}

Result<TuneSetup> prepare_tune(const TuneCliOptions& opt) {
  TuneSetup setup;
  TuneOptions& options = setup.options;
  if (opt.objective == "cost") {
    options.objective = TuneObjective::kCost;
  } else if (opt.objective != "throughput") {
    return invalid_argument(
        fmt::format("--objective: expected throughput or cost, got '{}'", opt.objective));
  }
  MOTLEY_ASSIGN_OR_RETURN(setup.model, load_model(opt.model.empty() ? kDefaultModel : opt.model));
  MOTLEY_ASSIGN_OR_RETURN(setup.cluster,
                          load_cluster(opt.cluster.empty() ? kDefaultCluster : opt.cluster));
  const int64_t devices = static_cast<int64_t>(cluster_devices(setup.cluster).size());
  // TuneOptions' zeros mean the same defaults: the model's length, the tuner's choice, no limit.
  options.global_batch = opt.global_batch.value_or(8 * devices);
  options.seq_len = opt.seq_len.value_or(0);
  options.micro_batch_size = opt.micro_batch_size.value_or(0);
  options.time_budget = Seconds(opt.time_budget);
  options.max_evaluations = opt.max_plans.value_or(0);
  options.seed = opt.seed;
  options.threads = opt.threads;
  options.expert_parallel = opt.expert_parallel.value_or(0);
  options.context_parallel = opt.context_parallel.value_or(0);
  if (opt.vocab_parallel) options.vocab_parallel = true;
  if (opt.no_vocab_parallel) options.vocab_parallel = false;
  options.optimizer_step = !opt.no_optimizer_step;
  if (opt.zero_stage) {
    options.zero_stage = *opt.zero_stage;
  } else if (opt.zero1) {
    options.zero_stage = 1;
  }
  options.budget_per_hour = opt.budget.value_or(0);
  options.deadline = Seconds(opt.deadline_hours.value_or(0) * 3600.0);
  options.train_tokens = opt.train_tokens.value_or(0);
  PlanConstraints& fixed = options.constraints;
  fixed.tensor_parallel = opt.tensor_parallel.value_or(0);
  fixed.pipeline_parallel = opt.pipeline_parallel.value_or(0);
  fixed.data_parallel = opt.data_parallel.value_or(0);
  fixed.schedules = opt.schedules;
  fixed.memory_headroom = opt.memory_headroom.value_or(0);
  if (!opt.exclude_devices.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(
        fixed.excluded_devices,
        parse_device_list("--exclude-devices", opt.exclude_devices, setup.cluster));
  } else if (!opt.devices.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(const std::vector<int> kept,
                            parse_device_list("--devices", opt.devices, setup.cluster));
    for (int d = 0; d < devices; ++d) {
      if (!std::binary_search(kept.begin(), kept.end(), d)) fixed.excluded_devices.push_back(d);
    }
  }
  if (static_cast<int64_t>(fixed.excluded_devices.size()) == devices) {
    return invalid_argument(fmt::format("{}: leaves none of cluster '{}''s {} devices",
                                        opt.devices.empty() ? "--exclude-devices" : "--devices",
                                        setup.cluster.name, devices));
  }
  // The stack every candidate is priced with, as `simulate` prices the plan written.
  MOTLEY_ASSIGN_OR_RETURN(options.stack, resolve_stack(opt.stack, setup.cluster));
  return setup;
}

namespace {

// Hours, minutes or seconds, whichever reads best.
std::string format_duration(Seconds t) {
  if (t >= Seconds(3600)) return fmt::format("{:.1f} h", t.value() / 3600.0);
  if (t >= Seconds(60)) return fmt::format("{:.1f} min", t.value() / 60.0);
  return format_time(t);
}

}  // namespace

std::string not_run_hint(const std::vector<StrategyOutcome>& baselines) {
  const auto left_out = std::count_if(baselines.begin(), baselines.end(),
                                      [](const StrategyOutcome& b) { return b.not_run; });
  if (left_out == 0) return "";
  return fmt::format(
      "{} of the {} baselines did not run: the budget was spent before they started. A larger "
      "--time-budget (or --max-plans, where given) runs them.\n",
      left_out, baselines.size());
}

std::string preemption_line(const PreemptionEstimate& e, double expected_dollars_per_million,
                            double on_demand_dollars_per_million) {
  if (!e.interruptible()) return "";
  return fmt::format(
      "interruptions: {} node{} can be interrupted, one interruption every {} expected; goodput "
      "{}\n  checkpoint {} in {} every {} iterations ({}, Daly's interval), {} to come back; "
      "{}/M tokens expected, {}/M bought on demand\n",
      e.interruptible_nodes, e.interruptible_nodes == 1 ? "" : "s",
      format_duration(e.mean_time_between_interruptions), format_percent(e.goodput),
      format_bytes(e.checkpoint_bytes), format_time(e.checkpoint_time), e.interval_iterations,
      format_duration(e.interval), format_duration(e.restart_time),
      format_money(expected_dollars_per_million), format_money(on_demand_dollars_per_million));
}

Json preemption_json(const PreemptionEstimate& e) {
  Json j{{"interruptible_nodes", e.interruptible_nodes}, {"goodput", e.goodput}};
  if (e.interruptible()) {
    j["mean_time_between_interruptions_s"] = e.mean_time_between_interruptions.value();
    j["checkpoint_bytes"] = e.checkpoint_bytes.value();
    j["checkpoint_time_s"] = e.checkpoint_time.value();
    j["restart_time_s"] = e.restart_time.value();
    j["checkpoint_interval_iterations"] = e.interval_iterations;
    j["checkpoint_interval_s"] = e.interval.value();
  }
  return j;
}

Result<TuneResult> tune_with_progress(const TuneSetup& setup, bool quiet) {
  TuneOptions options = setup.options;
  auto progress = std::make_shared<ProgressLine>(!quiet);
  options.progress = [progress, budget = options.time_budget, most = options.max_evaluations](
                         const TuneProgress& p) { progress->update(p, budget, most); };
  // The bar is cleared when the last reference (the options' copy) goes, before returning.
  return tune(options, setup.model, setup.cluster);
}

}  // namespace motley::cli
