// train: whole training runs, the entry points a command line calls — every rank of a plan as
// a thread of this process (one machine standing in for the plan's devices), or this process's
// one rank over a given transport (e.g. GlooTransport from the torch.distributed environment) —
// with optional resume from and saves to a checkpoint directory. They validate nothing
// (validate_plan first) and print nothing (callbacks report). Thread-safe free functions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
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
  // Called after every step on every rank, from that rank's thread, with the wall time the
  // step took there (RankExecutor::step, measured by a steady clock).
  std::function<void(int rank, const StepResult& result, Seconds step_time)> on_rank_step;

  // When set, every rank loads the checkpoint of this directory (RankExecutor::load_checkpoint)
  // before the first step; the run then continues from the checkpoint's step.
  std::string resume_from;
  // When set, every rank saves a checkpoint here after the last step, and also after each step
  // that brings the step count to a multiple of checkpoint_every (when positive).
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int checkpoint_keep = kDefaultKeptCheckpoints;  // the newest checkpoints a save keeps; >= 1

  // When set, each rank talks through the transport this returns (wrapping the rank's own,
  // which outlives it) instead: a seam for emulated links (emulation.h).
  std::function<std::unique_ptr<Transport>(Transport& inner)> decorate_transport;
};

struct TrainReport {
  // The step count before the first step of this run (the checkpoint's step when resuming).
  int64_t first_step = 0;
  // Mean loss over the global batch, per step; empty from train_rank on a rank that does not run
  // the last stage.
  std::vector<double> losses;
  // Wall time of each step on the rank that reported the losses (train_in_process: the lowest
  // such rank; train_rank: this rank, whether or not it holds the loss).
  std::vector<Seconds> step_times;
};

// Limits the intra-op thread pools every rank of this process shares: ATen's and, when the
// BLAS behind libtorch is OpenBLAS, its own (found at run time). REQUIRES: threads >= 1.
void set_intra_op_threads(int threads);

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
