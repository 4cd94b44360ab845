// The fidelity report: how far a simulated iteration (SimResult with its timeline) agrees with
// a measured run of the same plan (MeasuredTrace, filled by the caller from the executor's
// trace, so this module knows nothing of the executor). It compares the iteration time, each
// device's step, busy and idle time, and the time per kind of work; it runs nothing. Free
// functions on plain data; thread-safe. The method is documented in docs/fidelity.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/sim/sim_result.h"

namespace motley {

// What one measured event of a rank's step was.
enum class MeasuredKind {
  kForward,         // F compute, from its inputs' arrival to its end
  kBackwardInput,   // B (input gradient)
  kBackwardWeight,  // W (weight gradient)
  kBackward,        // fused B and W
  kRecompute,       // R
  kInputWait,       // an action waiting for its inputs: exposed communication and bubbles
  kSendPost,        // posting a send (the transfer itself is asynchronous)
  kSendWait,        // waiting, after the last action, for the step's sends to complete
  kAllReduceWait,   // waiting, after the last action, for the gradient sums still in flight
  kOptimizer,       // the optimizer step
};
const char* measured_kind_name(MeasuredKind kind);  // "F", "input wait", ...

struct MeasuredEvent {
  MeasuredKind kind = MeasuredKind::kForward;
  int stage = -1;        // compute and input waits; -1 otherwise
  int micro_batch = -1;  // compute and input waits; -1 otherwise
  int64_t step = 0;      // index of the step in the run, 0 = the first measured
  Seconds start;         // from the start of the rank's step (ranks' clocks are not aligned)
  Seconds duration;
};

// One rank of the run: the device it stands for and its events. Overlapping events (gradient
// sums that run beside the actions) are not listed: the events of one step do not overlap.
struct MeasuredRank {
  int rank = 0;
  int replica = 0;
  int group = 0;
  int device = 0;                   // the cluster device id, as SimResult::devices names it
  std::vector<Seconds> step_times;  // the rank's wall time of each step, [step]
  std::vector<MeasuredEvent> events;
};

struct MeasuredTrace {
  std::vector<MeasuredRank> ranks;
};

struct FidelityOptions {
  // Steps dropped from the start of the run (allocation, first-touch, caches); every figure is
  // the median over the remaining steps. REQUIRES at use: fewer than the steps measured.
  int warmup_steps = 1;
};

// One compared figure, seconds per iteration.
struct FidelityFigure {
  std::string name;
  double predicted_s = 0;
  double measured_s = 0;
  // 100 * (predicted - measured) / measured; nullopt when measured is 0.
  std::optional<double> error_pct;
};

struct DeviceFidelity {
  int device = 0;
  int rank = 0;
  int replica = 0;
  int group = 0;
  FidelityFigure step;  // the device's own step: its last task's end vs. the rank's wall time
  FidelityFigure busy;  // compute and optimizer step
  FidelityFigure idle;  // iteration time - busy
  // Per kind of work on this device, as FidelityReport::kinds: where its step went.
  std::vector<FidelityFigure> kinds;
};

struct FidelityReport {
  int steps_measured = 0;
  int steps_used = 0;  // steps_measured - warmup_steps
  FidelityFigure iteration;
  // The fastest and slowest measured iterations after the warm-up: an error inside that range
  // is within the run's own noise.
  double iteration_min_s = 0;
  double iteration_max_s = 0;
  std::vector<DeviceFidelity> devices;  // by rank
  // Per kind of work, summed over the devices, in the order fidelity_kind_names() gives;
  // the kinds of each device add up to the iteration time (docs/fidelity.md).
  std::vector<FidelityFigure> kinds;
  // Over the devices' step figures: the mean and the largest |error_pct|.
  double mean_abs_device_error_pct = 0;
  double max_abs_device_error_pct = 0;
};

// The names of FidelityReport::kinds, in order.
std::vector<std::string> fidelity_kind_names();

// 100 * (predicted - measured) / measured, nullopt when measured is 0.
std::optional<double> error_pct(double predicted, double measured);

// The median of `values` (the mean of the middle two for an even count). REQUIRES: non-empty.
double median(std::vector<double> values);

// Compares `predicted` (simulated with SimOptions::record_timeline) with `measured`.
// Errors (invalid_argument): no timeline, no measured rank, a rank whose device the simulation
// does not have, a rank with no more steps than options.warmup_steps, ranks with different step
// counts.
Result<FidelityReport> fidelity_report(const FidelityOptions& options, const SimResult& predicted,
                                       const MeasuredTrace& measured);

// {"predicted_s", "measured_s", "error_pct", "measured_min_s", "measured_max_s",
//  "steps_measured", "steps_used", "devices": [...], "kinds": [...], ...}; error_pct is null
//  where measured is 0.
Json fidelity_report_to_json(const FidelityReport& report);

}  // namespace motley
