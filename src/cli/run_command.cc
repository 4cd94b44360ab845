// `motley run`: trains the plan's model under a plan file with the executor — every rank as a
// thread of this process, or this process's one rank of a torch-style distributed job — or the
// sequential reference; prints a line per step (or one JSON object) and optionally writes a
// checkpoint and the measured Chrome trace. With --emulate, each rank's compute and each message
// is slowed to stand in for the plan's devices and links. The one command that includes libtorch.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/exec/data.h"
#include "motley/exec/emulation.h"
#include "motley/exec/executor.h"
#include "motley/exec/gloo_transport.h"
#include "motley/exec/precision.h"
#include "motley/exec/rank_layout.h"
#include "motley/exec/reference.h"
#include "motley/exec/train.h"
#include "motley/model/layer_cost.h"
#include "motley/model/model_json.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/validate.h"
#include "motley/report/chrome_trace.h"
#include "motley/report/timeline.h"
#include "motley/report/units_format.h"
#include "motley/sim/simulator.h"
#include "rank_traces.h"

#ifndef MOTLEY_DATA_DIR
#define MOTLEY_DATA_DIR "data"
#endif

namespace motley::cli {
namespace {

// The text trained on when --data is not given (data/README.md names its sources).
constexpr const char* kDefaultDataFile = MOTLEY_DATA_DIR "/gettysburg-declaration.txt";
constexpr int64_t kSyntheticBytes = int64_t{1} << 16;
// The test hook (docs/executor.md, "Fault injection"): RANK:STEP:exit|hang.
constexpr const char* kFaultVariable = "MOTLEY_TEST_FAULT";

struct RunOptions {
  std::string plan;
  std::string model;
  std::string cluster;
  int64_t steps = 10;
  std::string data;
  std::string checkpoint_dir;
  bool resume = false;
  int64_t checkpoint_every = 0;
  std::string trace;
  bool json = false;
  bool sequential = false;
  bool emulate = false;
  uint64_t seed = 0;
  double learning_rate = 1e-3;
  double timeout_s = 30;
  double rendezvous_timeout_s = 300;
  int threads = 0;  // 0: max(1, cores / ranks on this machine)
  std::string emulate_speeds = "peak";
  std::string precision = "fp32";  // or "bf16": CPU autocast (precision.h)
};

// Where this process's rank comes from: none (every rank as a thread), or the variables a
// torch-style launcher (torchrun, motley launch, Slurm scripts) or mpirun sets.
struct Distributed {
  GlooOptions gloo;
  int local_world_size = 0;  // 0: unknown
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
  // Every rank meets at a loopback address only when all run on this machine: bind Gloo there
  // too, whatever the hostname resolves to.
  if (d.gloo.interface.empty() &&
      (d.gloo.master_addr == "127.0.0.1" || d.gloo.master_addr == "localhost")) {
    d.gloo.hostname = "127.0.0.1";
  }
  return std::optional<Distributed>(d);
}

struct FaultHook {
  int rank = -1;
  int64_t step = 0;
  bool hang = false;
};

Result<std::optional<FaultHook>> fault_from_env() {
  const char* value = env(kFaultVariable);
  if (value == nullptr) return std::optional<FaultHook>();
  FaultHook f;
  char what[16] = {0};
  long long step = 0;
  if (std::sscanf(value, "%d:%lld:%15s", &f.rank, &step, what) != 3 || f.rank < 0 || step < 0 ||
      (std::string(what) != "exit" && std::string(what) != "hang")) {
    return invalid_argument(std::string("environment variable ") + kFaultVariable +
                            ": expected RANK:STEP:exit or RANK:STEP:hang, got '" + value + "'");
  }
  f.step = step;
  f.hang = std::string(what) == "hang";
  return std::optional<FaultHook>(f);
}

// ---------------------------------------------------------------------------------------------
// Host memory: the executor trains on this CPU, so a plan for a real-sized model must be refused
// before it allocates rather than killed by the kernel half-way.

// MemAvailable of /proc/meminfo in bytes; nullopt where it cannot be read.
std::optional<double> available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double value = 0;
  while (in >> key >> value >> unit) {
    if (key == "MemAvailable:") return value * 1024.0;
  }
  return std::nullopt;
}

// Bytes of fp32 training state (weights, gradients, AdamW's two moments: 16 per parameter; 8 +
// 8 / replicas with ZeRO-1) that the ranks of this process hold, and how many ranks that is.
// Activations come on top.
std::pair<double, int> training_state_bytes(const Plan& plan, const ModelSpec& model,
                                            bool sequential, int only_rank) {
  if (sequential) {
    return {16.0 * static_cast<double>(model_totals(model, Workload{}).total_params), 1};
  }
  const RankLayout layout(plan);
  const double moments = plan.zero1 ? 8.0 / static_cast<double>(plan.replicas.size()) : 8.0;
  double bytes = 0;
  int ranks = 0;
  for (int r = 0; r < layout.world_size(); ++r) {
    if (only_rank >= 0 && r != only_rank) continue;
    ++ranks;
    double params = 0;
    for (int s : layout.stages_of(r)) {
      for (int l = plan.stages[s].layer_begin; l < plan.stages[s].layer_end; ++l) {
        params += static_cast<double>(layer_params(model.layers[l]));
      }
    }
    bytes += params / layout.place_of(r).tp_size * (8.0 + moments);
  }
  return {bytes, ranks};
}

Status check_host_memory(const std::string& source, const Plan& plan, const ModelSpec& model,
                         bool sequential, int only_rank, int local_ranks) {
  const std::optional<double> available = available_memory_bytes();
  if (!available) return Status::ok();
  const auto [needed, ranks] = training_state_bytes(plan, model, sequential, only_rank);
  const double share = *available / std::max(1, local_ranks);
  if (needed <= share) return Status::ok();
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
      source, model.name, where, format_bytes(Bytes(needed)),
      plan.zero1 && !sequential ? ", moments sharded by ZeRO-1" : "",
      format_bytes(Bytes(*available)),
      local_ranks > 1 ? fmt::format(" (a share of 1/{} per rank)", local_ranks) : ""));
}

// ---------------------------------------------------------------------------------------------
// Emulation: the numbers the executor's hooks need, from the cluster and the cost model.

struct Emulation {
  EmulationOptions options;
  double time_scale = 0;                  // emulated seconds per second of the cluster
  std::vector<std::string> device_types;  // per rank
  Seconds simulated_iteration;            // the simulator's iteration time on the cluster
};

// The device a rank stands for, its group and its type.
struct RankDevices {
  int device = 0;
  std::string type;
  FlopsPerSecond peak;  // the device's, in the model's dtype
};

std::vector<RankDevices> rank_devices(const RankLayout& layout, const Topology& topology,
                                      DType dtype) {
  std::vector<RankDevices> out;
  for (int r = 0; r < layout.world_size(); ++r) {
    const RankPlace place = layout.place_of(r);
    RankDevices d;
    d.device = place.device;
    const DeviceType& type = topology.device_type(d.device);
    d.type = type.name;
    d.peak = type.peak(dtype);
    out.push_back(d);
  }
  return out;
}

// Seconds the sequential reference takes per step on this machine, with this process's thread
// settings: the whole model over the global batch, as one device would run it.
Result<Seconds> native_step_time(const ExecOptions& exec, const Plan& plan, const ModelSpec& model,
                                 const TokenStream& tokens) {
  MOTLEY_ASSIGN_OR_RETURN(auto trainer, SequentialTrainer::create(exec, plan, model, tokens));
  MOTLEY_RETURN_IF_ERROR(trainer->step().status());  // warm-up: first allocations
  double best = 0;
  for (int i = 0; i < 2; ++i) {
    const auto start = std::chrono::steady_clock::now();
    MOTLEY_RETURN_IF_ERROR(trainer->step().status());
    const std::chrono::duration<double> t = std::chrono::steady_clock::now() - start;
    best = i == 0 ? t.count() : std::min(best, t.count());
  }
  return Seconds(best);
}

// Compute, by peak: the fastest device (highest peak) runs natively, a device with 1/f of its
// peak sleeps (f - 1) x each action's time. By cost: f is the cost model's time of the rank's
// stages on its device over their time on the fastest-peak device, divided by the smallest such
// ratio (so the device the cost model finds fastest for its work runs natively). A rank of a
// tensor-parallel group computes 1/t of its stages natively and is slowed the same way; the
// group's all-reduces are communication, delayed like every other. Time scale: the native time
// of the whole model's step over the cost model's time for the same work on the device that runs
// natively, so that links (the cost model's latency + bytes / bandwidth, for the bytes the
// cluster would move in the model's dtype) and all-reduces are slowed as compute is.
Result<Emulation> make_emulation(const ExecOptions& exec, const Plan& plan, const ModelSpec& model,
                                 const ClusterSpec& cluster, const TokenStream& tokens,
                                 bool cost_speeds, Transport* world, const std::string& source) {
  AnalyticCostOptions cost_options;
  cost_options.workload = Workload{plan.seq_len, plan.micro_batch_size, model.dtype, model.dropout};
  MOTLEY_RETURN_IF_ERROR(AnalyticCostModel::validate(model, cost_options, model.name));
  auto cost = std::make_shared<AnalyticCostModel>(model, cluster, cost_options);
  const RankLayout layout(plan);
  const std::vector<RankDevices> ranks = rank_devices(layout, cost->topology(), model.dtype);
  int fastest = 0;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (ranks[r].peak.value() > ranks[fastest].peak.value()) fastest = r;
  }
  const DeviceGroup fastest_group{{ranks[fastest].device}};
  auto work = [&](const std::vector<int>& stages, const DeviceGroup& group) {
    double total = 0;
    for (int s : stages) {
      const Stage& st = plan.stages[s];
      const ComputeTimes t =
          cost->compute(LayerRange{st.layer_begin, st.layer_end}, group, st.recompute);
      total += (t.forward + t.backward() + t.recompute).value();
    }
    return total;
  };
  Emulation e;
  std::vector<double> ratio;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    ratio.push_back(cost_speeds ? work(layout.stages_of(r), DeviceGroup{{ranks[r].device}}) /
                                      work(layout.stages_of(r), fastest_group)
                                : ranks[fastest].peak.value() / ranks[r].peak.value());
    e.device_types.push_back(ranks[r].type);
  }
  const double native_ratio = *std::min_element(ratio.begin(), ratio.end());
  for (double f : ratio) e.options.compute_slowdown.push_back(f / native_ratio);
  std::vector<int> all_stages(plan.stages.size());
  for (size_t s = 0; s < all_stages.size(); ++s) all_stages[s] = static_cast<int>(s);
  const double cluster_step = work(all_stages, fastest_group) * native_ratio *
                              static_cast<double>(total_micro_batches(plan));
  MOTLEY_ASSIGN_OR_RETURN(Seconds native, native_step_time(exec, plan, model, tokens));
  double scale = native.value() / cluster_step;
  if (world != nullptr) {
    // One scale for the whole world: the mean of every rank's measurement.
    std::vector<int> all(world->world_size());
    for (int r = 0; r < world->world_size(); ++r) all[r] = r;
    std::vector<at::Tensor> value = {at::full({1}, scale, at::kDouble)};
    MOTLEY_RETURN_IF_ERROR(
        world->all_reduce_sum(value, all).with_context("agreeing on the emulation's time scale"));
    scale = value[0].item<double>() / world->world_size();
  }
  e.time_scale = scale;
  // The executor moves fp32; the cluster would move the model's dtype.
  const double dtype_ratio = static_cast<double>(dtype_bytes(model.dtype)) / 4.0;
  auto rank_device = std::make_shared<std::vector<int>>();
  for (const RankDevices& d : ranks) rank_device->push_back(d.device);
  e.options.message_time = [cost, rank_device, scale, dtype_ratio](int src, int dst,
                                                                   int64_t bytes) {
    return scale * cost->p2p_time((*rank_device)[src], (*rank_device)[dst],
                                  Bytes(static_cast<double>(bytes) * dtype_ratio));
  };
  e.options.all_reduce_time = [cost, rank_device, scale, dtype_ratio](
                                  const std::vector<int>& members, int64_t bytes) {
    std::vector<int> devices;
    for (int r : members) devices.push_back((*rank_device)[r]);
    std::sort(devices.begin(), devices.end());
    return scale * cost->collective_time(Collective::kAllReduce, devices,
                                         Bytes(static_cast<double>(bytes) * dtype_ratio),
                                         CollectiveAlgorithm::kAuto);
  };
  SimOptions sim_options;
  sim_options.source = source;
  MOTLEY_ASSIGN_OR_RETURN(SimResult sim, simulate(sim_options, plan, *cost));
  e.simulated_iteration = sim.iteration_time;
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

Status check_options(const RunOptions& opt) {
  if (opt.plan.empty()) return invalid_argument("--plan: give the plan file to run");
  if (opt.steps < 1) return invalid_argument("--steps: expected a positive integer");
  if (opt.checkpoint_every < 0) {
    return invalid_argument("--checkpoint-every: expected a non-negative integer");
  }
  if (!(opt.learning_rate > 0)) return invalid_argument("--lr: expected a positive number");
  if (!(opt.timeout_s > 0)) return invalid_argument("--timeout: expected a positive number");
  if (opt.threads < 0) return invalid_argument("--threads: expected a positive integer");
  if (!(opt.rendezvous_timeout_s > 0)) {
    return invalid_argument("--rendezvous-timeout: expected a positive number");
  }
  if ((opt.resume || opt.checkpoint_every > 0) && opt.checkpoint_dir.empty()) {
    return invalid_argument(std::string(opt.resume ? "--resume" : "--checkpoint-every") +
                            " needs --checkpoint-dir");
  }
  if (opt.emulate_speeds != "peak" && opt.emulate_speeds != "cost") {
    return invalid_argument("--emulate-speeds: expected peak or cost, got '" + opt.emulate_speeds +
                            "'");
  }
  if (opt.sequential && (opt.emulate || !opt.checkpoint_dir.empty() || !opt.trace.empty())) {
    return invalid_argument(
        "--sequential runs the plain reference: it takes no --emulate, --checkpoint-dir or "
        "--trace");
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

Status run_command(const RunOptions& opt) {
  MOTLEY_RETURN_IF_ERROR(check_options(opt));
  MOTLEY_ASSIGN_OR_RETURN(PlanInputs inputs,
                          load_plan_inputs(opt.plan, PlanSpecOverrides{opt.model, opt.cluster}));
  const Plan& plan = inputs.plan;
  const ModelSpec& model = inputs.model;
  const ClusterSpec& cluster = inputs.cluster;
  // Memory is the cluster's, not this CPU's: not checked here.
  Status valid = validate_plan(plan, model, cluster, ValidateOptions{});
  if (!valid.is_ok()) return valid.with_context(opt.plan);
  const int world = RankLayout(plan).world_size();

  MOTLEY_ASSIGN_OR_RETURN(std::optional<Distributed> dist, distributed_from_env());
  if (dist && dist->gloo.world_size != world) {
    return invalid_argument(
        opt.plan + ": the plan has " + std::to_string(world) +
        " devices (one rank each) but WORLD_SIZE is " + std::to_string(dist->gloo.world_size) +
        "; start " + std::to_string(world) + " ranks (motley launch --nproc " +
        std::to_string(world) + " -- run ...) or unset WORLD_SIZE to run every rank as a thread");
  }
  if (dist && opt.sequential) {
    return invalid_argument("--sequential runs in one process; unset WORLD_SIZE");
  }
  MOTLEY_RETURN_IF_ERROR(check_host_memory(opt.plan, plan, model, opt.sequential,
                                           dist ? dist->gloo.rank : -1,
                                           dist ? std::max(1, dist->local_world_size) : 1));
  MOTLEY_ASSIGN_OR_RETURN(std::optional<FaultHook> fault, fault_from_env());
  MOTLEY_ASSIGN_OR_RETURN(TokenStream tokens, load_tokens(opt));

  // Intra-op threads: the ranks of this process (or of this machine) share its cores.
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int local_ranks = opt.sequential ? 1 : dist ? std::max(1, dist->local_world_size) : world;
  const int threads = opt.threads > 0 ? opt.threads : std::max(1, cores / local_ranks);
  ::setenv("OPENBLAS_NUM_THREADS", std::to_string(threads).c_str(), 1);
  set_intra_op_threads(threads);

  const std::string mode = opt.sequential ? "sequential" : dist ? "gloo" : "threads";
  const double tokens_per_step =
      static_cast<double>(plan.global_batch) * static_cast<double>(plan.seq_len);
  ExecOptions exec;
  exec.seed = opt.seed;
  exec.optimizer.learning_rate = opt.learning_rate;
  const Precision requested = opt.precision == "bf16" ? Precision::kBf16Autocast : Precision::kFp32;
  exec.precision = effective_precision(requested);
  std::string precision_note;
  if (exec.precision != requested) {
    std::string why;
    cpu_bf16_autocast_available(&why);
    precision_note = "--precision bf16: this libtorch cannot autocast to bf16 on the CPU (" + why +
                     "); running in fp32";
    std::fprintf(stderr, "motley: note: %s\n", precision_note.c_str());
  }

  Json out{{"mode", mode},
           {"plan", opt.plan},
           {"model", model.name},
           {"cluster", cluster.name},
           {"schedule", plan.schedule},
           {"world_size", opt.sequential ? 1 : world},
           {"threads_per_rank", threads},
           {"precision", precision_name(exec.precision)},
           {"global_batch", plan.global_batch},
           {"seq_len", plan.seq_len},
           {"tokens_per_step", tokens_per_step}};
  if (!precision_note.empty()) out["precision_note"] = precision_note;

  // ---- The sequential reference.
  if (opt.sequential) {
    MOTLEY_ASSIGN_OR_RETURN(auto trainer, SequentialTrainer::create(exec, plan, model, tokens));
    std::vector<double> losses, times;
    for (int64_t s = 0; s < opt.steps; ++s) {
      const auto start = std::chrono::steady_clock::now();
      MOTLEY_ASSIGN_OR_RETURN(double loss, trainer->step());
      const std::chrono::duration<double> t = std::chrono::steady_clock::now() - start;
      losses.push_back(loss);
      times.push_back(t.count());
      if (!opt.json) {
        std::fputs(step_line(s, loss, Seconds(t.count()), tokens_per_step).c_str(), stdout);
        std::fflush(stdout);
      }
    }
    double total = 0;
    for (double t : times) total += t;
    out["first_step"] = 0;
    out["losses"] = losses;
    out["step_time_s"] = times;
    out["tokens_per_s"] = tokens_per_step * static_cast<double>(opt.steps) / total;
    if (opt.json) std::fputs((out.dump(2) + "\n").c_str(), stdout);
    return Status::ok();
  }

  // ---- The executor.
  const RankLayout layout(plan);
  const int last_stage = static_cast<int>(plan.stages.size()) - 1;
  const int reporter = layout.stage_ranks(last_stage)[0];  // replica 0's loss
  std::unique_ptr<Transport> transport;
  if (dist) {
    dist->gloo.transport.timeout = Seconds(opt.timeout_s);
    dist->gloo.rendezvous_timeout = Seconds(opt.rendezvous_timeout_s);
    MOTLEY_ASSIGN_OR_RETURN(transport, connect_gloo(dist->gloo));
  }
  const int my_rank = dist ? dist->gloo.rank : -1;
  const bool prints_steps = !opt.json && (!dist || my_rank == reporter);

  TrainOptions train;
  train.exec = exec;
  train.exec.record_trace = true;  // cheap; feeds --trace and the breakdown
  train.steps = opt.steps;
  train.transport.timeout = Seconds(opt.timeout_s);
  if (!opt.checkpoint_dir.empty()) train.checkpoint_dir = opt.checkpoint_dir;
  train.checkpoint_every = opt.checkpoint_every;
  if (opt.resume) train.resume_from = opt.checkpoint_dir;
  if (fault) {
    const FaultHook f = *fault;
    train.exec.after_action = [f](int rank, int64_t step, const ::motley::Action&, Seconds) {
      if (rank != f.rank || step != f.step) return;
      if (f.hang) {
        while (true) std::this_thread::sleep_for(std::chrono::hours(1));
      }
      std::raise(SIGKILL);  // a crash: no cleanup, no message, sockets closed by the kernel
    };
  }

  std::optional<Emulation> emulation;
  if (opt.emulate) {
    MOTLEY_ASSIGN_OR_RETURN(
        emulation, make_emulation(exec, plan, model, cluster, tokens, opt.emulate_speeds == "cost",
                                  transport.get(), opt.plan));
    apply_emulation(emulation->options, &train);
    if (!opt.json && (!dist || my_rank == reporter)) {
      std::string text = fmt::format(
          "EMULATION on this CPU, not a measurement of {}: compute of each rank slowed by {} "
          "relative to the fastest, messages and all-reduces delayed by the cost model's times "
          "x {:.4g} (native CPU seconds per cluster second)\n",
          cluster.name,
          opt.emulate_speeds == "cost" ? "the cost model's time for its stages"
                                       : "its device's peak rate",
          emulation->time_scale);
      if (local_ranks > cores) {
        text += fmt::format(
            "  note: {} ranks share {} cores here, so they also wait for each other's CPU time; "
            "the emulated step is at least the total work / {}\n",
            local_ranks, cores, cores);
      }
      for (int r = 0; r < world; ++r) {
        text += fmt::format("  rank {} ({}): compute x {:.3g}\n", r, emulation->device_types[r],
                            emulation->options.compute_slowdown[r]);
      }
      std::fputs(text.c_str(), stdout);
      std::fflush(stdout);
    }
  }

  std::mutex mu;
  std::map<int, std::vector<RankStep>> by_rank;
  std::optional<int64_t> first_step;
  train.on_rank_step = [&](int rank, const StepResult& result, Seconds time) {
    std::lock_guard<std::mutex> lock(mu);
    by_rank[rank].push_back(RankStep{time, result.events, result.optimizer_state_bytes});
    if (!first_step) first_step = result.step;
    if (prints_steps && rank == reporter && result.loss) {
      std::fputs(step_line(result.step, *result.loss, time, tokens_per_step).c_str(), stdout);
      std::fflush(stdout);
    }
  };

  Result<TrainReport> report = dist ? train_rank(train, plan, model, tokens, *transport)
                                    : train_in_process(train, plan, model, tokens);
  if (!report.is_ok()) return report.status();

  std::vector<std::string> track_names, rank_types;
  const std::vector<Device> all_devices = cluster_devices(cluster);
  for (int r = 0; r < world; ++r) {
    const RankPlace place = layout.place_of(r);
    std::string type;
    for (const Device& d : all_devices) {
      if (d.id == place.device) type = d.type;
    }
    rank_types.push_back(type);
    const std::string tp =
        place.tp_size > 1 ? fmt::format(" tp {}/{}", place.tp_rank, place.tp_size) : "";
    track_names.push_back(fmt::format("rank {}: replica {} group {}{} (device {}, {})", r,
                                      place.replica, place.group, tp, place.device, type));
  }

  // The trace first: a failure to write it leaves no report claiming success.
  if (!opt.trace.empty()) {
    const std::string path = dist ? rank_trace_path(opt.trace, my_rank) : opt.trace;
    std::vector<std::vector<double>> step_times;
    if (dist) {
      MOTLEY_ASSIGN_OR_RETURN(step_times,
                              gather_step_times(*transport, by_rank[my_rank], opt.steps));
    } else {
      for (const auto& [rank, steps] : by_rank) {
        step_times.emplace_back();
        for (const RankStep& step : steps) step_times.back().push_back(step.time.value());
      }
    }
    const Timeline timeline =
        measured_timeline(by_rank, step_offsets(step_times), track_names, report->first_step, plan);
    Json other{{"model", model.name},
               {"cluster", cluster.name},
               {"schedule", plan.schedule},
               {"measured", true},
               {"mode", mode},
               {"emulated", opt.emulate},
               {"first_step", report->first_step}};
    if (emulation) other["emulation_time_scale"] = emulation->time_scale;
    MOTLEY_RETURN_IF_ERROR(
        write_file_atomically(path, chrome_trace_document(timeline, other).dump() + "\n"));
  }

  const bool holds_loss = !report->losses.empty();
  if (opt.json && holds_loss) {
    std::vector<double> times;
    double total = 0;
    for (Seconds t : report->step_times) {
      times.push_back(t.value());
      total += t.value();
    }
    out["first_step"] = report->first_step;
    out["losses"] = report->losses;
    out["step_time_s"] = times;
    out["tokens_per_s"] = tokens_per_step * static_cast<double>(times.size()) / total;
    if (dist) out["rank"] = my_rank;
    Json ranks = Json::array();
    for (const auto& [rank, steps] : by_rank) {
      const Breakdown b = breakdown_of(steps);
      ranks.push_back(Json{{"rank", rank},
                           {"device_type", rank_types[rank]},
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
    if (emulation) {
      Json slowdown = emulation->options.compute_slowdown;
      out["emulation"] =
          Json{{"note",
                "emulated heterogeneity on this CPU: compute slowed per device, messages delayed; "
                "not a measurement of the cluster"},
               {"speeds", opt.emulate_speeds},
               {"time_scale", emulation->time_scale},
               {"compute_slowdown", slowdown},
               {"device_types", emulation->device_types},
               {"simulated_iteration_s", emulation->simulated_iteration.value()},
               {"simulated_iteration_scaled_s",
                emulation->simulated_iteration.value() * emulation->time_scale}};
    }
    std::fputs((out.dump(2) + "\n").c_str(), stdout);
  } else if (!opt.json) {
    std::string text;
    if (dist && my_rank != reporter) {
      double total = 0;
      for (Seconds t : report->step_times) total += t.value();
      text =
          fmt::format("rank {}: {} steps done, {} per step\n", my_rank, report->step_times.size(),
                      format_time(Seconds(total / std::max<size_t>(1, report->step_times.size()))));
    }
    if (emulation && (!dist || my_rank == reporter)) {
      double total = 0;
      const size_t first = report->step_times.size() > 1 ? 1 : 0;
      for (size_t i = first; i < report->step_times.size(); ++i) {
        total += report->step_times[i].value();
      }
      const double mean = total / static_cast<double>(report->step_times.size() - first);
      text += fmt::format(
          "emulated step {} (mean after the first); simulated iteration on {} {} x time scale "
          "{:.4g} = {}\n",
          format_time(Seconds(mean)), cluster.name, format_time(emulation->simulated_iteration),
          emulation->time_scale,
          format_time(Seconds(emulation->simulated_iteration.value() * emulation->time_scale)));
    }
    if (!opt.checkpoint_dir.empty() && (!dist || my_rank == 0)) {
      text += "checkpoint: " + opt.checkpoint_dir + "\n";
    }
    // Under motley launch the rank files are merged into opt.trace, which launch names.
    const bool launched = std::getenv("MOTLEY_LAUNCH") != nullptr;
    if (!opt.trace.empty() && (!dist || ((holds_loss || my_rank == 0) && !launched))) {
      text += "trace: " + (dist ? rank_trace_path(opt.trace, my_rank) : opt.trace) + "\n";
    }
    std::fputs(text.c_str(), stdout);
  }
  return Status::ok();
}

}  // namespace

void add_run_command(CLI::App& app, Action* action) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Train a model under a plan with the executor");
  cmd->footer(
      "Modes:\n"
      "  WORLD_SIZE unset: every rank of the plan runs as a thread of this process over an\n"
      "    in-process transport; intra-op threads per rank = max(1, cores / ranks).\n"
      "  WORLD_SIZE set (torchrun, motley launch, Slurm; or OMPI_COMM_WORLD_SIZE under mpirun):\n"
      "    this process runs rank RANK over Gloo, meeting the others at MASTER_ADDR:MASTER_PORT\n"
      "    (default 127.0.0.1:29500; GLOO_SOCKET_IFNAME picks the interface). WORLD_SIZE must\n"
      "    equal the plan's number of devices (a group of t devices runs as t tensor-parallel\n"
      "    ranks). Intra-op threads = max(1, cores / LOCAL_WORLD_SIZE).\n"
      "Output: a line per step from the rank that computes the loss (replica 0's last stage), or\n"
      "with --json one object with losses, step_time_s, tokens_per_s, mode and a per-rank\n"
      "breakdown of the step time. --emulate slows each rank to its device's peak relative to\n"
      "the fastest and delays messages by the cluster's link times, scaled to this CPU; its\n"
      "output is labelled as emulation.\n"
      "Test hook: MOTLEY_TEST_FAULT=RANK:STEP:exit kills rank RANK (SIGKILL) after its first\n"
      "compute action of step STEP; RANK:STEP:hang makes it sleep forever there.");
  cmd->add_option("--plan", opt->plan,
                  "A plan file (it carries its model and cluster; motley.plan/1 files name them)")
      ->required();
  cmd->add_option("--model", opt->model,
                  "Model (default: the one the plan carries; must have the plan's hash)");
  cmd->add_option("--cluster", opt->cluster,
                  "Cluster (default: the one the plan carries; must have the plan's hash)");
  cmd->add_option("--steps", opt->steps, "Training steps to run now")->capture_default_str();
  cmd->add_option("--data", opt->data,
                  "Text file to train on (bytes as tokens), or 'synthetic' (default: " +
                      std::string(kDefaultDataFile) + ")");
  cmd->add_option("--checkpoint-dir", opt->checkpoint_dir,
                  "Save a checkpoint here after the last step");
  cmd->add_flag("--resume", opt->resume, "Load the checkpoint in --checkpoint-dir first");
  cmd->add_option("--checkpoint-every", opt->checkpoint_every,
                  "Also save after every K-th step (counted from step 0)");
  cmd->add_option("--trace", opt->trace,
                  "Write the measured Chrome trace (under WORLD_SIZE: one file per rank, "
                  "NAME.rankK.json, on the common time axis; motley launch merges them)");
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->add_flag("--sequential", opt->sequential,
                "Run the sequential reference (same model, weights and global batch)");
  cmd->add_flag("--emulate", opt->emulate,
                "Emulate the plan's heterogeneous devices and links (scaled CPU time)");
  cmd->add_option("--emulate-speeds", opt->emulate_speeds,
                  "With --emulate, each device's speed: peak (its peak rate in the model's dtype) "
                  "or cost (the cost model's time for the rank's stages)")
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Seed of the initial weights")->capture_default_str();
  cmd->add_option("--lr", opt->learning_rate, "AdamW learning rate")->capture_default_str();
  cmd->add_option("--precision", opt->precision,
                  "fp32, or bf16: forward and backward under CPU autocast to bf16 (weights, "
                  "gradients, optimizer and messages stay fp32; fp32 when this libtorch cannot)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--threads", opt->threads,
                  "Intra-op threads per rank (default: max(1, cores / ranks on this machine))");
  cmd->add_option("--timeout", opt->timeout_s,
                  "Seconds any wait on another rank may take before the run fails")
      ->capture_default_str();
  cmd->add_option("--rendezvous-timeout", opt->rendezvous_timeout_s,
                  "Seconds for joining the world and forming replica groups (under WORLD_SIZE)")
      ->capture_default_str();
  cmd->callback([opt, action] { *action = [opt] { return run_command(*opt); }; });
}

}  // namespace motley::cli
