// RankExecutor: trains a model under a plan from one rank's side — the rank is one device of a
// device group of one replica (rank_layout.h; a group's devices split its layers as a
// tensor-parallel group), runs that group's actions each step as the plan's task graph gives
// them (receives posted early, sends asynchronous, F / I / W / fused B / R on its StageModules),
// then sums gradients with the other replicas and takes an AdamW step; it also saves and loads
// per-layer checkpoints and records a measured trace. It does not validate plans
// (plan/validate.h), launch processes or pick a transport (train.h). Not thread-safe: one thread
// per RankExecutor; ranks of one world run concurrently (threads or processes).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/exec/checkpoint_store.h"
#include "motley/exec/data.h"
#include "motley/exec/precision.h"
#include "motley/exec/stage_module.h"
#include "motley/exec/transport.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"

namespace motley {

// AdamW (Loshchilov & Hutter 2019) as torch::optim::AdamW computes it; the same on every rank
// and in the sequential reference.
struct OptimizerOptions {
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double epsilon = 1e-8;
  double weight_decay = 0.1;
};

// Builds stage `stage` of the plan into the rank's store; the default (empty) builds
// make_transformer_stage from the model. A seam for tests.
using StageFactory =
    std::function<Result<std::unique_ptr<StageModule>>(int stage, ParameterStore& store)>;

struct ExecOptions {
  uint64_t seed = 0;  // initial weights (StageModuleOptions::seed)
  OptimizerOptions optimizer;
  StageFactory stage_factory;
  bool record_trace = false;  // fill StepResult::events
  // Forward and backward under bf16 autocast (precision.h) or in fp32; AdamW is fp32 either way.
  Precision precision = Precision::kFp32;
  // Where the rank's parameters, optimizer state, activations and messages live: the CPU, or
  // the rank's GPU (cuda:LOCAL_RANK; compute_device.h says whether this build and machine can).
  // Initial weights are drawn on the CPU and moved, so every device starts from the same bits.
  c10::Device device = c10::kCPU;
  // Called on the rank's thread right after each compute action of step `step` finished, with
  // its measured compute time (from when its inputs were there, TraceEvent::ready, to its end),
  // before the action is recorded in the trace (time spent here counts as the action's). A seam
  // for emulated slower devices (emulation.h) and fault injection.
  std::function<void(int rank, int64_t step, const Action& action, Seconds elapsed)> after_action;
};

// One measured piece of a step on one rank, timed by the rank's steady clock from the moment
// the step began there (ranks' clocks are not aligned with each other).
struct TraceEvent {
  enum class Kind {
    kAction,     // one compute action of the plan; `action` says which
    kSend,       // posting one send (the transfer itself is asynchronous)
    kAllReduce,  // waiting, after the last action, for the gradient sums still in flight
    // One gradient bucket's sum (a layer's parameters, or the loss): `start` when it was posted
    // (during the backward that finished its gradients, or after the action), `end` when the
    // wait for it returned. Recorded at that wait, so out of order, and overlapping actions.
    kGradientSum,
    kOptimizer,   // the AdamW step
    kFinishSends  // waiting for the step's sends to complete
  };
  Kind kind = Kind::kAction;
  std::optional<Action> action;
  std::string name;  // "1F3" for actions, e.g. "send_activation 1/3" for sends
  Seconds start;
  // When the inputs were there: an action that waited on a receive starts computing here, so
  // ready - start is communication the schedule did not hide. Equal to start otherwise.
  Seconds ready;
  Seconds end;
};

struct StepResult {
  int64_t step = 0;
  // The mean loss over the global batch, on ranks that run the last stage; nullopt elsewhere.
  std::optional<double> loss;
  std::vector<TraceEvent> events;     // in execution order, when ExecOptions::record_trace
  int64_t optimizer_state_bytes = 0;  // after the step (RankExecutor::optimizer_state_bytes)
};

class RankExecutor {
 public:
  // Builds this rank's stages. `transport` and `tokens` must outlive the executor.
  // REQUIRES: `plan` passed validate_plan for `model` (it cannot deadlock).
  // Errors (invalid_argument): check_plan_structure's against the model's layers (a plan the
  // executor could not index), a transport whose world size is not the plan's number of
  // devices (one rank per device; a group of t devices is a tensor-parallel group of t ranks), a
  // model the stages cannot be built from (make_transformer_stage's errors), a vocabulary below 256
  // byte tokens, a channel longer than kMaxChannelSequence messages.
  static Result<std::unique_ptr<RankExecutor>> create(const ExecOptions& options, const Plan& plan,
                                                      const ModelSpec& model,
                                                      const TokenStream& tokens,
                                                      Transport& transport);
  ~RankExecutor();

  // One training step: this rank's actions for every micro-batch, the gradient all-reduce across
  // replicas (weighted so the update is that of the mean loss over the global batch, whatever
  // each replica's micro-batch count), one AdamW step. Transport errors and timeouts come back
  // naming the rank, the step and the action.
  Result<StepResult> step();

  // Saves a checkpoint of the state after steps_done() steps into checkpoint directory `dir`
  // (created if missing) as its step's directory (checkpoint_store.h), keeping the `keep` newest:
  // one tensor file per model layer ("layer-<i>.bin": its parameters and their AdamW state,
  // checkpoint.h), written by the replica-0 rank that runs the layer, then "manifest.json"
  // (format, step, model name and hash) by rank 0, which then switches the directory's pointer
  // to it. Every rank must call it; it returns once the checkpoint is complete. Replicas hold
  // identical state, so one copy suffices; routed experts split over expert-parallel groups
  // are assembled from the first group's members. REQUIRES: keep >= 1.
  Status save_checkpoint(const std::string& dir, int keep = kDefaultKeptCheckpoints);
  // Loads parameters, optimizer state and the step count from the checkpoint of the same model
  // that find_checkpoint(dir) names (the latest of a checkpoint directory, or `dir` itself when
  // it holds a manifest); the plan may differ from the one that saved it (other partition,
  // placement or replicas). Errors: not_found (no checkpoint, a missing layer file),
  // invalid_argument (a pointer naming no step directory, another model, a corrupt file, a
  // layer file of another step than the manifest's, a shape mismatch).
  Status load_checkpoint(const std::string& dir);

  // This rank's parameters (all stages it runs), in increasing name order. After a step each
  // tensor's grad() holds the gradient that step applied (summed over replicas).
  std::vector<NamedTensor> parameters() const;
  // Which part of each model parameter the tensors of parameters() are (all of it unless the
  // rank's device group is tensor-parallel), by name.
  std::map<std::string, TensorSlice> slices() const;
  // Bytes of AdamW moments this rank holds (none before the first step); with a Plan::zero_stage of
  // 1 or more, about 1 / (replicas) of its parameters' moments.
  int64_t optimizer_state_bytes() const;
  int64_t steps_done() const;

 private:
  struct Impl;
  explicit RankExecutor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace motley
