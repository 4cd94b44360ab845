// sim: the discrete-event pipeline simulator. A Plan and a CostModel become a task graph —
// compute on each device group's stream in the plan's order, the messages lower_plan derives
// (over the topology's shared links), per-stage gradient all-reduce, optimizer steps — run in
// simulated time; it reports iteration time, per-device busy/idle/exposed communication, peak
// memory, the critical path and, on request, the timeline. It neither chooses schedules
// (schedule/) nor draws timelines (report/). The model is documented in docs/simulator.md.
// simulate() is thread-safe; a Simulator object is thread-compatible (one per thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/cost/cost_model.h"
#include "motley/plan/plan.h"

namespace motley {

namespace sim_internal {
struct Workspace;  // the graph and event buffers, defined in simulator.cc
}  // namespace sim_internal

// How the optimizer step after the gradient all-reduce is priced, per device.
enum class OptimizerStepModel {
  kNone,         // no optimizer step: the iteration ends with the last compute or all-reduce
  kMemoryBound,  // one pass over the parameters at the device's memory bandwidth (see below)
  kFixed,        // SimOptions::optimizer_step_time on every device
};

struct SimOptions {
  // Named in error messages ("<source>: field 'replicas[0]...': ...").
  std::string source = "plan";
  // Per stage, across the data-parallel replicas (nothing to do with one replica).
  bool gradient_all_reduce = true;
  CollectiveAlgorithm all_reduce_algorithm = CollectiveAlgorithm::kAuto;
  // kMemoryBound: mixed-precision Adam reads the gradients and the optimizer state (fp32
  // master weights and moments), writes the state back and the working weights:
  // (gradients + 2 * optimizer_state + weights) / memory bandwidth, summed over the group's
  // stages, from CostModel::stage_memory.
  OptimizerStepModel optimizer_step = OptimizerStepModel::kMemoryBound;
  Seconds optimizer_step_time;  // kFixed only
  // Record every task in SimResult::timeline (costs one entry per task).
  bool record_timeline = false;
};

enum class SimTaskKind {
  kForward,            // F(stage, micro_batch)
  kBackwardInput,      // B: input gradient
  kBackwardWeight,     // W: weight gradient
  kBackward,           // fused B and W
  kRecompute,          // R: the stage's forward redone before its B
  kSendActivation,     // the output of F(stage, mb) travelling to the group of stage + 1
  kSendGradient,       // the input gradient of B(stage, mb) travelling to the group of stage - 1
  kGradientAllReduce,  // stage's weight gradients summed across replicas (replica = -1)
  kOptimizerStep,      // one device group's parameter update (stage = -1)
};
const char* sim_task_kind_name(SimTaskKind kind);
bool is_compute(SimTaskKind kind);        // F, B, W, fused B, R, optimizer step
bool is_communication(SimTaskKind kind);  // transfers and all-reduces

// One task of the simulated iteration, as the report module draws it.
struct SimTask {
  SimTaskKind kind = SimTaskKind::kForward;
  int replica = 0;      // -1 for an all-reduce (it spans every replica)
  int group = 0;        // compute, optimizer: the group; transfer: the sender; all-reduce: -1
  int stage = 0;        // -1 for an optimizer step
  int micro_batch = 0;  // -1 for an all-reduce and an optimizer step
  int peer_group = -1;  // transfer: the receiving group
  // Compute: the group's first device. Transfer: the representative pair of devices whose
  // Path (Topology::path) the bytes cross. All-reduce: -1.
  int device = -1;
  int peer_device = -1;
  Seconds start;
  Seconds end;
  friend bool operator==(const SimTask&, const SimTask&) = default;
};
// "F s3 mb7", "I s3 mb7" (input gradient, as plan CSVs write it), "W ...", "B ..." (fused),
// "R ...", "act s3 mb7 g1->g2", "grad s3 mb7 g2->g1", "allreduce s3", "optimizer g1".
std::string sim_task_name(const SimTask& task);

struct DeviceStats {
  int device = 0;  // global id
  int replica = 0;
  int group = 0;
  // Compute time on the device's stream (F, B, W, R, optimizer step).
  Seconds busy;
  // iteration_time - busy: the bubble.
  Seconds idle;
  // Time the stream waited on communication (a transfer or an all-reduce) after everything
  // that communication carried had been computed: the communication that was not hidden.
  Seconds exposed_communication;
  // Stage memory with no activations (CostModel::stage_memory with in_flight 0, summed over
  // the group's stages) plus the largest sum of live activations under the group's order:
  // F allocates a micro-batch's activations of its stage, W (or a fused backward) frees them.
  Bytes fixed_memory;
  Bytes peak_memory;
  int64_t peak_in_flight = 0;  // micro-batches live at that peak, over all the group's stages
  Bytes capacity;              // the device type's memory
};

struct SimResult {
  Seconds iteration_time;
  double throughput_tokens_per_s = 0;  // global_batch * seq_len / iteration_time
  double bubble_fraction = 0;          // sum of idle / (iteration_time * devices)
  bool fits_memory = true;             // every device's peak_memory <= capacity
  std::vector<DeviceStats> devices;    // the plan's devices, by replica, group, then position
  // The chain of tasks that determined the iteration end, first to last: each task started
  // when its predecessor in the chain finished.
  std::vector<SimTask> critical_path;
  std::vector<SimTask> timeline;  // every task, when SimOptions::record_timeline
  int64_t tasks = 0;              // tasks simulated (compute, transfers, all-reduces, steps)
};

// Simulates one training iteration of `plan` priced by `cost`.
// Errors: invalid_argument when the plan references stages, micro-batches, groups or devices
// that do not exist or lacks/duplicates an F, B or W; infeasible when its orders deadlock.
// REQUIRES: `cost` prices the cluster the plan was made for (device ids of its topology).
Result<SimResult> simulate(const SimOptions& options, const Plan& plan, const CostModel& cost);

// The same, keeping its working memory between calls: a tuner simulating thousands of
// candidates allocates only when a plan is larger than any before. Thread-compatible.
class Simulator {
 public:
  Simulator();
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  Result<SimResult> run(const SimOptions& options, const Plan& plan, const CostModel& cost);

 private:
  std::unique_ptr<sim_internal::Workspace> workspace_;
};

}  // namespace motley
