// `motley fidelity`: how far the simulator can be trusted for a plan. It runs the plan with the
// executor as `motley launch` does (one local process per device, Gloo over TCP, one intra-op
// thread per rank), reads the merged measured trace, simulates the same plan with the cost
// model it is priced with (the plan's model, or a measured profile of it with --profile) and
// prints the comparison (calibrate/fidelity.h). The run is a child process of this binary, so
// motley still links no libtorch. docs/fidelity.md.
#include "fidelity_command.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "motley/calibrate/fidelity.h"
#include "motley/core/json.h"
#include "motley/core/output_files.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/exec/rank_layout.h"
#include "motley/model/model_json.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/plan_workload.h"
#include "motley/report/text_table.h"
#include "motley/report/units_format.h"
#include "motley/sim/simulator.h"
#include "option_checks.h"
#include "run_options.h"

extern char** environ;

namespace motley::cli {
namespace {

// A scratch directory for the run's trace, removed with what is in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "motley-fidelity-XXXXXX");
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The last `lines` lines of `text`, without the trailing newline.
std::string tail_lines(const std::string& text, int lines) {
  size_t end = text.find_last_not_of("\r\n");
  if (end == std::string::npos) return "";
  size_t begin = end + 1;
  for (int n = 0; n < lines && begin > 0; ++n) {
    const size_t nl = text.rfind('\n', begin - 1);
    begin = nl == std::string::npos ? 0 : nl;
    if (nl == std::string::npos) break;
  }
  while (begin < text.size() && text[begin] == '\n') ++begin;
  return text.substr(begin, end + 1 - begin);
}

// Runs this binary with `args` (its stdout and stderr into files of `dir`) and waits for it.
// The ranks get one intra-op thread each; stdin is closed.
Status run_self(const std::vector<std::string>& args, const std::string& dir) {
  const std::string out_path = dir + "/run.out", err_path = dir + "/run.err";
  std::vector<std::string> argv_storage = {"motley"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (name == "OMP_NUM_THREADS" || name == "OPENBLAS_NUM_THREADS" || name == "WORLD_SIZE" ||
        name == "RANK" || name == "OMPI_COMM_WORLD_SIZE") {
      continue;
    }
    env_storage.push_back(entry);
  }
  env_storage.push_back("OMP_NUM_THREADS=1");
  env_storage.push_back("OPENBLAS_NUM_THREADS=1");
  std::vector<char*> envp;
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out_fd < 0 || err_fd < 0) {
    const std::string why = std::strerror(errno);
    if (out_fd >= 0) ::close(out_fd);
    if (err_fd >= 0) ::close(err_fd);
    return io_error(fmt::format("fidelity: cannot create files in {}: {}", dir, why));
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out_fd);
    ::close(err_fd);
    return io_error(std::string("fidelity: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::execve("/proc/self/exe", argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out_fd);
  ::close(err_fd);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return io_error(std::string("fidelity: waitpid: ") + std::strerror(errno));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::ok();
  std::string why = tail_lines(read_text(err_path), 3);
  if (why.empty()) why = tail_lines(read_text(out_path), 3);
  const std::string message = fmt::format("fidelity: the executor's run failed: {}", why);
  return WIFEXITED(status) && WEXITSTATUS(status) == 2 ? invalid_argument(message)
                                                       : io_error(message);
}

Result<MeasuredKind> measured_kind(const std::string& cat, const std::string& name,
                                   const std::string& source) {
  if (cat == "F") return MeasuredKind::kForward;
  if (cat == "B (input grad)") return MeasuredKind::kBackwardInput;
  if (cat == "W (weight grad)") return MeasuredKind::kBackwardWeight;
  if (cat == "B (fused)") return MeasuredKind::kBackward;
  if (cat == "R (recompute)") return MeasuredKind::kRecompute;
  if (cat == "optimizer") return MeasuredKind::kOptimizer;
  if (cat == "all-reduce" && name == "all_reduce") return MeasuredKind::kAllReduceWait;
  if (cat == "send") {
    if (name.rfind("wait for ", 0) == 0) return MeasuredKind::kInputWait;
    if (name == "finish_sends") return MeasuredKind::kSendWait;
    return MeasuredKind::kSendPost;
  }
  return invalid_argument(fmt::format(
      "{}: an event '{}' of category '{}' is not of a measured trace", source, name, cat));
}

// The executor's merged Chrome trace (docs/executor.md, "Trace") as a MeasuredTrace: events by
// rank and step (otherData.first_step on), relative to the rank's step start
// (otherData.step_offsets_s), the ranks' step times from otherData.step_time_s. Gradient sums,
// which overlap the actions, are left out.
Result<MeasuredTrace> measured_trace_from_chrome(const Json& doc, const Plan& plan,
                                                 const std::string& source) {
  auto bad = [&](const std::string& what) {
    return invalid_argument(fmt::format("{}: {}", source, what));
  };
  if (!doc.is_object() || !doc.contains("otherData") || !doc["otherData"].is_object() ||
      !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    return bad("not a measured trace (traceEvents and otherData expected)");
  }
  const Json& other = doc["otherData"];
  if (!other.contains("step_time_s") || !other["step_time_s"].is_array() ||
      !other.contains("step_offsets_s") || !other["step_offsets_s"].is_array() ||
      !other.contains("first_step") || !other["first_step"].is_number_integer()) {
    return bad("otherData lacks step_time_s, step_offsets_s or first_step");
  }
  const RankLayout layout(plan);
  const int world = layout.world_size();
  const Json& times = other["step_time_s"];
  if (static_cast<int>(times.size()) != world) {
    return bad(fmt::format("step_time_s has {} ranks, the plan {}", times.size(), world));
  }
  std::vector<double> offsets;
  for (const Json& o : other["step_offsets_s"]) {
    if (!o.is_number()) return bad("step_offsets_s: expected numbers");
    offsets.push_back(o.get<double>());
  }
  const int64_t first_step = other["first_step"].get<int64_t>();
  MeasuredTrace trace;
  for (int r = 0; r < world; ++r) {
    const RankPlace place = layout.place_of(r);
    MeasuredRank rank;
    rank.rank = r;
    rank.replica = place.replica;
    rank.group = place.group;
    rank.device = place.device;
    if (!times[r].is_array()) return bad("step_time_s: expected a list per rank");
    for (const Json& t : times[r]) {
      if (!t.is_number()) return bad("step_time_s: expected numbers");
      rank.step_times.push_back(Seconds(t.get<double>()));
    }
    trace.ranks.push_back(std::move(rank));
  }
  for (const Json& e : doc["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    const Json args = e.value("args", Json::object());
    if (!args.is_object() || !args.contains("rank") || !args.contains("step") ||
        !args["rank"].is_number_integer() || !args["step"].is_number_integer()) {
      return bad("an event without integer args.rank and args.step");
    }
    const std::string cat = e.value("cat", ""), name = e.value("name", "");
    if (cat == "all-reduce" && name != "all_reduce") continue;  // a gradient sum
    const int64_t r = args["rank"].get<int64_t>();
    const int64_t k = args["step"].get<int64_t>() - first_step;
    if (r < 0 || r >= world || k < 0 || k + 1 >= static_cast<int64_t>(offsets.size())) {
      return bad(fmt::format("an event of rank {} step {} outside the run", r, k + first_step));
    }
    MOTLEY_ASSIGN_OR_RETURN(MeasuredKind kind, measured_kind(cat, name, source));
    MeasuredEvent ev;
    ev.kind = kind;
    ev.step = k;
    ev.stage = args.value("stage", -1);
    ev.micro_batch = args.value("micro_batch", -1);
    ev.start = Seconds(e.value("ts", 0.0) * 1e-6 - offsets[static_cast<size_t>(k)]);
    ev.duration = Seconds(e.value("dur", 0.0) * 1e-6);
    trace.ranks[static_cast<size_t>(r)].events.push_back(ev);
  }
  return trace;
}

// The cost model the plan is priced with: its model, or the measured profile standing in for
// it layer for layer.
Result<ModelSpec> pricing_model(const FidelityCommandOptions& opt, const PlanInputs& in) {
  if (opt.profile.empty()) return in.model;
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec profile, load_model(opt.profile));
  if (profile.layers.size() != in.model.layers.size()) {
    return invalid_argument(fmt::format(
        "--profile {}: {} layers, but the plan's model '{}' has {}; a profile prices the plan's "
        "model layer for layer",
        opt.profile, profile.layers.size(), in.model.name, in.model.layers.size()));
  }
  return profile;
}

std::string error_cell(const FidelityFigure& f) {
  return f.error_pct ? fmt::format("{:+.1f}%", *f.error_pct) : "-";
}

std::string text_report(const FidelityCommandOptions& opt, const PlanInputs& in,
                        const FidelityReport& r) {
  std::string text = fmt::format(
      "fidelity of {} ({} on {}, schedule {}): {} steps run, the first {} dropped as warm-up, "
      "medians of {}\npriced with {}\n\n",
      opt.plan, in.model.name, in.cluster.name, in.plan.schedule, r.steps_measured, opt.warmup,
      r.steps_used,
      opt.profile.empty() ? "the plan's model (analytic unless its layers are measured)"
                          : "the measured profile " + opt.profile);
  using Align = TextTable::Align;
  TextTable head({"", "predicted", "measured", "error"});
  head.set_alignment({Align::kLeft, Align::kRight, Align::kRight, Align::kRight});
  head.add_row({"iteration", format_time(Seconds(r.iteration.predicted_s)),
                format_time(Seconds(r.iteration.measured_s)), error_cell(r.iteration)});
  text += head.to_string();
  text +=
      fmt::format("measured iterations after the warm-up: {} to {}\n\n",
                  format_time(Seconds(r.iteration_min_s)), format_time(Seconds(r.iteration_max_s)));
  TextTable devices({"rank", "device", "step pred", "step meas", "error", "busy pred", "busy meas",
                     "error", "idle pred", "idle meas", "error"});
  devices.set_alignment(std::vector<Align>(11, Align::kRight));
  for (const DeviceFidelity& d : r.devices) {
    devices.add_row(
        {std::to_string(d.rank), std::to_string(d.device), format_time(Seconds(d.step.predicted_s)),
         format_time(Seconds(d.step.measured_s)), error_cell(d.step),
         format_time(Seconds(d.busy.predicted_s)), format_time(Seconds(d.busy.measured_s)),
         error_cell(d.busy), format_time(Seconds(d.idle.predicted_s)),
         format_time(Seconds(d.idle.measured_s)), error_cell(d.idle)});
  }
  text += devices.to_string() + "\n";
  TextTable kinds({"kind (summed over devices)", "predicted", "measured", "error"});
  kinds.set_alignment({Align::kLeft, Align::kRight, Align::kRight, Align::kRight});
  for (const FidelityFigure& f : r.kinds) {
    kinds.add_row({f.name, format_time(Seconds(f.predicted_s)), format_time(Seconds(f.measured_s)),
                   error_cell(f)});
  }
  text += kinds.to_string();
  text += fmt::format("\ndevice step error, absolute: mean {:.1f}%, max {:.1f}%\n",
                      r.mean_abs_device_error_pct, r.max_abs_device_error_pct);
  return text;
}

}  // namespace

Status fidelity_command(const FidelityCommandOptions& opt) {
  if (opt.plan.empty()) return invalid_argument("--plan: give the plan file to run");
  if (opt.steps <= opt.warmup) {
    return invalid_argument(
        fmt::format("--steps {} with --warmup {}: run more steps than are dropped as warm-up",
                    opt.steps, opt.warmup));
  }
  if (!opt.trace.empty()) MOTLEY_RETURN_IF_ERROR(check_output_file("--trace", opt.trace));
  RunOptions run;
  run.plan = opt.plan;
  MOTLEY_ASSIGN_OR_RETURN(const PlanInputs in, load_run_inputs(run));
  MOTLEY_RETURN_IF_ERROR(validate_run_inputs(in, run));

  // The prediction first: a plan the simulator cannot price is refused before anything runs.
  MOTLEY_ASSIGN_OR_RETURN(const ModelSpec priced, pricing_model(opt, in));
  MOTLEY_ASSIGN_OR_RETURN(
      std::unique_ptr<AnalyticCostModel> cost,
      AnalyticCostModel::create(priced, in.cluster,
                                AnalyticCostOptions{plan_workload(in.plan, priced)},
                                opt.profile.empty() ? opt.plan : opt.profile));
  SimOptions sim_options;
  sim_options.source = opt.plan;
  sim_options.record_timeline = true;
  MOTLEY_ASSIGN_OR_RETURN(const SimResult predicted, simulate(sim_options, in.plan, *cost));

  ScratchDir scratch;
  if (scratch.path().empty()) {
    return io_error(std::string("fidelity: cannot create a temporary directory: ") +
                    std::strerror(errno));
  }
  const std::string trace = opt.trace.empty() ? scratch.path() + "/trace.json" : opt.trace;
  const int world = RankLayout(in.plan).world_size();
  MOTLEY_RETURN_IF_ERROR(
      run_self({"launch", "--nproc", std::to_string(world), "--", "run", "--plan", opt.plan,
                "--steps", std::to_string(opt.steps), "--threads", "1", "--timeout",
                fmt::format("{}", opt.timeout_s), "--trace", trace, "--json"},
               scratch.path()));
  MOTLEY_ASSIGN_OR_RETURN(const Json doc, read_json_file(trace));
  MOTLEY_ASSIGN_OR_RETURN(const MeasuredTrace measured,
                          measured_trace_from_chrome(doc, in.plan, trace));
  FidelityOptions options;
  options.warmup_steps = opt.warmup;
  MOTLEY_ASSIGN_OR_RETURN(const FidelityReport report,
                          fidelity_report(options, predicted, measured));
  if (opt.json) {
    Json out{{"plan", opt.plan},
             {"model", in.model.name},
             {"cluster", in.cluster.name},
             {"schedule", in.plan.schedule},
             {"world_size", world},
             {"priced_with", opt.profile.empty() ? "plan model" : opt.profile},
             {"warmup_steps", opt.warmup}};
    out.update(fidelity_report_to_json(report));
    if (!opt.trace.empty()) out["trace"] = opt.trace;
    std::fputs((out.dump(2) + "\n").c_str(), stdout);
  } else {
    std::string text = text_report(opt, in, report);
    if (!opt.trace.empty()) text += "trace: " + opt.trace + "\n";
    std::fputs(text.c_str(), stdout);
  }
  return Status::ok();
}

void add_fidelity_command(CLI::App& app, Action* action) {
  auto opt = std::make_shared<FidelityCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "fidelity", "Run a plan with the executor and compare the measured steps with the simulator");
  cmd->footer(
      "Runs the plan on local CPU ranks as 'motley launch --nproc N -- run --plan P --threads 1'\n"
      "does (one process per device, Gloo over TCP, one intra-op thread each), simulates it with\n"
      "the cost model the plan is priced with, and compares the iteration time, each device's\n"
      "step, busy and idle time, and the time per kind of work. The first --warmup steps are\n"
      "dropped; every measured figure is the median of the rest. error = (predicted - measured)\n"
      "/ measured. A comparison means something only when the plan is priced with times measured\n"
      "on this CPU: give --profile, a motley.profile/1 file of the plan's model measured here\n"
      "(docs/fidelity.md).\n"
      "Example: motley fidelity --plan plan.json --profile cpu-profile.json --steps 8 --json");
  cmd->add_option("--plan", opt->plan, "The plan file to run and simulate")->required();
  cmd->add_option("--profile", opt->profile,
                  "A motley.profile/1 (or motley.model/1) file pricing the plan's model layer for "
                  "layer (default: the plan's own model)");
  cmd->add_option("--steps", opt->steps, "Training steps to run")
      ->check(integer_in(1, kMaxOptionCount))
      ->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "Steps dropped from the start before the medians")
      ->check(integer_in(0, kMaxOptionCount))
      ->capture_default_str();
  cmd->add_option("--trace", opt->trace, "Keep the measured Chrome trace in this file");
  cmd->add_option("--timeout", opt->timeout_s,
                  "Seconds any wait on another rank may take before the run fails")
      ->check(positive_number(kMaxOptionSeconds))
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->callback([opt, action] { *action = [opt] { return fidelity_command(*opt); }; });
}

}  // namespace motley::cli
