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
#include "cost_options.h"
#include "measured_trace.h"
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
  if (in.plan.context_parallel > 1 && !splits_sequences(in.plan)) {
    return invalid_argument(fmt::format(
        "{}: field 'context_parallel': the replicas of a context-parallel group differ in their "
        "device groups or action orders, so the executor runs context parallelism {} with every "
        "member computing whole sequences, not the 1/{} of each that the simulator prices; "
        "compare a plan whose groups' replicas are alike, or one without it (context_parallel 1)",
        opt.plan, in.plan.context_parallel, in.plan.context_parallel));
  }

  // The prediction first: a plan the simulator cannot price is refused before anything runs.
  MOTLEY_ASSIGN_OR_RETURN(const ModelSpec priced, profile_pricing_model(opt.profile, in.model));
  MOTLEY_ASSIGN_OR_RETURN(const AnalyticCostOptions cost_options,
                          plan_cost_options(in.plan, priced, in.cluster, opt.stack, opt.plan));
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<AnalyticCostModel> cost,
                          AnalyticCostModel::create(priced, in.cluster, cost_options,
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
      ->check(wait_seconds())
      ->capture_default_str();
  add_stack_options(cmd, &opt->stack);
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->callback([opt, action] { *action = [opt] { return fidelity_command(*opt); }; });
}

}  // namespace motley::cli
