// What a simulated iteration reports — its tasks, per-device statistics and the iteration's
// totals — apart from the simulator that computes it: the report module draws these (and a
// measured run converts to the same tasks), so every binary that writes a timeline, motley-run
// included, needs them without linking the simulator. Plain data; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "motley/core/units.h"

namespace motley {

enum class SimTaskKind {
  kForward,            // F(stage, micro_batch)
  kBackwardInput,      // B: input gradient
  kBackwardWeight,     // W: weight gradient
  kBackward,           // fused B and W
  kRecompute,          // R: the stage's forward redone before its B
  kSendActivation,     // the output of F(stage, mb) travelling to the group of stage + 1
  kSendGradient,       // the input gradient of B(stage, mb) travelling to the group of stage - 1
  kGradientAllReduce,  // stage's weight gradients summed across replicas (replica = -1)
  // A tied matrix's gradients summed between the group holding its first copy (group, stage)
  // and the one holding its second (peer_group) of one replica.
  kTiedGradientSum,
  kOptimizerStep,  // one device group's parameter update (stage = -1)
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
  // Replicas simulated: fewer than the plan's when identical ones were simulated once
  // (SimOptions::fold_identical_replicas); the figures above cover every replica all the same.
  int64_t replicas_simulated = 0;
};

}  // namespace motley
