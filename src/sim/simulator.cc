// The discrete-event simulator; docs/simulator.md gives the model (task graph, link sharing,
// what counts as exposed communication) and why each choice was made.
//
// Layout for speed: every task is an integer id into flat arrays, dependencies are a CSR
// successor list built once per plan, events live in one binary heap, and nothing is
// allocated per task once the workspace has grown to the largest plan seen.
#include "motley/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "motley/plan/lower.h"

namespace motley {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Per task: what the event loop touches.
struct TaskState {
  double duration = 0;  // compute, all-reduce, optimizer; a transfer's latency
  double start = 0;
  double end = 0;
  // The latest end among the task's compute dependencies, and for communication
  // dependencies the latest compute they carried (see DeviceStats::exposed_communication).
  double data_ready = 0;
  int32_t pending = 0;         // dependencies not finished yet
  int32_t critical_pred = -1;  // the dependency whose end released the task
  // Copies of TaskInfo fields the event loop reads, kept here for locality.
  int32_t transfer = -1;
  bool communication = false;
};

// Per task: what it is, for results only.
struct TaskInfo {
  SimTaskKind kind = SimTaskKind::kForward;
  int32_t replica = 0;
  int32_t group = 0;
  int32_t stage = 0;
  int32_t micro_batch = 0;
  int32_t peer_group = -1;
  int32_t transfer = -1;  // index into Workspace::transfers
};

struct Transfer {
  const Path* path = nullptr;
  int32_t task = 0;
  int32_t src_device = 0;
  int32_t dst_device = 0;
  double bytes = 0;
  // Data phase state.
  double remaining = 0;
  double rate = 0;
  double last_update = 0;
  double finish = kInfinity;  // when the current rate would finish it
  uint32_t version = 0;       // bumped at each re-rate; stale finish events are skipped
};

enum class EventType : uint8_t { kFinish, kLatencyDone, kDataDone };

// 24 bytes: the heap moves these around on every push and pop.
struct Event {
  double time;
  uint64_t seq;  // insertion order: equal times pop first-in first-out, deterministically
  int32_t task;
  uint32_t version_and_type;  // version << 2 | EventType
  EventType type() const { return static_cast<EventType>(version_and_type & 3u); }
  uint32_t version() const { return version_and_type >> 2; }
};

struct EventLater {
  bool operator()(const Event& a, const Event& b) const {
    return a.time > b.time || (a.time == b.time && a.seq > b.seq);
  }
};

struct Edge {
  int32_t from;
  int32_t to;
};

struct StageTimes {
  double forward = 0;
  double backward_input = 0;  // includes the recompute when the plan has no explicit R
  double backward_weight = 0;
  double backward_fused = 0;
  double recompute = 0;
};

std::string field(const SimOptions& options, const std::string& path, const std::string& what) {
  return options.source + ": field '" + path + "': " + what;
}

std::string replica_path(int r) { return "replicas[" + std::to_string(r) + "]"; }
std::string group_path(int r, int g) {
  return replica_path(r) + ".groups[" + std::to_string(g) + "]";
}
std::string stage_mb(int s, int j) {
  return "stage " + std::to_string(s) + " micro-batch " + std::to_string(j);
}

}  // namespace

const char* sim_task_kind_name(SimTaskKind kind) {
  switch (kind) {
    case SimTaskKind::kForward:
      return "forward";
    case SimTaskKind::kBackwardInput:
      return "backward_input";
    case SimTaskKind::kBackwardWeight:
      return "backward_weight";
    case SimTaskKind::kBackward:
      return "backward";
    case SimTaskKind::kRecompute:
      return "recompute";
    case SimTaskKind::kSendActivation:
      return "send_activation";
    case SimTaskKind::kSendGradient:
      return "send_gradient";
    case SimTaskKind::kGradientAllReduce:
      return "gradient_all_reduce";
    case SimTaskKind::kOptimizerStep:
      return "optimizer_step";
  }
  return "?";
}

bool is_communication(SimTaskKind kind) {
  return kind == SimTaskKind::kSendActivation || kind == SimTaskKind::kSendGradient ||
         kind == SimTaskKind::kGradientAllReduce;
}
bool is_compute(SimTaskKind kind) { return !is_communication(kind); }

std::string sim_task_name(const SimTask& t) {
  const std::string s = std::to_string(t.stage);
  const std::string sj = " s" + s + " mb" + std::to_string(t.micro_batch);
  switch (t.kind) {
    case SimTaskKind::kForward:
      return "F" + sj;
    case SimTaskKind::kBackwardInput:
      return "I" + sj;
    case SimTaskKind::kBackwardWeight:
      return "W" + sj;
    case SimTaskKind::kBackward:
      return "B" + sj;
    case SimTaskKind::kRecompute:
      return "R" + sj;
    case SimTaskKind::kSendActivation:
    case SimTaskKind::kSendGradient:
      return std::string(t.kind == SimTaskKind::kSendActivation ? "act" : "grad") + sj + " g" +
             std::to_string(t.group) + "->g" + std::to_string(t.peer_group);
    case SimTaskKind::kGradientAllReduce:
      return "allreduce s" + s;
    case SimTaskKind::kOptimizerStep:
      return "optimizer g" + std::to_string(t.group);
  }
  return "?";
}

namespace sim_internal {

struct Workspace {
  // The task graph.
  std::vector<TaskState> tasks;
  std::vector<TaskInfo> info;
  std::vector<Transfer> transfers;
  std::vector<Edge> edges;
  std::vector<int32_t> succ_offset;  // CSR: successors of t are succ[succ_offset[t] ..
  std::vector<int32_t> succ;         //                          succ_offset[t + 1])

  // Lookups while building, indexed [replica_offset + stage * micro_batches + mb].
  std::vector<int64_t> replica_offset;
  std::vector<int32_t> forward_id, backward_id, weight_id, recompute_id;
  std::vector<int32_t> activation_xfer, gradient_xfer;
  std::vector<int32_t> first_task;  // per (replica, group) stream, by stream index
  std::vector<int32_t> task_count;
  std::vector<int64_t> stream_offset;  // replica -> first stream index
  std::vector<int32_t> channel_last;   // per (src group, dst group, payload)
  std::vector<int64_t> channel_count;

  // Per replica * stages.
  std::vector<StageTimes> stage_times;
  std::vector<StageMemory> stage_memory;
  std::vector<double> boundary_bytes;  // per stage
  std::vector<char> explicit_recompute;

  // Link sharing.
  std::vector<std::vector<int32_t>> link_active;  // link id -> transfers in their data phase
  std::vector<uint32_t> mark;                     // per transfer: epoch of the last re-rate
  uint32_t epoch = 0;
  std::vector<int32_t> affected;

  std::vector<Event> heap;
  uint64_t seq = 0;

  void push(double time, int32_t task, EventType type, uint32_t version = 0) {
    heap.push_back(Event{time, seq++, task, (version << 2) | static_cast<uint32_t>(type)});
    std::push_heap(heap.begin(), heap.end(), EventLater());
  }
};

}  // namespace sim_internal

namespace {

// Builds the graph of one plan into a workspace, then runs it.
class Run {
 public:
  Run(sim_internal::Workspace& ws, const SimOptions& options, const Plan& plan,
      const CostModel& cost)
      : ws_(ws), options_(options), plan_(plan), cost_(cost), topology_(cost.topology()) {}

  Result<SimResult> go() {
    MOTLEY_RETURN_IF_ERROR(check_plan());
    MOTLEY_RETURN_IF_ERROR(build_compute());
    price_stages();
    MOTLEY_RETURN_IF_ERROR(build_transfers());
    MOTLEY_RETURN_IF_ERROR(build_data_edges());
    build_all_reduce_and_optimizer();
    build_successors();
    MOTLEY_RETURN_IF_ERROR(simulate());
    return results();
  }

 private:
  int stages() const { return static_cast<int>(plan_.stages.size()); }
  int64_t index(int r, int s, int j) const {
    return ws_.replica_offset[r] + static_cast<int64_t>(s) * plan_.replicas[r].micro_batches + j;
  }
  int64_t stream(int r, int g) const { return ws_.stream_offset[r] + g; }

  // ---- checks: only what the simulator relies on; validate_plan proves the rest.
  Status check_plan() const {
    const int n_devices = static_cast<int>(topology_.devices().size());
    if (plan_.stages.empty()) {
      return invalid_argument(field(options_, "stages", "expected at least one stage, got none"));
    }
    for (int s = 0; s < stages(); ++s) {
      const Stage& st = plan_.stages[s];
      if (st.layer_begin < 0 || st.layer_end <= st.layer_begin) {
        return invalid_argument(
            field(options_, "stages[" + std::to_string(s) + "]",
                  "expected layers [layer_begin, layer_end) with 0 <= layer_begin < layer_end, "
                  "got [" +
                      std::to_string(st.layer_begin) + ", " + std::to_string(st.layer_end) + ")"));
      }
    }
    if (plan_.replicas.empty()) {
      return invalid_argument(
          field(options_, "replicas", "expected at least one replica, got none"));
    }
    for (size_t ri = 0; ri < plan_.replicas.size(); ++ri) {
      const int r = static_cast<int>(ri);
      const Replica& rep = plan_.replicas[r];
      if (rep.micro_batches <= 0 || rep.micro_batches > std::numeric_limits<int32_t>::max()) {
        return invalid_argument(
            field(options_, replica_path(r) + ".micro_batches",
                  "expected a positive integer, got " + std::to_string(rep.micro_batches)));
      }
      const int n_groups = static_cast<int>(rep.groups.size());
      if (static_cast<int>(rep.stage_group.size()) != stages()) {
        return invalid_argument(field(options_, replica_path(r) + ".stage_group",
                                      "expected one group per stage (" + std::to_string(stages()) +
                                          "), got " + std::to_string(rep.stage_group.size())));
      }
      std::vector<char> used(n_groups, 0);
      for (int s = 0; s < stages(); ++s) {
        const int g = rep.stage_group[s];
        if (g < 0 || g >= n_groups) {
          return invalid_argument(
              field(options_, replica_path(r) + ".stage_group[" + std::to_string(s) + "]",
                    "expected a group index 0.." + std::to_string(n_groups - 1) + ", got " +
                        std::to_string(g)));
        }
        used[g] = 1;
      }
      for (int g = 0; g < n_groups; ++g) {
        const DeviceGroupSchedule& grp = rep.groups[g];
        if (!used[g]) {
          return invalid_argument(
              field(options_, group_path(r, g), "runs no stage (no stage_group entry names it)"));
        }
        if (grp.devices.empty()) {
          return invalid_argument(
              field(options_, group_path(r, g) + ".devices", "expected at least one device"));
        }
        for (size_t i = 0; i < grp.devices.size(); ++i) {
          if (grp.devices[i] < 0 || grp.devices[i] >= n_devices) {
            return invalid_argument(
                field(options_, group_path(r, g) + ".devices[" + std::to_string(i) + "]",
                      "expected a device id 0.." + std::to_string(n_devices - 1) +
                          " of the cost model's cluster, got " + std::to_string(grp.devices[i])));
          }
        }
        for (size_t k = 0; k < grp.actions.size(); ++k) {
          const Action& a = grp.actions[k];
          const bool stage_ok = a.stage >= 0 && a.stage < stages();
          if (stage_ok && a.micro_batch >= 0 && a.micro_batch < rep.micro_batches &&
              rep.stage_group[a.stage] == g) {
            continue;
          }
          const std::string path = group_path(r, g) + ".actions[" + std::to_string(k) + "]";
          if (!stage_ok) {
            return invalid_argument(field(options_, path + ".stage",
                                          "expected a stage 0.." + std::to_string(stages() - 1) +
                                              ", got " + std::to_string(a.stage)));
          }
          if (a.micro_batch < 0 || a.micro_batch >= rep.micro_batches) {
            return invalid_argument(field(options_, path + ".micro_batch",
                                          "expected a micro-batch 0.." +
                                              std::to_string(rep.micro_batches - 1) + ", got " +
                                              std::to_string(a.micro_batch)));
          }
          if (rep.stage_group[a.stage] != g) {
            return invalid_argument(field(options_, path + ".stage",
                                          "stage " + std::to_string(a.stage) + " runs on group " +
                                              std::to_string(rep.stage_group[a.stage]) +
                                              ", not on this group"));
          }
        }
      }
    }
    return Status::ok();
  }

  // ---- compute tasks: one per action, consecutive ids per stream in the plan's order.
  Status build_compute() {
    const int n_rep = static_cast<int>(plan_.replicas.size());
    ws_.replica_offset.assign(n_rep + 1, 0);
    ws_.stream_offset.assign(n_rep + 1, 0);
    for (int r = 0; r < n_rep; ++r) {
      ws_.replica_offset[r + 1] =
          ws_.replica_offset[r] + stages() * plan_.replicas[r].micro_batches;
      ws_.stream_offset[r + 1] =
          ws_.stream_offset[r] + static_cast<int64_t>(plan_.replicas[r].groups.size());
    }
    const size_t slots = static_cast<size_t>(ws_.replica_offset[n_rep]);
    for (auto* v : {&ws_.forward_id, &ws_.backward_id, &ws_.weight_id, &ws_.recompute_id,
                    &ws_.activation_xfer, &ws_.gradient_xfer}) {
      v->assign(slots, -1);
    }
    ws_.explicit_recompute.assign(static_cast<size_t>(n_rep) * stages(), 0);
    ws_.first_task.assign(ws_.stream_offset[n_rep], 0);
    ws_.task_count.assign(ws_.stream_offset[n_rep], 0);

    ws_.tasks.clear();
    ws_.info.clear();
    ws_.transfers.clear();
    ws_.edges.clear();
    for (int r = 0; r < n_rep; ++r) {
      const Replica& rep = plan_.replicas[r];
      for (size_t gi = 0; gi < rep.groups.size(); ++gi) {
        const int g = static_cast<int>(gi);
        ws_.first_task[stream(r, g)] = static_cast<int32_t>(ws_.tasks.size());
        ws_.task_count[stream(r, g)] = static_cast<int32_t>(rep.groups[g].actions.size());
        for (size_t k = 0; k < rep.groups[g].actions.size(); ++k) {
          const Action& a = rep.groups[g].actions[k];
          const int32_t id = static_cast<int32_t>(ws_.tasks.size());
          const int64_t slot = index(r, a.stage, a.micro_batch);
          int32_t* target = nullptr;
          SimTaskKind kind = SimTaskKind::kForward;
          switch (a.kind) {
            case ActionKind::kForward:
              target = &ws_.forward_id[slot];
              kind = SimTaskKind::kForward;
              break;
            case ActionKind::kBackwardInput:
              target = &ws_.backward_id[slot];
              kind = SimTaskKind::kBackwardInput;
              break;
            case ActionKind::kBackward:
              target = &ws_.backward_id[slot];
              kind = SimTaskKind::kBackward;
              break;
            case ActionKind::kBackwardWeight:
              target = &ws_.weight_id[slot];
              kind = SimTaskKind::kBackwardWeight;
              break;
            case ActionKind::kRecompute:
              target = &ws_.recompute_id[slot];
              kind = SimTaskKind::kRecompute;
              ws_.explicit_recompute[static_cast<size_t>(r) * stages() + a.stage] = 1;
              break;
          }
          if (*target >= 0) {
            return invalid_argument(
                field(options_, group_path(r, g) + ".actions[" + std::to_string(k) + "]",
                      "duplicates " + std::string(1, action_letter(a.kind)) + " of " +
                          stage_mb(a.stage, a.micro_batch) + " (each runs exactly once)"));
          }
          *target = id;
          ws_.tasks.push_back(TaskState{});
          ws_.info.push_back(TaskInfo{kind, r, g, a.stage, a.micro_batch, -1, -1});
        }
      }
      // Every (stage, micro-batch) needs F and either B and W or one fused backward.
      for (int s = 0; s < stages(); ++s) {
        for (int j = 0; j < rep.micro_batches; ++j) {
          const int64_t slot = index(r, s, j);
          const int32_t b = ws_.backward_id[slot];
          const bool has_w = ws_.weight_id[slot] >= 0;
          const bool fused = b >= 0 && ws_.info[b].kind == SimTaskKind::kBackward;
          if (ws_.forward_id[slot] >= 0 && b >= 0 && fused != has_w) continue;
          const std::string where = group_path(r, rep.stage_group[s]) + ".actions";
          if (ws_.forward_id[slot] < 0) {
            return invalid_argument(
                field(options_, where, "has no F of " + stage_mb(s, j) + "; every one needs F"));
          }
          if (b < 0) {
            return invalid_argument(field(options_, where,
                                          "has no backward of " + stage_mb(s, j) +
                                              "; every one needs I and W, or a fused B"));
          }
          if (fused) {
            return invalid_argument(
                field(options_, where, "has both a fused B and a W of " + stage_mb(s, j)));
          }
          return invalid_argument(field(options_, where, "has an I but no W of " + stage_mb(s, j)));
        }
      }
    }
    compute_tasks_ = static_cast<int32_t>(ws_.tasks.size());
    return Status::ok();
  }

  // ---- per (replica, stage): times, memory, boundary bytes, from the cost model once.
  void price_stages() {
    const int n_rep = static_cast<int>(plan_.replicas.size());
    ws_.stage_times.assign(static_cast<size_t>(n_rep) * stages(), StageTimes{});
    ws_.stage_memory.assign(static_cast<size_t>(n_rep) * stages(), StageMemory{});
    ws_.boundary_bytes.assign(stages(), 0);
    for (int s = 0; s < stages(); ++s) {
      ws_.boundary_bytes[s] = cost_.boundary_bytes(plan_.stages[s].layer_end - 1).value();
    }
    DeviceGroup group;
    for (int r = 0; r < n_rep; ++r) {
      const Replica& rep = plan_.replicas[r];
      for (int s = 0; s < stages(); ++s) {
        const Stage& st = plan_.stages[s];
        const LayerRange layers{st.layer_begin, st.layer_end};
        group.devices = rep.groups[rep.stage_group[s]].devices;
        const ComputeTimes t = cost_.compute(layers, group, st.recompute);
        const size_t rs = static_cast<size_t>(r) * stages() + s;
        // Without an explicit R the recompute runs inside the backward that needs it.
        const double folded = ws_.explicit_recompute[rs] ? 0.0 : t.recompute.value();
        StageTimes& out = ws_.stage_times[rs];
        out.forward = t.forward.value();
        out.backward_input = t.backward_input.value() + folded;
        out.backward_weight = t.backward_weight.value();
        out.backward_fused = t.backward_input.value() + t.backward_weight.value() + folded;
        out.recompute = t.recompute.value();
        MemoryOptions mem;
        mem.recompute = st.recompute;
        mem.in_flight_micro_batches = 0;
        mem.data_parallel = n_rep;
        mem.zero1 = plan_.zero1;
        ws_.stage_memory[rs] = cost_.stage_memory(layers, group, mem);
      }
    }
    for (int32_t id = 0; id < compute_tasks_; ++id) {
      const TaskInfo& in = ws_.info[id];
      const StageTimes& t = ws_.stage_times[static_cast<size_t>(in.replica) * stages() + in.stage];
      double d = 0;
      switch (in.kind) {
        case SimTaskKind::kForward:
          d = t.forward;
          break;
        case SimTaskKind::kBackwardInput:
          d = t.backward_input;
          break;
        case SimTaskKind::kBackwardWeight:
          d = t.backward_weight;
          break;
        case SimTaskKind::kBackward:
          d = t.backward_fused;
          break;
        case SimTaskKind::kRecompute:
          d = t.recompute;
          break;
        default:
          break;
      }
      ws_.tasks[id].duration = d;
    }
  }

  int32_t add_task(const TaskInfo& info, double duration) {
    const int32_t id = static_cast<int32_t>(ws_.tasks.size());
    TaskState t;
    t.duration = duration;
    t.transfer = info.transfer;
    t.communication = is_communication(info.kind);
    ws_.tasks.push_back(t);
    ws_.info.push_back(info);
    return id;
  }
  void edge(int32_t from, int32_t to) { ws_.edges.push_back(Edge{from, to}); }

  // ---- transfers: one per message lower_plan derives; a channel carries one at a time, in
  // its sequence order.
  Status build_transfers() {
    const LoweredPlan lowered = lower_plan(plan_);
    for (size_t ri = 0; ri < plan_.replicas.size(); ++ri) {
      const int r = static_cast<int>(ri);
      const Replica& rep = plan_.replicas[r];
      const int n_groups = static_cast<int>(rep.groups.size());
      ws_.channel_last.assign(static_cast<size_t>(n_groups) * n_groups * 2, -1);
      ws_.channel_count.assign(static_cast<size_t>(n_groups) * n_groups * 2, 0);
      const LoweredReplica& lr = lowered.replicas[r];
      for (int g = 0; g < n_groups; ++g) {
        for (const LoweredOp& op : lr.groups[g]) {
          const CommOp* c = std::get_if<CommOp>(&op);
          if (c == nullptr ||
              (c->kind != CommKind::kSendActivation && c->kind != CommKind::kSendGradient)) {
            continue;
          }
          const bool activation = c->kind == CommKind::kSendActivation;
          const int64_t slot = index(r, c->stage, c->micro_batch);
          const int32_t producer = activation ? ws_.forward_id[slot] : ws_.backward_id[slot];
          const size_t channel =
              (static_cast<size_t>(g) * n_groups + c->peer_group) * 2 + (activation ? 0 : 1);
          if (c->sequence != ws_.channel_count[channel]++) {
            return internal_error("lower_plan numbered a message on channel group " +
                                  std::to_string(g) + " -> " + std::to_string(c->peer_group) +
                                  " out of the sender's order");
          }
          Transfer x;
          x.src_device = rep.groups[g].devices[0];
          x.dst_device = rep.groups[c->peer_group].devices[0];
          x.path = &topology_.path(x.src_device, x.dst_device);
          x.bytes = ws_.boundary_bytes[c->stage];
          x.task = add_task(
              TaskInfo{activation ? SimTaskKind::kSendActivation : SimTaskKind::kSendGradient, r, g,
                       c->stage, c->micro_batch, c->peer_group,
                       static_cast<int32_t>(ws_.transfers.size())},
              x.path->latency.value());
          ws_.transfers.push_back(x);
          (activation ? ws_.activation_xfer : ws_.gradient_xfer)[slot] = x.task;
          edge(producer, x.task);
          if (ws_.channel_last[channel] >= 0) edge(ws_.channel_last[channel], x.task);
          ws_.channel_last[channel] = x.task;
        }
      }
    }
    return Status::ok();
  }

  // `producer` feeds `consumer`: directly on one stream (implied by the stream order unless
  // the producer comes later, which deadlocks and is then found), else through `xfer`.
  Status depend(int32_t producer, int32_t consumer, int32_t xfer, int64_t slot_for_message,
                const char* what) {
    const TaskInfo& p = ws_.info[producer];
    const TaskInfo& c = ws_.info[consumer];
    if (p.group == c.group) {
      if (producer > consumer) edge(producer, consumer);
      return Status::ok();
    }
    if (xfer < 0) {
      return internal_error(std::string("lower_plan derived no ") + what + " message for " +
                            stage_mb(p.stage, p.micro_batch) + " (slot " +
                            std::to_string(slot_for_message) + ")");
    }
    edge(xfer, consumer);
    return Status::ok();
  }

  // ---- stream order and the data each compute task needs.
  Status build_data_edges() {
    for (int32_t id = 0; id < compute_tasks_; ++id) {
      const TaskInfo& in = ws_.info[id];
      if (id > ws_.first_task[stream(in.replica, in.group)]) edge(id - 1, id);
      const int s = in.stage;
      const int64_t slot = index(in.replica, s, in.micro_batch);
      switch (in.kind) {
        case SimTaskKind::kForward:
          if (s > 0) {
            const int64_t prev = index(in.replica, s - 1, in.micro_batch);
            MOTLEY_RETURN_IF_ERROR(
                depend(ws_.forward_id[prev], id, ws_.activation_xfer[prev], prev, "activation"));
          }
          break;
        case SimTaskKind::kRecompute:
          MOTLEY_RETURN_IF_ERROR(depend(ws_.forward_id[slot], id, -1, slot, "local"));
          break;
        case SimTaskKind::kBackwardInput:
        case SimTaskKind::kBackward: {
          const int32_t before =
              ws_.recompute_id[slot] >= 0 ? ws_.recompute_id[slot] : ws_.forward_id[slot];
          MOTLEY_RETURN_IF_ERROR(depend(before, id, -1, slot, "local"));
          if (s + 1 < stages()) {
            const int64_t next = index(in.replica, s + 1, in.micro_batch);
            MOTLEY_RETURN_IF_ERROR(
                depend(ws_.backward_id[next], id, ws_.gradient_xfer[next], next, "gradient"));
          }
          break;
        }
        case SimTaskKind::kBackwardWeight:
          MOTLEY_RETURN_IF_ERROR(depend(ws_.backward_id[slot], id, -1, slot, "local"));
          break;
        default:
          break;
      }
    }
    return Status::ok();
  }

  // ---- gradient all-reduce per stage (one replica: none) and the optimizer step per group.
  void build_all_reduce_and_optimizer() {
    const int n_rep = static_cast<int>(plan_.replicas.size());
    std::vector<int32_t> all_reduce(stages(), -1);
    if (options_.gradient_all_reduce && n_rep > 1) {
      std::vector<int> devices;
      for (int s = 0; s < stages(); ++s) {
        // Each replica's TP rank k reduces with the other replicas' rank k; the rings run at
        // once, so the slowest prices the stage. Unequal TP degrees: one ring over all.
        bool same_tp = true;
        double bytes = 0;
        for (int r = 0; r < n_rep; ++r) {
          const Replica& rep = plan_.replicas[r];
          same_tp = same_tp &&
                    rep.groups[rep.stage_group[s]].devices.size() ==
                        plan_.replicas[0].groups[plan_.replicas[0].stage_group[s]].devices.size();
          bytes = std::max(
              bytes, ws_.stage_memory[static_cast<size_t>(r) * stages() + s].gradients.value());
        }
        const size_t tp = plan_.replicas[0].groups[plan_.replicas[0].stage_group[s]].devices.size();
        double duration = 0;
        for (size_t k = 0; k < (same_tp ? tp : 1); ++k) {
          devices.clear();
          for (int r = 0; r < n_rep; ++r) {
            const Replica& rep = plan_.replicas[r];
            const std::vector<int>& d = rep.groups[rep.stage_group[s]].devices;
            if (same_tp) {
              devices.push_back(d[k]);
            } else {
              devices.insert(devices.end(), d.begin(), d.end());
            }
          }
          duration =
              std::max(duration, cost_
                                     .collective_time(Collective::kAllReduce, devices, Bytes(bytes),
                                                      options_.all_reduce_algorithm)
                                     .value());
        }
        all_reduce[s] =
            add_task(TaskInfo{SimTaskKind::kGradientAllReduce, -1, -1, s, -1, -1, -1}, duration);
      }
    }

    std::vector<std::pair<int32_t, int>> order;  // (last backward of the stage, stage)
    for (int r = 0; r < n_rep; ++r) {
      const Replica& rep = plan_.replicas[r];
      for (size_t gi = 0; gi < rep.groups.size(); ++gi) {
        const int g = static_cast<int>(gi);
        // The group's all-reduces are issued on its communication stream in the order their
        // last backward appears in its list.
        order.clear();
        for (int s = 0; s < stages(); ++s) {
          if (rep.stage_group[s] != g || all_reduce[s] < 0) continue;
          int32_t last = -1;
          for (int j = 0; j < rep.micro_batches; ++j) {
            const int64_t slot = index(r, s, j);
            last = std::max(last,
                            ws_.weight_id[slot] >= 0 ? ws_.weight_id[slot] : ws_.backward_id[slot]);
          }
          order.emplace_back(last, s);
        }
        std::sort(order.begin(), order.end());
        for (size_t i = 0; i < order.size(); ++i) {
          edge(order[i].first, all_reduce[order[i].second]);
          if (i > 0) edge(all_reduce[order[i - 1].second], all_reduce[order[i].second]);
        }
        if (options_.optimizer_step == OptimizerStepModel::kNone) continue;
        double duration = options_.optimizer_step_time.value();
        if (options_.optimizer_step == OptimizerStepModel::kMemoryBound) {
          const double bandwidth =
              topology_.device_type(rep.groups[g].devices[0]).memory_bandwidth.value();
          double bytes = 0;
          for (int s = 0; s < stages(); ++s) {
            if (rep.stage_group[s] != g) continue;
            const StageMemory& m = ws_.stage_memory[static_cast<size_t>(r) * stages() + s];
            bytes += (m.gradients + m.optimizer_state * 2.0 + m.weights).value();
          }
          duration = bytes / bandwidth;
        }
        const int32_t step =
            add_task(TaskInfo{SimTaskKind::kOptimizerStep, r, g, -1, -1, -1, -1}, duration);
        const int32_t n = ws_.task_count[stream(r, g)];
        if (n > 0) edge(ws_.first_task[stream(r, g)] + n - 1, step);
        for (const auto& [last, s] : order) edge(all_reduce[s], step);
      }
    }
  }

  void build_successors() {
    const size_t n = ws_.tasks.size();
    ws_.succ_offset.assign(n + 1, 0);
    for (const Edge& e : ws_.edges) {
      ++ws_.succ_offset[e.from + 1];
      ++ws_.tasks[e.to].pending;
    }
    for (size_t i = 0; i < n; ++i) ws_.succ_offset[i + 1] += ws_.succ_offset[i];
    ws_.succ.resize(ws_.edges.size());
    // Fill from the back so that each list keeps the edges' insertion order.
    for (size_t i = ws_.edges.size(); i-- > 0;) {
      const Edge& e = ws_.edges[i];
      ws_.succ[--ws_.succ_offset[e.from + 1]] = e.to;
    }
    // After the fill, succ_offset[t + 1] points at t's first successor; shift back.
    for (size_t i = 0; i < n; ++i) ws_.succ_offset[i] = ws_.succ_offset[i + 1];
    ws_.succ_offset[n] = static_cast<int32_t>(ws_.edges.size());
  }

  // ---- the event loop.
  void start(int32_t id, double now) {
    TaskState& t = ws_.tasks[id];
    t.start = now;
    const int32_t x = t.transfer;
    if (x >= 0 && t.duration > 0) {
      ws_.push(now + t.duration, id, EventType::kLatencyDone);
    } else if (x >= 0) {
      begin_data(x, now);
    } else {
      ws_.push(now + t.duration, id, EventType::kFinish);
    }
  }

  void finish(int32_t id, double now) {
    TaskState& t = ws_.tasks[id];
    t.end = now;
    ++finished_;
    const bool comm = t.communication;
    const double carried = comm ? t.data_ready : now;
    for (int32_t e = ws_.succ_offset[id]; e < ws_.succ_offset[id + 1]; ++e) {
      const int32_t s = ws_.succ[e];
      TaskState& st = ws_.tasks[s];
      // A communication task's data_ready counts only the compute it carries.
      if (!(comm && st.communication)) {
        st.data_ready = std::max(st.data_ready, carried);
      }
      if (--st.pending == 0) {
        st.critical_pred = id;
        start(s, now);
      }
    }
  }

  double rate_of(const Transfer& x) const {
    double rate = x.path->bandwidth.value();
    for (int link : x.path->links) {
      const double share = topology_.links()[link].bandwidth.value() /
                           static_cast<double>(ws_.link_active[link].size());
      rate = std::min(rate, share);
    }
    return rate;
  }

  // Every transfer sharing a link with `x` (and `x`) gets its new rate from `now` on.
  void rerate_around(const Transfer& x, double now) {
    ++ws_.epoch;
    ws_.affected.clear();
    for (int link : x.path->links) {
      for (int32_t y : ws_.link_active[link]) {
        if (ws_.mark[y] != ws_.epoch) {
          ws_.mark[y] = ws_.epoch;
          ws_.affected.push_back(y);
        }
      }
    }
    for (int32_t yi : ws_.affected) {
      Transfer& y = ws_.transfers[yi];
      // Settle the bytes sent at the old rate; one due now is done (no rounding residue).
      y.remaining =
          y.finish <= now ? 0.0 : std::max(0.0, y.remaining - y.rate * (now - y.last_update));
      y.last_update = now;
      y.rate = rate_of(y);
      y.finish = y.remaining > 0 ? now + y.remaining / y.rate : now;
      ws_.push(y.finish, y.task, EventType::kDataDone, ++y.version);
    }
  }

  void begin_data(int32_t xi, double now) {
    Transfer& x = ws_.transfers[xi];
    if (x.bytes <= 0) {
      ws_.push(now, x.task, EventType::kFinish);
      return;
    }
    x.remaining = x.bytes;
    x.last_update = now;
    x.finish = kInfinity;
    x.rate = 0;
    if (x.path->links.empty()) {
      x.rate = x.path->bandwidth.value();
      x.finish = now + x.remaining / x.rate;
      ws_.push(x.finish, x.task, EventType::kDataDone, ++x.version);
      return;
    }
    for (int link : x.path->links) ws_.link_active[link].push_back(xi);
    rerate_around(x, now);
  }

  void end_data(int32_t xi, double now) {
    Transfer& x = ws_.transfers[xi];
    for (int link : x.path->links) {
      std::vector<int32_t>& active = ws_.link_active[link];
      auto it = std::find(active.begin(), active.end(), xi);
      MOTLEY_CHECK(it != active.end(), "a finishing transfer is not on its link");
      *it = active.back();
      active.pop_back();
    }
    x.remaining = 0;
    if (!x.path->links.empty()) rerate_around(x, now);
  }

  Status simulate() {
    const size_t n = ws_.tasks.size();
    if (ws_.link_active.size() < topology_.links().size()) {
      ws_.link_active.resize(topology_.links().size());
    }
    for (auto& active : ws_.link_active) active.clear();
    ws_.mark.assign(ws_.transfers.size(), 0);
    ws_.epoch = 0;
    ws_.heap.clear();
    ws_.seq = 0;
    finished_ = 0;
    for (size_t i = 0; i < n; ++i) {
      if (ws_.tasks[i].pending == 0) start(static_cast<int32_t>(i), 0.0);
    }
    while (!ws_.heap.empty()) {
      std::pop_heap(ws_.heap.begin(), ws_.heap.end(), EventLater());
      const Event ev = ws_.heap.back();
      ws_.heap.pop_back();
      switch (ev.type()) {
        case EventType::kFinish:
          finish(ev.task, ev.time);
          break;
        case EventType::kLatencyDone:
          begin_data(ws_.tasks[ev.task].transfer, ev.time);
          break;
        case EventType::kDataDone: {
          const int32_t xi = ws_.tasks[ev.task].transfer;
          if ((ws_.transfers[xi].version & 0x3fffffffu) != ev.version()) break;  // re-rated since
          ws_.transfers[xi].version++;  // no later duplicate
          end_data(xi, ev.time);
          finish(ev.task, ev.time);
          break;
        }
      }
    }
    if (finished_ != n) {
      for (size_t i = 0; i < n; ++i) {
        if (ws_.tasks[i].pending > 0) {
          const SimTask t = task(static_cast<int32_t>(i));
          std::string where = t.replica >= 0 ? group_path(t.replica, t.group < 0 ? 0 : t.group)
                                             : std::string("replicas");
          return infeasible(field(options_, where,
                                  "the orders deadlock: " + std::to_string(n - finished_) + " of " +
                                      std::to_string(n) + " tasks never start, the first being " +
                                      sim_task_name(t) +
                                      " (each device group must list an action after the "
                                      "actions it needs from other groups can run)"));
        }
      }
    }
    return Status::ok();
  }

  SimTask task(int32_t id) const {
    const TaskInfo& in = ws_.info[id];
    const TaskState& st = ws_.tasks[id];
    SimTask t;
    t.kind = in.kind;
    t.replica = in.replica;
    t.group = in.group;
    t.stage = in.stage;
    t.micro_batch = in.micro_batch;
    t.peer_group = in.peer_group;
    if (in.transfer >= 0) {
      t.device = ws_.transfers[in.transfer].src_device;
      t.peer_device = ws_.transfers[in.transfer].dst_device;
    } else if (in.replica >= 0) {
      t.device = plan_.replicas[in.replica].groups[in.group].devices[0];
    }
    t.start = Seconds(st.start);
    t.end = Seconds(st.end);
    return t;
  }

  SimResult results() const {
    SimResult out;
    const size_t n = ws_.tasks.size();
    out.tasks = static_cast<int64_t>(n);
    int32_t last = -1;
    double iteration = 0;
    for (size_t i = 0; i < n; ++i) {
      if (last < 0 || ws_.tasks[i].end >= iteration) {
        iteration = ws_.tasks[i].end;
        last = static_cast<int32_t>(i);
      }
    }
    out.iteration_time = Seconds(iteration);
    if (iteration > 0) {
      out.throughput_tokens_per_s =
          static_cast<double>(plan_.global_batch) * static_cast<double>(plan_.seq_len) / iteration;
    }

    // Per stream: busy and exposed communication (compute tasks, then optimizer steps).
    const size_t streams = static_cast<size_t>(ws_.stream_offset.back());
    std::vector<double> busy(streams, 0), exposed(streams, 0);
    for (size_t i = 0; i < n; ++i) {
      const TaskInfo& in = ws_.info[i];
      if (!is_compute(in.kind)) continue;
      const TaskState& t = ws_.tasks[i];
      const size_t k = static_cast<size_t>(stream(in.replica, in.group));
      busy[k] += t.duration;
      exposed[k] += std::max(0.0, t.start - t.data_ready);
    }

    double idle_total = 0;
    for (size_t ri = 0; ri < plan_.replicas.size(); ++ri) {
      const int r = static_cast<int>(ri);
      const Replica& rep = plan_.replicas[r];
      for (size_t gi = 0; gi < rep.groups.size(); ++gi) {
        const int g = static_cast<int>(gi);
        // Memory: F allocates a micro-batch's activations, W or a fused B frees them.
        double fixed = 0, live = 0, peak = 0;
        int64_t in_flight = 0, peak_in_flight = 0;
        for (int s = 0; s < stages(); ++s) {
          if (rep.stage_group[s] != g) continue;
          StageMemory m = ws_.stage_memory[static_cast<size_t>(r) * stages() + s];
          m.activations = Bytes(0);
          fixed += m.total().value();
        }
        for (const Action& a : rep.groups[g].actions) {
          const double act = ws_.stage_memory[static_cast<size_t>(r) * stages() + a.stage]
                                 .activations_per_micro_batch.value();
          if (a.kind == ActionKind::kForward) {
            live += act;
            ++in_flight;
            if (live > peak || (live == peak && in_flight > peak_in_flight)) {
              peak = live;
              peak_in_flight = in_flight;
            }
          } else if (a.kind == ActionKind::kBackwardWeight || a.kind == ActionKind::kBackward) {
            live -= act;
            --in_flight;
          }
        }
        const size_t k = static_cast<size_t>(stream(r, g));
        for (int device : rep.groups[g].devices) {
          DeviceStats d;
          d.device = device;
          d.replica = r;
          d.group = g;
          d.busy = Seconds(busy[k]);
          d.idle = Seconds(iteration - busy[k]);
          d.exposed_communication = Seconds(exposed[k]);
          d.fixed_memory = Bytes(fixed);
          d.peak_memory = Bytes(fixed + peak);
          d.peak_in_flight = peak_in_flight;
          d.capacity = topology_.device_type(device).memory;
          out.fits_memory = out.fits_memory && d.peak_memory <= d.capacity;
          idle_total += d.idle.value();
          out.devices.push_back(d);
        }
      }
    }
    if (iteration > 0 && !out.devices.empty()) {
      out.bubble_fraction = idle_total / (iteration * static_cast<double>(out.devices.size()));
    }

    for (int32_t t = last; t >= 0; t = ws_.tasks[t].critical_pred) {
      out.critical_path.push_back(task(t));
    }
    std::reverse(out.critical_path.begin(), out.critical_path.end());
    if (options_.record_timeline) {
      out.timeline.reserve(n);
      for (size_t i = 0; i < n; ++i) out.timeline.push_back(task(static_cast<int32_t>(i)));
    }
    return out;
  }

  sim_internal::Workspace& ws_;
  const SimOptions& options_;
  const Plan& plan_;
  const CostModel& cost_;
  const Topology& topology_;
  int32_t compute_tasks_ = 0;
  size_t finished_ = 0;
};

}  // namespace

Simulator::Simulator() : workspace_(std::make_unique<sim_internal::Workspace>()) {}
Simulator::~Simulator() = default;

Result<SimResult> Simulator::run(const SimOptions& options, const Plan& plan,
                                 const CostModel& cost) {
  return Run(*workspace_, options, plan, cost).go();
}

Result<SimResult> simulate(const SimOptions& options, const Plan& plan, const CostModel& cost) {
  Simulator simulator;
  return simulator.run(options, plan, cost);
}

}  // namespace motley
