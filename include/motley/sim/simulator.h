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
#include "motley/sim/sim_result.h"

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
  // stages, from CostModel::stage_memory — except a stage whose step the cost model knows
  // (CostModel::optimizer_step_time: measured layers), which takes that.
  OptimizerStepModel optimizer_step = OptimizerStepModel::kMemoryBound;
  Seconds optimizer_step_time;  // kFixed only
  // Record every task in SimResult::timeline (costs one entry per task).
  bool record_timeline = false;
  // Simulate each class of identical replicas once (docs/simulator.md, "Identical replicas"):
  // the same times, statistics and timeline as simulating every replica, in a fraction of the
  // time and memory. false simulates every replica (what the tests compare it with).
  bool fold_identical_replicas = true;
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
