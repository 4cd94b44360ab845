// What motley's forwarder computes for motley-run, which links neither the cost model nor the
// simulator: on a GPU, each device's predicted peak memory (predicted_memory_handover, passed as
// a hidden option); and the emulation's factors for `motley run --emulate`
// (exec/emulation_factors.h): from the analytic cost model, each rank's device type and compute
// slowdown, the step's work on the device that runs natively, the links and the all-reduces of
// the executor's rank sets; from the simulator, the plan's iteration time, handed over as an
// anonymous in-memory file inherited across exec (docs/executor.md, "Emulation"). It measures
// nothing (motley-run measures this CPU's time scale). Free functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "motley/core/status.h"
#include "motley/exec/emulation_factors.h"
#include "run_options.h"

namespace motley::cli {

// Compute, by peak (`cost_speeds` false): the fastest device (highest peak in the model's
// dtype) runs natively, a device with 1/f of its peak is slowed by f. By cost: f is the cost
// model's time of the rank's stages on its device over their time on the fastest-peak device,
// divided by the smallest such ratio (so the device the cost model finds fastest for its work
// runs natively). A rank of a tensor-parallel group computes 1/t of its stages natively and is
// slowed the same way; the group's all-reduces are communication, priced like every other.
// `source` names the plan in errors. REQUIRES: `inputs.plan` passed validate_run_inputs.
// Errors: a model the analytic cost model cannot price, the simulator's.
Result<EmulationFactors> compute_emulation_factors(const RunInputs& inputs, bool cost_speeds,
                                                   const std::string& source);

// For motley's forwarder, given the arguments after `run`: nullopt unless they parse as
// `motley run` options with --emulate; otherwise a file descriptor, open across exec and read
// from its start, holding the factors of that run — or, when they cannot be computed, the error
// (motley-run reports it where it would have met it, after its own checks). Errors: the
// operating system refusing the in-memory file.
Result<std::optional<int>> emulation_handover(const std::vector<std::string>& args);

// For motley's forwarder, given the arguments after `run`: when they parse as `motley run`
// options with a GPU --device, the peak memory the simulator predicts for each of the plan's
// devices (by device id, 0 for a device the plan leaves idle), priced as `motley simulate
// --plan` prices it, as the text of motley-run's hidden --predicted-device-memory option;
// nullopt otherwise, and when the plan cannot be priced (motley-run then prints the measured
// peak alone).
std::optional<std::string> predicted_memory_handover(const std::vector<std::string>& args);

}  // namespace motley::cli
