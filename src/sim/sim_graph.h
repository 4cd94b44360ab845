// sim: graph building — the plan's task graph (plan/task_graph.h) plus the simulator's own
// tasks (a gradient all-reduce per stage across replicas, an optimizer step per group) and
// every task's duration, priced once per (replica, stage) by the cost model. It keeps no clock
// (event_loop.h runs the graph) and draws no conclusions (sim_results.h). Thread-compatible:
// one SimGraph per Simulator.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "motley/core/status.h"
#include "motley/cost/cost_model.h"
#include "motley/plan/lower.h"
#include "motley/plan/structure.h"
#include "motley/plan/task_graph.h"
#include "motley/sim/simulator.h"
#include "replica_folding.h"

namespace motley::sim_internal {

// Per task: what the event loop reads and writes, in one place for locality.
struct TaskState {
  double duration = 0;  // compute, all-reduce, optimizer; a transfer's latency
  double start = 0;
  double end = 0;
  // The latest end among the task's compute predecessors, and for communication predecessors
  // the latest compute they carried (see DeviceStats::exposed_communication).
  double data_ready = 0;
  int32_t pending = 0;         // predecessors not finished yet
  int32_t critical_pred = -1;  // the predecessor whose end released the task
  int32_t transfer = -1;       // index into SimGraph::transfers, for a message
  bool communication = false;  // a message or an all-reduce
};

// One message in flight: through the representative pair of devices (docs/simulator.md).
struct Transfer {
  Path path;
  int32_t task = 0;
  int32_t src_device = 0;
  int32_t dst_device = 0;
  double bytes = 0;
};

// The simulated graph of one plan, as the event loop and the result assembly read it. Task ids
// are the task graph's: compute actions, messages, then all-reduces and optimizer steps. The
// graph is of the simulated replicas (`folding`): the plan's own, or one of each class of
// identical replicas (`folded`).
struct SimGraph {
  TaskGraph graph;
  std::vector<TaskState> tasks;
  std::vector<Transfer> transfers;
  std::vector<StageMemory> stage_memory;  // per simulated replica * stages + stage, no activations
  ReplicaFolding folding;
  Plan folded;                      // the simulated replicas when folding.folds()
  const Plan* simulated = nullptr;  // the plan the graph is of: the given one, or &folded

  // The kind of task `id` as results name it.
  SimTaskKind kind(int32_t id) const;
  // Task `id` with its devices and times, as SimResult lists it; its replica is the plan's (the
  // first of those the simulated replica stands for).
  SimTask task(int32_t id) const;

  // What building needs and keeps between plans, so that it allocates only for a larger one.
  // Seconds of one action of a stage, by ActionKind (the same order as TaskKind's actions).
  using StageTimes = sim_internal::StageTimes;
  struct Scratch {
    StructureChecker checker;
    Lowering lowering;
    std::vector<StageTimes> stage_times;   // per replica * stages + stage
    std::vector<char> explicit_recompute;  // per replica * stages + stage: R listed
    // Per replica * stages + stage: the cost model's optimizer step (optimizer_step_time), or
    // -1 where it has none and the memory-bound formula prices it.
    std::vector<double> optimizer_time;
    std::vector<double> boundary_bytes;  // per stage
    std::vector<int32_t> all_reduce;     // per stage, or -1
    // Per stage, when reducing across replicas: its end-of-iteration sync under the plan's ZeRO
    // stage.
    std::vector<DataParallelSync> sync;
    std::vector<char> weight_pass;       // per replica * stages + stage: W listed
    std::vector<int32_t> tied_sum;       // per simulated replica, or -1
    std::vector<int32_t> last_backward;  // per replica * stages + stage, when reducing across them
    std::vector<std::pair<int32_t, int>> order;  // (last backward of a stage, stage)
    std::vector<int> devices;
  };
  Scratch scratch;
};

// Rebuilds `out` for `plan` priced by `cost`, folding identical replicas unless the options
// say not to. Errors: invalid_argument naming `options.source` and the field when the plan is
// malformed (check_plan_structure). REQUIRES: `plan` outlives `out`'s use.
Status build_sim_graph(const SimOptions& options, const Plan& plan, const CostModel& cost,
                       SimGraph& out);

}  // namespace motley::sim_internal
