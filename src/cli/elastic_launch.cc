// The elastic supervisor of `motley launch --elastic`: runs `run --plan P --checkpoint-dir D
// --steps S ...` as a job of the plan's ranks; when ranks fail, their nodes count as lost, the
// plan is replanned on the nodes left (tune/replan.h; same model and global batch), and the
// job starts again from D's last complete checkpoint, until the S steps are done or the
// restarts are spent. It reports each attempt and the goodput.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cost_options.h"
#include "launch.h"
#include "motley/core/json.h"
#include "motley/core/output_files.h"
#include "motley/exec/checkpoint_format.h"
#include "motley/exec/checkpoint_store.h"
#include "motley/exec/rank_layout.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/validate.h"
#include "motley/tune/replan.h"

namespace motley::cli {
namespace {

// The default of `motley run --steps` (run_options.h).
constexpr int64_t kRunDefaultSteps = 10;

bool has_flag(const std::vector<std::string>& command, const std::string& name) {
  return std::find(command.begin() + 1, command.end(), name) != command.end();
}

// `command` with option `name` set to `value`, every earlier setting of it removed.
std::vector<std::string> with_option(const std::vector<std::string>& command,
                                     const std::string& name, const std::string& value) {
  std::vector<std::string> out;
  for (size_t i = 0; i < command.size(); ++i) {
    if (i > 0 && command[i] == name && i + 1 < command.size()) {
      ++i;
      continue;
    }
    if (i > 0 && command[i].rfind(name + "=", 0) == 0) continue;
    out.push_back(command[i]);
  }
  out.push_back(name);
  out.push_back(value);
  return out;
}

// The step of the checkpoint `dir` holds (find_checkpoint), nullopt when it holds none.
Result<std::optional<int64_t>> checkpoint_step(const std::string& dir) {
  Result<std::string> found = find_checkpoint(dir);
  if (!found.is_ok()) {
    if (found.status().code() == StatusCode::kNotFound) return std::optional<int64_t>();
    return found.status();
  }
  const std::string manifest = *found + "/" + std::string(kCheckpointManifest);
  MOTLEY_ASSIGN_OR_RETURN(Json json, read_json_file(manifest));
  MOTLEY_ASSIGN_OR_RETURN(CheckpointManifest m, checkpoint_manifest_from_json(json, manifest));
  return std::optional<int64_t>(m.step);
}

// The names of the nodes holding the devices of `ranks` under `plan`.
std::vector<std::string> nodes_of_ranks(const PlanInputs& in, const std::vector<int>& ranks) {
  const RankLayout layout(in.plan);
  const std::vector<Device> devices = cluster_devices(in.cluster);
  std::set<std::string> seen;
  std::vector<std::string> nodes;
  for (int rank : ranks) {
    if (rank < 0 || rank >= layout.world_size()) continue;
    const RankPlace place = layout.place_of(rank);
    const int device = in.plan.replicas[place.replica].groups[place.group].devices[place.tp_rank];
    const std::string& node = in.cluster.nodes[devices[device].node].name;
    if (seen.insert(node).second) nodes.push_back(node);
  }
  return nodes;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A step line of `motley run` ("step    3  loss 5.130622  time   45.9 ms  ..."): the step and
// its time in seconds.
std::optional<std::pair<int64_t, double>> parse_step_line(const std::string& line) {
  long long step = 0;
  double loss = 0, time = 0;
  char unit[3] = {0};
  if (std::sscanf(line.c_str(), "step %lld loss %lf time %lf %2s", &step, &loss, &time, unit) !=
      4) {
    return std::nullopt;
  }
  const std::map<std::string, double> scale = {
      {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};
  auto it = scale.find(unit);
  if (it == scale.end()) return std::nullopt;
  return std::pair<int64_t, double>{step, time * it->second};
}

// One run of the job.
struct Attempt {
  int world = 0;
  int64_t from_step = 0;                   // the checkpoint it started from (0: none)
  int64_t checkpointed = 0;                // the checkpoint's step when it ended
  std::map<int64_t, double> step_seconds;  // from the step lines (none under --json)
  double wall_s = 0;
  // The steps it computed, and the time of those its checkpoint kept.
  int64_t computed() const { return static_cast<int64_t>(step_seconds.size()); }
  double kept_seconds() const {
    double t = 0;
    for (const auto& [step, seconds] : step_seconds) {
      if (step < checkpointed) t += seconds;
    }
    return t;
  }
};

}  // namespace

Status elastic_launch(const LaunchOptions& opt) {
  const std::vector<std::string>& command = opt.command;
  const std::optional<std::string> plan_option = command_option(command, "--plan");
  const std::optional<std::string> dir_option = command_option(command, "--checkpoint-dir");
  if (command.empty() || command[0] != "run" || !plan_option || !dir_option) {
    return invalid_argument(
        "--elastic: the command must be 'run --plan P --checkpoint-dir D ...': it replans P and "
        "resumes from the checkpoints in D");
  }
  const std::string dir = *dir_option;
  int64_t steps = kRunDefaultSteps;
  if (std::optional<std::string> text = command_option(command, "--steps")) {
    char* end = nullptr;
    steps = std::strtoll(text->c_str(), &end, 10);
    if (text->empty() || *end != '\0' || steps < 1) {
      return invalid_argument(
          fmt::format("--steps: expected an integer of at least 1, got '{}'", *text));
    }
  }
  const bool json = has_flag(command, "--json");
  FILE* notes = json ? stderr : stdout;  // --json keeps stdout to the run's one object
  auto note = [notes](const std::string& text) {
    std::fputs(("elastic: " + text + "\n").c_str(), notes);
    std::fflush(notes);
  };

  std::string plan_path = *plan_option;
  MOTLEY_ASSIGN_OR_RETURN(std::optional<int64_t> start, checkpoint_step(dir));
  const bool resume = has_flag(command, "--resume");
  const int64_t first_step = resume && start ? *start : 0;
  const int64_t target = first_step + steps;
  std::vector<Attempt> attempts;
  std::vector<std::string> lost_nodes;
  double replanning_s = 0;
  const auto began = std::chrono::steady_clock::now();

  for (int restart = 0;; ++restart) {
    MOTLEY_ASSIGN_OR_RETURN(const PlanInputs in, load_plan_inputs(plan_path));
    MOTLEY_RETURN_IF_ERROR(
        validate_plan(in.plan, in.model, in.cluster, ValidateOptions{}).with_context(plan_path));
    Attempt attempt;
    attempt.world = RankLayout(in.plan).world_size();
    if (restart == 0 && opt.nproc != 0 && opt.nproc != attempt.world) {
      return invalid_argument(fmt::format(
          "--nproc: {} ranks, but the plan {} runs on {}; leave --nproc out with --elastic",
          opt.nproc, plan_path, attempt.world));
    }
    MOTLEY_ASSIGN_OR_RETURN(std::optional<int64_t> at, checkpoint_step(dir));
    const bool resuming = restart == 0 ? resume : at.has_value();
    attempt.from_step = resuming && at ? *at : 0;
    std::vector<std::string> job = with_option(command, "--plan", plan_path);
    job = with_option(job, "--steps", std::to_string(target - attempt.from_step));
    if (resuming && !has_flag(job, "--resume")) job.push_back("--resume");
    if (restart > 0) {
      note(fmt::format("attempt {}: {} rank{}, from step {}, {} steps to go", restart + 1,
                       attempt.world, attempt.world == 1 ? "" : "s", attempt.from_step,
                       target - attempt.from_step));
    }

    LaunchOptions launch = opt;
    launch.nproc = attempt.world;
    launch.command = job;
    launch.extra_env = {"MOTLEY_ELASTIC_RESTART=" + std::to_string(restart)};
    std::mutex mu;
    launch.on_line = [&attempt, &mu](int, const std::string& line) {
      if (std::optional<std::pair<int64_t, double>> step = parse_step_line(line)) {
        std::lock_guard<std::mutex> lock(mu);
        attempt.step_seconds[step->first] = step->second;
      }
    };
    std::vector<int> failed;
    const auto attempt_began = std::chrono::steady_clock::now();
    const Status status = run_job(launch, &failed);
    attempt.wall_s = seconds_since(attempt_began);
    MOTLEY_ASSIGN_OR_RETURN(std::optional<int64_t> after, checkpoint_step(dir));
    attempt.checkpointed = after.value_or(0);
    attempts.push_back(attempt);

    if (status.is_ok()) {
      const double wall = seconds_since(began);
      int64_t computed = 0;
      double productive = 0;
      for (const Attempt& a : attempts) {
        computed += a.computed();
        productive += a.kept_seconds();
      }
      note(fmt::format(
          "done: steps {} to {} ({} steps) in {:.1f} s over {} attempt{}{}", first_step, target - 1,
          steps, wall, attempts.size(), attempts.size() > 1 ? "s" : "",
          lost_nodes.empty() ? "" : fmt::format(" (lost {})", fmt::join(lost_nodes, ", "))));
      if (json) {
        note(
            fmt::format("replanning {:.2f} s; steps computed and goodput are not measured under "
                        "--json (the ranks print no step lines)",
                        replanning_s));
      } else {
        note(fmt::format(
            "computed {} steps, {} of them again after a loss; replanning {:.2f} s; goodput "
            "{:.1f}% (the time of the steps kept, {:.2f} s, over the wall time)",
            computed, computed - steps, replanning_s, 100 * productive / wall, productive));
      }
      return Status::ok();
    }
    if (status.code() == StatusCode::kInvalidArgument || failed.empty()) return status;
    const std::vector<std::string> lost = nodes_of_ranks(in, failed);
    note(fmt::format("attempt {}: {}; lost node{} {}; {}", restart + 1, status.message(),
                     lost.size() > 1 ? "s" : "", fmt::join(lost, ", "),
                     after ? fmt::format("the checkpoint is at step {}", *after)
                           : std::string("no checkpoint yet")));
    if (restart >= opt.max_restarts) {
      return io_error(fmt::format("elastic: gave up after {} restart{} (--max-restarts); last: {}",
                                  restart, restart == 1 ? "" : "s", status.message()));
    }
    MOTLEY_ASSIGN_OR_RETURN(ClusterSpec remaining, cluster_without(in.cluster, lost));
    const auto replan_began = std::chrono::steady_clock::now();
    ReplanOptions options;
    options.tune.time_budget = Seconds(1);
    if (in.plan.zero_stage > 0) options.tune.zero_stage = in.plan.zero_stage;
    MOTLEY_ASSIGN_OR_RETURN(options.tune.stack,
                            resolve_plan_stack(StackChoice{}, in.plan, in.cluster, plan_path));
    MOTLEY_ASSIGN_OR_RETURN(ReplanResult r,
                            replan(in.plan, in.model, in.cluster, remaining, options));
    record_stack(*options.tune.stack, &r.tuned.plan);
    plan_path = fmt::format("{}/elastic-plan-{}.json", dir, restart + 1);
    OutputFiles files;
    files.add_directory(dir);
    files.add(plan_path, plan_to_text(r.tuned.plan, in.model, remaining));
    MOTLEY_RETURN_IF_ERROR(files.commit());
    replanning_s += seconds_since(replan_began);
    lost_nodes.insert(lost_nodes.end(), lost.begin(), lost.end());
    note(
        fmt::format("replanned for {} devices in {:.2f} s: predicted {:.4g} -> {:.4g} tokens/s; "
                    "wrote {}",
                    cluster_devices(remaining).size(), r.replan_time.value(), r.old_tokens_per_s,
                    r.tuned.simulation.throughput_tokens_per_s, plan_path));
  }
}

}  // namespace motley::cli
