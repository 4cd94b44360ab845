// `motley fidelity`'s options and entry point, shared with `motley run --fidelity`, which is
// the same comparison reached from the run command (run_forwarder.cc). Runs the plan in a child
// process of this binary; thread-compatible.
#pragma once

#include <cstdint>
#include <string>

#include "cost_options.h"
#include "motley/core/status.h"

namespace motley::cli {

struct FidelityCommandOptions {
  std::string plan;
  std::string profile;  // empty: price with the plan's own model
  int64_t steps = 6;
  int warmup = 1;
  bool json = false;
  std::string trace;  // keep the measured trace here; empty: a temporary file
  double timeout_s = 60;
  // The stack the prediction is priced with (default: the cluster's, else megatron-core).
  StackChoice stack;
};

// Runs, simulates and compares (docs/fidelity.md); prints the table or the JSON object.
// Errors: bad input (exit 2) before anything runs; a failed run, named with its error output.
Status fidelity_command(const FidelityCommandOptions& opt);

}  // namespace motley::cli
