// train: whole training runs, the entry points a command line calls — every rank of a plan as
// a thread of this process (one machine standing in for the plan's devices), or this process's
// one rank over a given transport (e.g. GlooTransport from the torch.distributed environment).
// They validate nothing (validate_plan first) and print nothing (on_step reports). Thread-safe
// free functions.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "motley/core/status.h"
#include "motley/exec/data.h"
#include "motley/exec/executor.h"
#include "motley/exec/transport.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"

namespace motley {

struct TrainOptions {
  ExecOptions exec;
  int64_t steps = 1;
  TransportOptions transport;  // train_in_process's network
  // Called after every step on each rank that runs the last stage (one call per replica), from
  // that rank's thread; calls from different ranks may run concurrently.
  std::function<void(int rank, const StepResult& result)> on_step;
};

struct TrainReport {
  // Mean loss over the global batch, per step; empty from train_rank on a rank that does not run
  // the last stage.
  std::vector<double> losses;
};

// Runs options.steps steps with one thread per rank over an InProcessNetwork. When a rank
// fails, the network is shut down so the others stop at once, and the first failure (in time)
// is returned. The ranks share the process's intra-op thread pools (ATen's and the BLAS's):
// callers usually limit them (at::set_num_threads, OPENBLAS_NUM_THREADS) to cores / ranks.
// REQUIRES: `plan` passed validate_plan for `model`.
Result<TrainReport> train_in_process(const TrainOptions& options, const Plan& plan,
                                     const ModelSpec& model, const TokenStream& tokens);

// Runs this process's rank (transport.rank()) for options.steps steps. All ranks of the world
// must call it with the same arguments. REQUIRES: `plan` passed validate_plan for `model`.
Result<TrainReport> train_rank(const TrainOptions& options, const Plan& plan,
                               const ModelSpec& model, const TokenStream& tokens,
                               Transport& transport);

}  // namespace motley
