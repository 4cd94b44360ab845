// `motley run`: trains the plan's model under a plan file with the executor — every rank as a
// thread of this process, or this process's one rank of a torch-style distributed job — or the
// sequential reference; prints a line per step (or one JSON object) and optionally writes a
// checkpoint and the measured Chrome trace. With --emulate, each rank's compute and each message
// is slowed to stand in for the plan's devices and links, by factors motley computed
// (run_emulation.h). The one command that includes libtorch.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "motley/core/json.h"
#include "motley/core/output_files.h"
#include "motley/exec/checkpoint_store.h"
#include "motley/exec/compute_device.h"
#include "motley/exec/data.h"
#include "motley/exec/emulation.h"
#include "motley/exec/emulation_factors.h"
#include "motley/exec/executor.h"
#include "motley/exec/gloo_transport.h"
#include "motley/exec/host_memory.h"
#include "motley/exec/nccl_transport.h"
#include "motley/exec/precision.h"
#include "motley/exec/rank_layout.h"
#include "motley/exec/reference.h"
#include "motley/exec/train.h"
#include "motley/report/chrome_trace.h"
#include "motley/report/timeline.h"
#include "motley/report/units_format.h"
#include "option_checks.h"
#include "rank_traces.h"
#include "run_options.h"
#if MOTLEY_TEST_HOOKS
#include "run_fault_hook.h"
#endif

#ifndef MOTLEY_DATA_DIR
#define MOTLEY_DATA_DIR "data"
#endif

namespace motley::cli {
namespace {

// The text trained on when --data is not given (data/README.md names its sources).
constexpr const char* kDefaultDataFile = MOTLEY_DATA_DIR "/gettysburg-declaration.txt";
constexpr int64_t kSyntheticBytes = int64_t{1} << 16;

// Where this process's rank comes from: none (every rank as a thread), or the variables a
// torch-style launcher (torchrun, motley launch, Slurm scripts) or mpirun sets.
struct Distributed {
  GlooOptions gloo;
  int local_world_size = 0;  // 0: unknown
  int local_rank = -1;       // -1: unknown
  // MOTLEY_LOCAL_DEVICE as the exports' launch scripts set it: the index on its node of the plan
  // device this rank runs (empty: unset).
  std::string local_device;
};

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

Result<std::optional<Distributed>> distributed_from_env() {
  const bool torch_style = env("WORLD_SIZE") != nullptr;
  const bool mpi = !torch_style && env("OMPI_COMM_WORLD_SIZE") != nullptr;
  if (!torch_style && !mpi) return std::optional<Distributed>();
  auto get = [mpi](const char* name) -> const char* {
    const std::string n = name;
    if (mpi && n == "RANK") return env("OMPI_COMM_WORLD_RANK");
    if (mpi && n == "WORLD_SIZE") return env("OMPI_COMM_WORLD_SIZE");
    return env(name);
  };
  Distributed d;
  MOTLEY_ASSIGN_OR_RETURN(d.gloo, gloo_options_from_env(get));
  const char* local = env(mpi ? "OMPI_COMM_WORLD_LOCAL_SIZE" : "LOCAL_WORLD_SIZE");
  if (local != nullptr) d.local_world_size = std::max(0, std::atoi(local));
  const char* local_rank = env(mpi ? "OMPI_COMM_WORLD_LOCAL_RANK" : "LOCAL_RANK");
  if (local_rank != nullptr) d.local_rank = std::max(0, std::atoi(local_rank));
  if (const char* device = env("MOTLEY_LOCAL_DEVICE")) d.local_device = device;
  // Every rank meets at a loopback address only when all run on this machine: bind Gloo there
  // too, whatever the hostname resolves to.
  if (d.gloo.interface.empty() &&
      (d.gloo.master_addr == "127.0.0.1" || d.gloo.master_addr == "localhost")) {
    d.gloo.hostname = "127.0.0.1";
  }
  return std::optional<Distributed>(d);
}

// The executor trains on this CPU (exec/host_memory.h): a plan whose training state does not
// fit is refused, saying what it needs and what there is.
Status check_host_memory(const std::string& source, const Plan& plan, const ModelSpec& model,
                         bool sequential, int only_rank, int local_ranks) {
  const std::optional<HostMemoryShortfall> shortfall = host_memory_shortfall(
      plan, model, sequential, only_rank, local_ranks, available_memory_bytes());
  if (!shortfall) return Status::ok();
  const int ranks = shortfall->needed.ranks;
  const std::string where =
      only_rank >= 0 ? fmt::format("rank {} needs", only_rank)
                     : fmt::format("{} in this process need{}",
                                   ranks == 1 ? "its one rank" : fmt::format("its {} ranks", ranks),
                                   ranks == 1 ? "s" : "");
  return invalid_argument(fmt::format(
      "{}: training model '{}' here: {} at least {} for fp32 weights, gradients and AdamW "
      "moments (16 bytes per parameter{}), but this machine has {} available{}; the executor "
      "trains on this CPU, so run it with a model that fits (e.g. a plan for tiny-llama: "
      "motley simulate --model tiny-llama --schedule 1f1b --stages 4 --out plan.json)",
      source, model.name, where, format_bytes(shortfall->needed.bytes),
      plan.zero_stage >= 1 && !sequential ? ", moments sharded by ZeRO-1" : "",
      format_bytes(shortfall->available),
      shortfall->local_ranks > 1
          ? fmt::format(" (a share of 1/{} per rank)", shortfall->local_ranks)
          : ""));
}

// ---------------------------------------------------------------------------------------------
// Emulation: motley's factors (read from the descriptor it handed over) and this CPU's scale.

struct Emulation {
  EmulationFactors factors;
  double time_scale = 0;  // emulated seconds per second of the cluster
  EmulationOptions options;
};

// What motley wrote into `fd` (run_emulation.h): the factors, or the error it met. Closes `fd`.
Result<EmulationFactors> read_emulation_factors(int fd) {
  const std::string source =
      fmt::format("the emulation's factors from motley (--emulation-fd {})", fd);
  if (fd < 0) {
    return invalid_argument(
        "--emulate: the emulation's factors come from motley, which computes them with the cost "
        "model and the simulator; run it as 'motley run ... --emulate'");
  }
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      return io_error(fmt::format("{}: {}", source, why));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  MOTLEY_ASSIGN_OR_RETURN(Json json, parse_json(text, source));
  return emulation_factors_from_json(json, source);
}

// The factors, the time scale measured here (agreed on by the world when there is one) and
// the options they make. REQUIRES: the factors were computed for `plan` with `opt`'s speeds.
Result<Emulation> start_emulation(const RunOptions& opt, const ExecOptions& exec, const Plan& plan,
                                  const ModelSpec& model, const TokenStream& tokens,
                                  Transport* world) {
  Emulation e;
  MOTLEY_ASSIGN_OR_RETURN(e.factors, read_emulation_factors(opt.emulation_fd));
  if (e.factors.speeds != opt.emulate_speeds ||
      static_cast<int>(e.factors.compute_slowdown.size()) != RankLayout(plan).world_size()) {
    return internal_error("the emulation's factors from motley are not for this run");
  }
  MOTLEY_ASSIGN_OR_RETURN(
      e.time_scale, emulation_time_scale(exec, plan, model, tokens, e.factors.cluster_step, world));
  e.options = emulation_options(e.factors, e.time_scale);
  return e;
}

// ---------------------------------------------------------------------------------------------
// What the ranks report, gathered across their threads.

struct RankStep {
  Seconds time;
  std::vector<TraceEvent> events;
  int64_t optimizer_state_bytes = 0;
};

// Per rank, the mean over steps (after the first, which allocates, when there are several) of
// where a step's wall time went.
struct Breakdown {
  double step = 0;
  double compute = 0;     // compute actions from their inputs' arrival to their end
  double waiting = 0;     // for inputs (exposed communication and bubbles) and for sends
  double send_post = 0;   // posting sends
  double all_reduce = 0;  // gradient sums across replicas
  double optimizer = 0;
  double other = 0;  // the rest: the interpreter's own bookkeeping, receive posting
};

Breakdown breakdown_of(const std::vector<RankStep>& steps) {
  Breakdown b;
  const size_t first = steps.size() > 1 ? 1 : 0;
  for (size_t i = first; i < steps.size(); ++i) {
    b.step += steps[i].time.value();
    for (const TraceEvent& e : steps[i].events) {
      const double span = (e.end - e.start).value();
      switch (e.kind) {
        case TraceEvent::Kind::kAction:
          b.compute += (e.end - e.ready).value();
          b.waiting += (e.ready - e.start).value();
          break;
        case TraceEvent::Kind::kSend:
          b.send_post += span;
          break;
        case TraceEvent::Kind::kFinishSends:
          b.waiting += span;
          break;
        case TraceEvent::Kind::kAllReduce:
          b.all_reduce += span;
          break;
        case TraceEvent::Kind::kGradientSum:
          break;  // overlaps the actions; its exposed part is the kAllReduce wait
        case TraceEvent::Kind::kOptimizer:
          b.optimizer += span;
          break;
      }
    }
  }
  const double n = static_cast<double>(steps.size() - first);
  if (n > 0) {
    for (double* v : {&b.step, &b.compute, &b.waiting, &b.send_post, &b.all_reduce, &b.optimizer}) {
      *v /= n;
    }
  }
  b.other = b.step - b.compute - b.waiting - b.send_post - b.all_reduce - b.optimizer;
  return b;
}

TimelineKind timeline_kind_of(const TraceEvent& e) {
  switch (e.kind) {
    case TraceEvent::Kind::kAction:
      switch (e.action->kind) {
        case ActionKind::kForward:
          return TimelineKind::kForward;
        case ActionKind::kBackwardInput:
          return TimelineKind::kBackwardInput;
        case ActionKind::kBackwardWeight:
          return TimelineKind::kBackwardWeight;
        case ActionKind::kBackward:
          return TimelineKind::kBackward;
        case ActionKind::kRecompute:
          return TimelineKind::kRecompute;
      }
      break;
    case TraceEvent::Kind::kSend:
    case TraceEvent::Kind::kFinishSends:
      return TimelineKind::kTransfer;
    case TraceEvent::Kind::kAllReduce:
    case TraceEvent::Kind::kGradientSum:
      return TimelineKind::kAllReduce;
    case TraceEvent::Kind::kOptimizer:
      return TimelineKind::kOptimizerStep;
  }
  return TimelineKind::kForward;
}

// Where each step begins on the trace's time axis: steps laid end to end, step k starting when
// the slowest rank's step k - 1 ended. `step_times[r][k]` is rank r's wall time of step k, for
// every rank of the world; the last element is the end of the last step.
std::vector<double> step_offsets(const std::vector<std::vector<double>>& step_times) {
  size_t steps = 0;
  for (const std::vector<double>& times : step_times) steps = std::max(steps, times.size());
  std::vector<double> offsets = {0};
  for (size_t k = 0; k < steps; ++k) {
    double longest = 0;
    for (const std::vector<double>& times : step_times) {
      if (k < times.size()) longest = std::max(longest, times[k]);
    }
    offsets.push_back(offsets.back() + longest);
  }
  return offsets;
}

// One compute track per rank in `by_rank` (every rank in thread mode, this process's under
// WORLD_SIZE), listed in pipeline order (order_tracks); each rank's step aligned at its start
// (ranks' clocks are not aligned with each other) at the offset step_offsets gives, so that the
// per-rank traces of a distributed run place their events where the thread mode's one trace would.
// An action that waited for its input shows the wait as a separate box.
Timeline measured_timeline(const std::map<int, std::vector<RankStep>>& by_rank,
                           const std::vector<double>& offsets,
                           const std::vector<std::string>& track_names, int64_t first_step,
                           const Plan& plan) {
  Timeline t;
  const RankLayout layout(plan);
  std::map<int, int> track_of;
  for (const auto& [rank, steps] : by_rank) {
    TimelineTrack track;
    track.name = track_names[rank];
    track.sort_key = rank;
    track.replica = layout.place_of(rank).replica;
    track.first_stage = layout.stages_of(rank).empty() ? -1 : layout.stages_of(rank).front();
    track_of[rank] = static_cast<int>(t.tracks.size());
    t.tracks.push_back(track);
  }
  // A rank's gradient sums overlap its actions and each other: a collective track of their own.
  std::map<int, int> sums_track_of;
  auto sums_track = [&](int rank) {
    auto it = sums_track_of.find(rank);
    if (it != sums_track_of.end()) return it->second;
    TimelineTrack track;
    track.name = "rank " + std::to_string(rank) + ": gradient sums";
    track.role = TrackRole::kCollective;
    track.sort_key = rank;
    track.replica = layout.place_of(rank).replica;
    t.tracks.push_back(track);
    return sums_track_of[rank] = static_cast<int>(t.tracks.size()) - 1;
  };
  for (const auto& [rank, s] : by_rank) {
    const std::vector<int>& stages = layout.stages_of(rank);
    for (size_t k = 0; k < s.size() && k + 1 < offsets.size(); ++k) {
      const Seconds offset(offsets[k]);
      for (const TraceEvent& e : s[k].events) {
        TimelineEvent ev;
        ev.track = e.kind == TraceEvent::Kind::kGradientSum ? sums_track(rank) : track_of[rank];
        ev.kind = timeline_kind_of(e);
        ev.name = e.name;
        ev.start = offset + e.start;
        ev.end = offset + e.end;
        ev.args = Json{{"rank", rank}, {"step", first_step + static_cast<int64_t>(k)}};
        if (e.action) {
          ev.args["stage"] = e.action->stage;
          ev.args["micro_batch"] = e.action->micro_batch;
          ev.label = std::to_string(e.action->micro_batch);
          ev.chunk = static_cast<int>(std::find(stages.begin(), stages.end(), e.action->stage) -
                                      stages.begin());
          if (e.ready.value() > e.start.value()) {
            TimelineEvent wait = ev;
            wait.kind = TimelineKind::kTransfer;
            wait.name = "wait for " + e.name;
            wait.label.clear();
            wait.end = offset + e.ready;
            t.events.push_back(wait);
            ev.start = offset + e.ready;
          }
        }
        t.events.push_back(std::move(ev));
      }
    }
  }
  t.span = Seconds(offsets.back());
  order_tracks(&t);
  return t;
}

// Every rank's step times, [rank][step], from this rank's (`mine`): an all-gather as a sum over
// the world of a zero-filled [world, steps] matrix in which each rank fills its own row; adding
// zeros is exact, so every rank gets the times bit for bit. REQUIRES: every rank of the world
// calls it, with the same `steps`, after its last step.
Result<std::vector<std::vector<double>>> gather_step_times(Transport& world,
                                                           const std::vector<RankStep>& mine,
                                                           int64_t steps) {
  const int64_t n = world.world_size();
  at::Tensor times = at::zeros({n, steps}, at::kDouble);  // contiguous, row-major
  double* row = times.data_ptr<double>() + world.rank() * steps;
  for (int64_t k = 0; k < steps && k < static_cast<int64_t>(mine.size()); ++k) {
    row[k] = mine[k].time.value();
  }
  std::vector<int> all(n);
  for (int r = 0; r < n; ++r) all[r] = r;
  MOTLEY_RETURN_IF_ERROR(world.all_reduce_sum({times}, all)
                             .with_context("exchanging the ranks' step times for the trace"));
  std::vector<std::vector<double>> out;
  const double* gathered = times.data_ptr<double>();
  for (int64_t r = 0; r < n; ++r) {
    out.emplace_back(gathered + r * steps, gathered + (r + 1) * steps);
  }
  return out;
}

std::string step_line(int64_t step, double loss, Seconds time, double tokens) {
  return fmt::format("step {:>4}  loss {:.6f}  time {:>9}  {}\n", step, loss, format_time(time),
                     format_tokens_per_second(tokens / time.value()));
}

// ---------------------------------------------------------------------------------------------
// The steps of a run.

Status check_options(const RunOptions& opt) {
  MOTLEY_RETURN_IF_ERROR(check_run_options(opt));
  MOTLEY_ASSIGN_OR_RETURN(const c10::Device device, parse_compute_device(opt.device));
  if (device.is_cuda() && (opt.sequential || opt.emulate)) {
    return invalid_argument(fmt::format(
        "--device {}: {} runs on the CPU; give --device cpu", opt.device,
        opt.sequential ? "--sequential (the reference)" : "--emulate (scaled CPU time)"));
  }
  if (opt.transport == "nccl" && !device.is_cuda()) {
    return invalid_argument("--transport nccl moves GPU tensors: give --device cuda");
  }
  return Status::ok();
}

Result<TokenStream> load_tokens(const RunOptions& opt) {
  if (opt.data == "synthetic") {
    return TokenStream::from_text(synthetic_corpus(kSyntheticBytes, 0), "synthetic corpus");
  }
  if (!opt.data.empty()) return TokenStream::from_file(opt.data);
  if (!std::filesystem::exists(kDefaultDataFile)) {
    return not_found(std::string(kDefaultDataFile) +
                     ": the default training text is missing; give --data FILE or --data "
                     "synthetic");
  }
  return TokenStream::from_file(kDefaultDataFile);
}

// How this process runs: every rank as a thread, one rank of a distributed job, or the
// sequential reference; and the intra-op threads its ranks get.
struct Mode {
  std::string name;  // "threads", "gloo" or "sequential"
  std::optional<Distributed> dist;
  int world = 0;        // ranks of the plan
  int cores = 1;        // of this machine
  int local_ranks = 1;  // ranks sharing them
  int threads = 1;      // intra-op threads per rank
  // Where this process's ranks compute (as threads, all on one device) and the transport name
  // under WORLD_SIZE ("gloo" or "nccl").
  c10::Device device = c10::kCPU;
  std::string transport = "gloo";
  int rank() const { return dist ? dist->gloo.rank : -1; }
};

// The mode from the environment, refusing a world of another size and a training state this
// machine cannot hold.
Result<Mode> choose_mode(const RunOptions& opt, const RunInputs& in) {
  Mode mode;
  mode.world = RankLayout(in.plan).world_size();
  MOTLEY_ASSIGN_OR_RETURN(mode.dist, distributed_from_env());
  const std::optional<Distributed>& dist = mode.dist;
  if (dist && dist->gloo.world_size != mode.world) {
    return invalid_argument(fmt::format(
        "{0}: the plan has {1} devices (one rank each) but WORLD_SIZE is {2}; start {1} ranks "
        "(motley launch --nproc {1} -- run ...) or unset WORLD_SIZE to run every rank as a thread",
        opt.plan, mode.world, dist->gloo.world_size));
  }
  if (dist && opt.sequential) {
    return invalid_argument("--sequential runs in one process; unset WORLD_SIZE");
  }
  MOTLEY_ASSIGN_OR_RETURN(const c10::Device requested, parse_compute_device(opt.device));
  // A bare `cuda` under WORLD_SIZE: the node's GPU the launch script names for this rank's plan
  // device (MOTLEY_LOCAL_DEVICE, set by the exports' scripts), else the local rank's.
  int local = dist ? (dist->local_rank >= 0 ? dist->local_rank : dist->gloo.rank) : 0;
  if (dist && requested.is_cuda() && !requested.has_index() && !dist->local_device.empty()) {
    char* end = nullptr;
    const long index = std::strtol(dist->local_device.c_str(), &end, 10);
    if (*end != '\0' || index < 0 || index > 4095 ||
        !std::isdigit(static_cast<unsigned char>(dist->local_device[0]))) {
      return invalid_argument(fmt::format(
          "environment variable MOTLEY_LOCAL_DEVICE: expected the GPU's index on its node (an "
          "integer >= 0), got '{}'",
          dist->local_device));
    }
    local = static_cast<int>(index);
  }
  MOTLEY_ASSIGN_OR_RETURN(mode.device, resolve_compute_device(requested, local));
  const bool nccl = opt.transport == "nccl" || (opt.transport == "auto" && mode.device.is_cuda());
  mode.transport = nccl ? "nccl" : "gloo";
  if (mode.device.is_cpu()) {  // on a GPU the training state is not in this machine's memory
    MOTLEY_RETURN_IF_ERROR(check_host_memory(opt.plan, in.plan, in.model, opt.sequential,
                                             mode.rank(),
                                             dist ? std::max(1, dist->local_world_size) : 1));
  }
  mode.name = opt.sequential ? "sequential" : dist ? mode.transport : "threads";
  mode.cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  mode.local_ranks = opt.sequential ? 1 : dist ? std::max(1, dist->local_world_size) : mode.world;
  mode.threads = opt.threads.value_or(std::max(1, mode.cores / mode.local_ranks));
  return mode;
}

// The file --trace names for this process: under WORLD_SIZE its rank's (rank_trace_path).
std::string trace_file(const RunOptions& opt, const Mode& mode) {
  return mode.dist ? rank_trace_path(opt.trace, mode.rank()) : opt.trace;
}

// Before anything is trained: the trace file and the checkpoint directory can be written; a
// run that does not resume finds no checkpoint there to bury under its own (nothing a user
// saved is lost); and the directory holds nothing a killed save left (removed by one process of
// a job, before any rank can save).
Status prepare_outputs(const RunOptions& opt, const Mode& mode) {
  if (!opt.trace.empty()) {
    MOTLEY_RETURN_IF_ERROR(check_output_file("--trace", trace_file(opt, mode)));
  }
  if (opt.checkpoint_dir.empty()) return Status::ok();
  MOTLEY_RETURN_IF_ERROR(check_output_directory("--checkpoint-dir", opt.checkpoint_dir));
  if (!opt.resume) {
    const Result<std::string> found = find_checkpoint(opt.checkpoint_dir);
    if (found.is_ok()) {
      return invalid_argument(fmt::format(
          "--checkpoint-dir: {} already holds a checkpoint ({}); add --resume to continue from "
          "it, or give another directory",
          opt.checkpoint_dir, *found));
    }
    if (found.status().code() != StatusCode::kNotFound) return found.status();
  }
  return mode.rank() <= 0 ? clean_checkpoint_directory(opt.checkpoint_dir) : Status::ok();
}

// Intra-op threads: the ranks of this process (or of this machine) share its cores.
void limit_threads(const Mode& mode) {
  ::setenv("OPENBLAS_NUM_THREADS", std::to_string(mode.threads).c_str(), 1);
  set_intra_op_threads(mode.threads);
}

// Seed, learning rate, precision and device; a note on stderr (and in `*note`) when bf16 was
// asked for on the CPU and this libtorch cannot.
ExecOptions exec_options(const RunOptions& opt, const Mode& mode, std::string* note) {
  ExecOptions exec;
  exec.seed = opt.seed;
  exec.optimizer.learning_rate = opt.learning_rate;
  exec.device = mode.device;
  const Precision requested = opt.precision == "bf16" ? Precision::kBf16Autocast : Precision::kFp32;
  exec.precision = mode.device.is_cpu() ? effective_precision(requested) : requested;
  if (exec.precision != requested) {
    std::string why;
    cpu_bf16_autocast_available(&why);
    *note = fmt::format(
        "--precision bf16: this libtorch cannot autocast to bf16 on the CPU ({}); running in fp32",
        why);
    std::fprintf(stderr, "motley: note: %s\n", note->c_str());
  }
  return exec;
}

double tokens_per_step(const Plan& plan) {
  return static_cast<double>(plan.global_batch) * static_cast<double>(plan.seq_len);
}

// The --json fields every mode prints.
Json run_header(const RunOptions& opt, const RunInputs& in, const Mode& mode,
                const ExecOptions& exec, const std::string& precision_note) {
  Json out{{"mode", mode.name},
           {"plan", opt.plan},
           {"model", in.model.name},
           {"cluster", in.cluster.name},
           {"schedule", in.plan.schedule},
           {"world_size", opt.sequential ? 1 : mode.world},
           {"threads_per_rank", mode.threads},
           {"precision", precision_name(exec.precision)},
           {"device", exec.device.str()},
           {"global_batch", in.plan.global_batch},
           {"seq_len", in.plan.seq_len},
           {"tokens_per_step", tokens_per_step(in.plan)}};
  if (!precision_note.empty()) out["precision_note"] = precision_note;
  return out;
}

// The sequential reference: a line per step, or `out` completed and printed.
Status run_sequential(const RunOptions& opt, const RunInputs& in, const ExecOptions& exec,
                      const TokenStream& tokens, Json out) {
  MOTLEY_ASSIGN_OR_RETURN(auto trainer, SequentialTrainer::create(exec, in.plan, in.model, tokens));
  std::vector<double> losses, times;
  for (int64_t s = 0; s < opt.steps; ++s) {
    const auto start = std::chrono::steady_clock::now();
    MOTLEY_ASSIGN_OR_RETURN(double loss, trainer->step());
    const std::chrono::duration<double> t = std::chrono::steady_clock::now() - start;
    losses.push_back(loss);
    times.push_back(t.count());
    if (!opt.json) {
      std::fputs(step_line(s, loss, Seconds(t.count()), tokens_per_step(in.plan)).c_str(), stdout);
      std::fflush(stdout);
    }
  }
  double total = 0;
  for (double t : times) total += t;
  out["first_step"] = 0;
  out["losses"] = losses;
  out["step_time_s"] = times;
  out["tokens_per_s"] = tokens_per_step(in.plan) * static_cast<double>(opt.steps) / total;
  if (opt.json) std::fputs((out.dump(2) + "\n").c_str(), stdout);
  return Status::ok();
}

// What an executor run leaves for the trace and the output.
struct ExecutorRun {
  std::unique_ptr<Transport> transport;  // this rank's, under WORLD_SIZE
  int reporter = 0;                      // the rank that prints: replica 0's loss
  std::optional<Emulation> emulation;
  std::map<int, std::vector<RankStep>> by_rank;
  TrainReport report;
  std::vector<std::string> rank_types;   // per rank, its device's type
  std::vector<std::string> track_names;  // per rank, for the trace
};

// The text saying the run is an emulation and how each rank is slowed.
std::string emulation_banner(const RunOptions& opt, const RunInputs& in, const Mode& mode,
                             const Emulation& emulation) {
  std::string text = fmt::format(
      "EMULATION on this CPU, not a measurement of {}: compute of each rank slowed by {} "
      "relative to the fastest, messages and all-reduces delayed by the cost model's times "
      "x {:.4g} (native CPU seconds per cluster second)\n",
      in.cluster.name,
      opt.emulate_speeds == "cost" ? "the cost model's time for its stages"
                                   : "its device's peak rate",
      emulation.time_scale);
  if (mode.local_ranks > mode.cores) {
    text += fmt::format(
        "  note: {} ranks share {} cores here, so they also wait for each other's CPU time; "
        "the emulated step is at least the total work / {}\n",
        mode.local_ranks, mode.cores, mode.cores);
  }
  for (int r = 0; r < mode.world; ++r) {
    text += fmt::format("  rank {} ({}): compute x {:.3g}\n", r, emulation.factors.device_types[r],
                        emulation.options.compute_slowdown[r]);
  }
  return text;
}

// Per rank, its device's type and its track's name in the trace.
void name_ranks(const RunInputs& in, const Mode& mode, ExecutorRun* run) {
  const RankLayout layout(in.plan);
  const std::vector<Device> all_devices = cluster_devices(in.cluster);
  for (int r = 0; r < mode.world; ++r) {
    const RankPlace place = layout.place_of(r);
    std::string type;
    for (const Device& d : all_devices) {
      if (d.id == place.device) type = d.type;
    }
    run->rank_types.push_back(type);
    const std::string tp =
        place.tp_size > 1 ? fmt::format(" tp {}/{}", place.tp_rank, place.tp_size) : "";
    run->track_names.push_back(fmt::format("rank {}: replica {} group {}{} (device {}, {})", r,
                                           place.replica, place.group, tp, place.device, type));
  }
}

// Trains with the executor (threads, or this rank over Gloo), under emulation when asked;
// prints a line per step from the reporting rank unless --json.
Result<ExecutorRun> run_executor(const RunOptions& opt, const RunInputs& in, const Mode& mode,
                                 const ExecOptions& exec,
                                 const decltype(ExecOptions::after_action)& fault,
                                 const TokenStream& tokens) {
  ExecutorRun run;
  const RankLayout layout(in.plan);
  const int last_stage = static_cast<int>(in.plan.stages.size()) - 1;
  run.reporter = layout.stage_ranks(last_stage)[0];
  if (mode.dist) {
    GlooOptions gloo = mode.dist->gloo;
    gloo.transport.timeout = Seconds(opt.timeout_s);
    gloo.rendezvous_timeout = Seconds(opt.rendezvous_timeout_s);
    MOTLEY_ASSIGN_OR_RETURN(run.transport, mode.transport == "nccl"
                                               ? connect_nccl(gloo, mode.device)
                                               : connect_gloo(gloo));
  }
  const bool reports = !mode.dist || mode.rank() == run.reporter;
  const bool prints_steps = !opt.json && reports;

  TrainOptions train;
  train.exec = exec;
  train.exec.record_trace = true;  // cheap; feeds --trace and the breakdown
  train.exec.after_action = fault;
  train.steps = opt.steps;
  train.transport.timeout = Seconds(opt.timeout_s);
  if (!opt.checkpoint_dir.empty()) train.checkpoint_dir = opt.checkpoint_dir;
  train.checkpoint_every = opt.checkpoint_every.value_or(0);  // TrainOptions' 0: none
  train.checkpoint_keep = opt.keep_checkpoints.value_or(kDefaultKeptCheckpoints);
  if (opt.resume) train.resume_from = opt.checkpoint_dir;
  if (opt.emulate) {
    MOTLEY_ASSIGN_OR_RETURN(
        run.emulation, start_emulation(opt, exec, in.plan, in.model, tokens, run.transport.get()));
    apply_emulation(run.emulation->options, &train);
    if (!opt.json && reports) {
      std::fputs(emulation_banner(opt, in, mode, *run.emulation).c_str(), stdout);
      std::fflush(stdout);
    }
  }

  std::mutex mu;
  std::optional<int64_t> first_step;
  train.on_rank_step = [&](int rank, const StepResult& result, Seconds time) {
    std::lock_guard<std::mutex> lock(mu);
    run.by_rank[rank].push_back(RankStep{time, result.events, result.optimizer_state_bytes});
    if (!first_step) first_step = result.step;
    if (prints_steps && rank == run.reporter && result.loss) {
      std::fputs(step_line(result.step, *result.loss, time, tokens_per_step(in.plan)).c_str(),
                 stdout);
      std::fflush(stdout);
    }
  };
  MOTLEY_ASSIGN_OR_RETURN(run.report,
                          mode.dist ? train_rank(train, in.plan, in.model, tokens, *run.transport)
                                    : train_in_process(train, in.plan, in.model, tokens));
  name_ranks(in, mode, &run);
  return run;
}

// The measured trace (under WORLD_SIZE this rank's file, on the common time axis).
Status write_trace(const RunOptions& opt, const RunInputs& in, const Mode& mode, ExecutorRun& run) {
  const std::string path = trace_file(opt, mode);
  std::vector<std::vector<double>> step_times;
  if (mode.dist) {
    MOTLEY_ASSIGN_OR_RETURN(step_times,
                            gather_step_times(*run.transport, run.by_rank[mode.rank()], opt.steps));
  } else {
    for (const auto& [rank, steps] : run.by_rank) {
      step_times.emplace_back();
      for (const RankStep& step : steps) step_times.back().push_back(step.time.value());
    }
  }
  const std::vector<double> offsets = step_offsets(step_times);
  const Timeline timeline =
      measured_timeline(run.by_rank, offsets, run.track_names, run.report.first_step, in.plan);
  Json other{{"model", in.model.name},
             {"cluster", in.cluster.name},
             {"schedule", in.plan.schedule},
             {"measured", true},
             {"mode", mode.name},
             {"emulated", opt.emulate},
             {"first_step", run.report.first_step},
             // What `motley fidelity` compares: every rank's wall time of each step, [rank][step]
             // (gathered across a distributed job), and where each step begins on the time axis.
             {"step_time_s", step_times},
             {"step_offsets_s", offsets}};
  if (run.emulation) other["emulation_time_scale"] = run.emulation->time_scale;
  OutputFiles files;
  files.add(path, chrome_trace_document(timeline, other).dump() + "\n");
  return files.commit();
}

// The simulator's peak memory for the plan devices this process's ranks stand for, summed
// (every device of a run as threads, the rank's own under WORLD_SIZE), from motley's handover
// (--predicted-device-memory); nullopt without one.
std::optional<double> predicted_memory(const RunOptions& opt, const RunInputs& in,
                                       const Mode& mode) {
  if (opt.predicted_device_memory.empty()) return std::nullopt;
  std::vector<double> bytes;
  std::stringstream list(opt.predicted_device_memory);
  for (std::string item; std::getline(list, item, ',');) {
    char* end = nullptr;
    const double b = std::strtod(item.c_str(), &end);
    if (end == item.c_str() || *end != '\0' || !(b >= 0)) return std::nullopt;
    bytes.push_back(b);
  }
  const RankLayout layout(in.plan);
  std::set<int> devices;
  for (int r = 0; r < layout.world_size(); ++r) {
    if (!mode.dist || r == mode.rank()) devices.insert(layout.place_of(r).device);
  }
  double total = 0;
  for (int d : devices) {
    if (d < 0 || d >= static_cast<int>(bytes.size())) return std::nullopt;
    total += bytes[d];
  }
  return total;
}

// `out` completed with the losses, step times and the per-rank breakdown.
Json json_output(const Mode& mode, const RunOptions& opt, const RunInputs& in,
                 const ExecutorRun& run, Json out) {
  std::vector<double> times;
  double total = 0;
  for (Seconds t : run.report.step_times) {
    times.push_back(t.value());
    total += t.value();
  }
  out["first_step"] = run.report.first_step;
  out["losses"] = run.report.losses;
  out["step_time_s"] = times;
  out["tokens_per_s"] = tokens_per_step(in.plan) * static_cast<double>(times.size()) / total;
  if (mode.dist) out["rank"] = mode.rank();
  Json ranks = Json::array();
  for (const auto& [rank, steps] : run.by_rank) {
    const Breakdown b = breakdown_of(steps);
    ranks.push_back(Json{{"rank", rank},
                         {"device_type", run.rank_types[rank]},
                         {"step_s", b.step},
                         {"compute_s", b.compute},
                         {"waiting_s", b.waiting},
                         {"send_post_s", b.send_post},
                         {"all_reduce_s", b.all_reduce},
                         {"optimizer_s", b.optimizer},
                         {"other_s", b.other},
                         {"optimizer_state_bytes", steps.back().optimizer_state_bytes}});
  }
  out["ranks"] = ranks;
  // On a GPU, what its caching allocator handed out at most (this process's ranks together).
  if (const std::optional<int64_t> peak = peak_device_memory(mode.device)) {
    out["peak_device_memory_bytes"] = *peak;
    if (const std::optional<double> predicted = predicted_memory(opt, in, mode)) {
      out["predicted_peak_memory_bytes"] = *predicted;
    }
  }
  if (run.emulation) {
    const Emulation& e = *run.emulation;
    Json slowdown = e.options.compute_slowdown;
    out["emulation"] = Json{
        {"note",
         "emulated heterogeneity on this CPU: compute slowed per device, messages delayed; "
         "not a measurement of the cluster"},
        {"speeds", opt.emulate_speeds},
        {"time_scale", e.time_scale},
        {"compute_slowdown", slowdown},
        {"device_types", e.factors.device_types},
        {"simulated_iteration_s", e.factors.simulated_iteration.value()},
        {"simulated_iteration_scaled_s", e.factors.simulated_iteration.value() * e.time_scale}};
  }
  return out;
}

// The text after the steps: a summary from ranks that do not report, the emulated step against
// the simulated one, and where the checkpoint and the trace went.
std::string text_output(const Mode& mode, const RunOptions& opt, const RunInputs& in,
                        const ExecutorRun& run) {
  const std::vector<Seconds>& step_times = run.report.step_times;
  const bool reports = !mode.dist || mode.rank() == run.reporter;
  std::string text;
  if (!reports) {
    double total = 0;
    for (Seconds t : step_times) total += t.value();
    text = fmt::format("rank {}: {} steps done, {} per step\n", mode.rank(), step_times.size(),
                       format_time(Seconds(total / std::max<size_t>(1, step_times.size()))));
  }
  if (run.emulation && reports) {
    const Emulation& e = *run.emulation;
    double total = 0;
    const size_t first = step_times.size() > 1 ? 1 : 0;
    for (size_t i = first; i < step_times.size(); ++i) total += step_times[i].value();
    const double mean = total / static_cast<double>(step_times.size() - first);
    text += fmt::format(
        "emulated step {} (mean after the first); simulated iteration on {} {} x time scale "
        "{:.4g} = {}\n",
        format_time(Seconds(mean)), in.cluster.name, format_time(e.factors.simulated_iteration),
        e.time_scale, format_time(Seconds(e.factors.simulated_iteration.value() * e.time_scale)));
  }
  if (const std::optional<int64_t> peak = peak_device_memory(mode.device)) {
    const std::optional<double> predicted = predicted_memory(opt, in, mode);
    text += fmt::format(
        "peak memory on {}: {} measured (tensors, as its caching allocator counts them){}\n",
        mode.device.str(), format_bytes(Bytes(static_cast<double>(*peak))),
        predicted ? fmt::format("; {} predicted by motley's memory model for the plan's {}",
                                format_bytes(Bytes(*predicted)),
                                mode.dist ? "device of this rank" : "devices together")
                  : "");
  }
  if (!opt.checkpoint_dir.empty() && (!mode.dist || mode.rank() == 0)) {
    const Result<std::string> saved = find_checkpoint(opt.checkpoint_dir);
    text += "checkpoint: " + (saved.is_ok() ? *saved : opt.checkpoint_dir) + "\n";
  }
  // Under motley launch the rank files are merged into opt.trace, which launch names.
  const bool launched = std::getenv("MOTLEY_LAUNCH") != nullptr;
  const bool holds_loss = !run.report.losses.empty();
  if (!opt.trace.empty() && (!mode.dist || ((holds_loss || mode.rank() == 0) && !launched))) {
    text += "trace: " + trace_file(opt, mode) + "\n";
  }
  return text;
}

Status run_command(const RunOptions& opt) {
  MOTLEY_RETURN_IF_ERROR(check_options(opt));
  MOTLEY_ASSIGN_OR_RETURN(const RunInputs in, load_run_inputs(opt));
  MOTLEY_RETURN_IF_ERROR(validate_run_inputs(in, opt));
  MOTLEY_ASSIGN_OR_RETURN(const Mode mode, choose_mode(opt, in));
  MOTLEY_RETURN_IF_ERROR(prepare_outputs(opt, mode));
  decltype(ExecOptions::after_action) fault;
#if MOTLEY_TEST_HOOKS
  MOTLEY_ASSIGN_OR_RETURN(fault, fault_hook_from_env());
#endif
  MOTLEY_ASSIGN_OR_RETURN(TokenStream tokens, load_tokens(opt));
  limit_threads(mode);
  std::string precision_note;
  const ExecOptions exec = exec_options(opt, mode, &precision_note);
  if (!opt.sequential && in.plan.expert_parallel > 1 && !exchanges_experts(in.plan)) {
    std::fprintf(
        stderr,
        "motley: note: %s: the replicas of an expert-parallel group differ in their device "
        "groups or action orders, so expert parallelism %d runs here with every expert on "
        "every replica (the same numbers; no exchange)\n",
        opt.plan.c_str(), in.plan.expert_parallel);
  }
  if (!opt.sequential && in.plan.context_parallel > 1 && !splits_sequences(in.plan)) {
    std::fprintf(stderr,
                 "motley: note: %s: the replicas of a context-parallel group differ in their "
                 "device groups or action orders, so context parallelism %d runs here with every "
                 "member computing its group's whole sequences, each weighted 1/%d (the same "
                 "numbers; no exchange)\n",
                 opt.plan.c_str(), in.plan.context_parallel, in.plan.context_parallel);
  }
  if (!opt.sequential && in.plan.zero_stage >= 2 && in.plan.replicas.size() > 1) {
    std::fprintf(stderr,
                 "motley: note: %s: ZeRO-%d runs here with ZeRO-1's exchanges (the same sums and "
                 "updates; every replica keeps whole gradients and weights)\n",
                 opt.plan.c_str(), in.plan.zero_stage);
  }
  Json out = run_header(opt, in, mode, exec, precision_note);
  if (opt.sequential) return run_sequential(opt, in, exec, tokens, std::move(out));

  MOTLEY_ASSIGN_OR_RETURN(ExecutorRun run, run_executor(opt, in, mode, exec, fault, tokens));
  // The trace first: a failure to write it leaves no report claiming success.
  if (!opt.trace.empty()) MOTLEY_RETURN_IF_ERROR(write_trace(opt, in, mode, run));
  if (opt.json && !run.report.losses.empty()) {
    std::fputs((json_output(mode, opt, in, run, std::move(out)).dump(2) + "\n").c_str(), stdout);
  } else if (!opt.json) {
    std::fputs(text_output(mode, opt, in, run).c_str(), stdout);
  }
  return Status::ok();
}

}  // namespace

void add_run_command(CLI::App& app, Action* action) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Train a model under a plan with the executor");
  std::string footer =
      "Modes:\n"
      "  WORLD_SIZE unset: every rank of the plan runs as a thread of this process over an\n"
      "    in-process transport; intra-op threads per rank = max(1, cores / ranks).\n"
      "  WORLD_SIZE set (torchrun, motley launch, Slurm; or OMPI_COMM_WORLD_SIZE under mpirun):\n"
      "    this process runs rank RANK over Gloo (NCCL on a GPU: --device, --transport), meeting\n"
      "    the others at MASTER_ADDR:MASTER_PORT\n"
      "    (default 127.0.0.1:29500; GLOO_SOCKET_IFNAME picks the interface). WORLD_SIZE must\n"
      "    equal the plan's number of devices (a group of t devices runs as t tensor-parallel\n"
      "    ranks). Intra-op threads = max(1, cores / LOCAL_WORLD_SIZE).\n"
      "Output: a line per step from the rank that computes the loss (replica 0's last stage), or\n"
      "with --json one object with losses, step_time_s, tokens_per_s, mode and a per-rank\n"
      "breakdown of the step time. --emulate slows each rank to its device's peak relative to\n"
      "the fastest and delays messages by the cluster's link times, scaled to this CPU; its\n"
      "output is labelled as emulation.\n"
      "'motley run --plan P --fidelity [--steps N] [--json]' runs the plan as 'motley fidelity'\n"
      "does and compares it with the simulator (docs/fidelity.md).";
#if MOTLEY_TEST_HOOKS
  footer += std::string("\n") + kFaultHookHelp;
#endif
  cmd->footer(footer);
  add_run_options(cmd, opt.get(), kDefaultDataFile);
  add_handover_options(cmd, opt.get());
  cmd->callback([opt, action] { *action = [opt] { return run_command(*opt); }; });
}

}  // namespace motley::cli
