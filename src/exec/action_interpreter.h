// ActionInterpreter: one rank's walk of its device group's lowered action list for one step —
// every receive posted at the start, sends posted after the action that produced their payload
// and awaited at the end, each receive awaited right before the action that consumes it, and F
// / R / I / W / fused B run on the rank's StageModules (docs/executor.md, "One step on one rank",
// and why this cannot deadlock). Gradients accumulate into the parameters' .grad; it neither
// sums them across ranks (gradient_buckets.h) nor steps the optimizer. Internal to exec/. Not
// thread-safe: one rank's thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "motley/core/status.h"
#include "motley/exec/data.h"
#include "motley/exec/executor.h"
#include "motley/exec/precision.h"
#include "motley/exec/rank_layout.h"
#include "motley/exec/stage_module.h"
#include "motley/exec/transport.h"
#include "motley/model/model.h"
#include "motley/plan/lower.h"
#include "motley/plan/plan.h"
#include "step_trace.h"

namespace motley::internal {

using AfterAction = decltype(ExecOptions::after_action);

// What a step tells the rest of the rank around each op of the list (its index), on the rank's
// thread: before it runs, and once it has finished (after any after_action hook).
struct OpCallbacks {
  std::function<void(int op)> started;
  std::function<void(int op)> finished;
};

class ActionInterpreter {
 public:
  // The rank `rank` of `layout`, running `ops` (lower_plan's list for its group) on `stages`
  // (every stage it runs, built; `stage_params` what each one's W and B differentiate).
  // `after_action` (may be empty) is ExecOptions::after_action. Everything referenced must
  // outlive the interpreter. REQUIRES: `plan` passed validate_plan for `model`.
  ActionInterpreter(const Plan& plan, const ModelSpec& model, const TokenStream& tokens,
                    const RankLayout& layout, int rank, std::vector<LoweredOp> ops,
                    std::map<int, StageModule*> stages,
                    std::map<int, std::vector<at::Tensor>> stage_params, AfterAction after_action,
                    Transport& transport);

  const std::vector<LoweredOp>& ops() const { return ops_; }
  const std::map<int, std::vector<at::Tensor>>& stage_params() const { return stage_params_; }
  // Whether this rank's group runs stage `stage` (false outside the plan's stages).
  bool runs_stage(int stage) const;

  // Runs step `step` (under `precision`), recording each compute action and send posting and
  // the final wait for the sends into `trace`. A transport error or timeout comes back naming
  // the op it happened at.
  Status run_step(int64_t step, Precision precision, const OpCallbacks& callbacks,
                  StepTrace& trace);
  // The step's mean loss over the global batch so far: the sum of this rank's last-stage
  // micro-batch losses / the global batch's micro-batch count (0 off the last stage).
  double loss_sum() const { return loss_sum_; }

 private:
  // What one (stage, micro-batch) holds between its F and its W (or fused B).
  struct MicroBatchState {
    at::Tensor input;    // token ids, or a leaf that requires grad
    at::Tensor targets;  // last stage only
    at::Tensor output;   // hidden state or loss; without a graph after a recomputing F
    bool has_graph = false;
    at::Tensor grad_output;  // kept from I for W
  };
  struct PostedReceive {
    at::Tensor buffer;
    std::unique_ptr<TransportRequest> request;
  };

  Status post_receives();
  Status run_action(const Action& a);
  Status run_comm(const CommOp& op);
  Status forward(int s, int64_t j);
  Status recompute(MicroBatchState& state, int s);
  Status input_backward(int s, int64_t j, bool fused);
  Status weight_backward(int s, int64_t j);
  Result<at::Tensor> take_receive(CommKind kind, int stage, int64_t j);

  const Plan& plan_;
  const ModelSpec& model_;
  const TokenStream& tokens_;
  const RankLayout& layout_;
  Transport& transport_;
  int rank_;
  RankPlace place_;
  int last_stage_;
  int64_t total_micro_batches_;
  std::vector<LoweredOp> ops_;
  std::map<int, StageModule*> stages_;
  std::map<int, std::vector<at::Tensor>> stage_params_;
  AfterAction after_action_;

  // Per step.
  int64_t step_ = 0;
  std::map<std::pair<int, int64_t>, MicroBatchState> live_;
  std::map<std::pair<int, int64_t>, at::Tensor> local_activation_;  // F(s) -> F(s+1), same rank
  std::map<std::pair<int, int64_t>, at::Tensor> input_gradient_;    // I/B(s) -> send or B(s-1)
  std::map<std::tuple<CommKind, int, int64_t>, PostedReceive> receives_;
  std::vector<std::unique_ptr<TransportRequest>> sends_;
  double loss_sum_ = 0;
  std::chrono::steady_clock::time_point ready_;  // when the current action's inputs arrived
};

}  // namespace motley::internal
