// ActionInterpreter: one step of a rank's device group as the plan's task graph gives it: the
// receives its actions wait on posted at the start and awaited by their consumer, each output
// sent right after its producer, F / R / I / W / fused B on the StageModules (docs/executor.md,
// "One step on one rank"). It neither sums gradients across ranks (gradient_buckets.h) nor steps
// the optimizer. Internal to exec/. Not thread-safe: one rank's thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "motley/core/status.h"
#include "motley/exec/data.h"
#include "motley/exec/executor.h"
#include "motley/exec/precision.h"
#include "motley/exec/rank_layout.h"
#include "motley/exec/split_backward.h"
#include "motley/exec/stage_module.h"
#include "motley/exec/transport.h"
#include "motley/model/model.h"
#include "motley/plan/dependencies.h"
#include "motley/plan/plan.h"
#include "motley/plan/task_graph.h"
#include "step_trace.h"

namespace motley::internal {

using AfterAction = decltype(ExecOptions::after_action);

// What a step tells the rest of the rank around each of its group's actions (the index in the
// group's list), on the rank's thread: before it runs, and once it has finished (after any
// after_action hook, before its output is sent).
struct ActionCallbacks {
  std::function<void(int action)> started;
  std::function<void(int action)> finished;
};

class ActionInterpreter {
 public:
  // The rank `rank` of `layout`, running its group's actions of `graph` (build_task_graph of
  // `plan`) on `stages` (every stage it runs, built; `stage_params` what each one's W and B
  // differentiate). `after_action` (may be empty) is ExecOptions::after_action. Receive buffers
  // and token batches are made on `device` (the stages' parameters'). Everything referenced
  // must outlive the interpreter. REQUIRES: `plan` passed validate_plan for `model`.
  ActionInterpreter(const Plan& plan, const ModelSpec& model, const TokenStream& tokens,
                    const RankLayout& layout, int rank, const TaskGraph& graph,
                    std::map<int, StageModule*> stages,
                    std::map<int, std::vector<at::Tensor>> stage_params, AfterAction after_action,
                    Transport& transport, c10::Device device = c10::kCPU);

  // The group's compute actions, in its order (the graph's nodes of the group).
  const std::vector<Action>& actions() const { return actions_; }
  const std::map<int, std::vector<at::Tensor>>& stage_params() const { return stage_params_; }
  // Which parameters' gradients a split backward leaves for W (known once their stage ran F).
  const SplitBackward& split_backward() const { return split_; }
  // Every rank this one sends a message to or receives one from, increasing.
  std::vector<int> peers() const;

  // Runs step `step` (under `precision`), recording each compute action and send posting and
  // the final wait for the sends into `trace`. A transport error or timeout comes back naming
  // the action or send it happened at.
  Status run_step(int64_t step, Precision precision, const ActionCallbacks& callbacks,
                  StepTrace& trace);
  // The step's mean loss over the global batch so far: the sum of this rank's last-stage
  // micro-batch losses / the global batch's micro-batch count (0 off the last stage).
  double loss_sum() const { return loss_sum_; }
  // Forwards the last step ran again to build a graph (R, or a backward of a micro-batch whose
  // F kept only its input).
  int64_t recomputed_forwards() const { return recomputed_forwards_; }

 private:
  // What one (stage, micro-batch) holds between its F and its W (or fused B).
  struct MicroBatchState {
    at::Tensor input;    // token ids, or a leaf that requires grad
    at::Tensor targets;  // last stage only
    at::Tensor output;   // hidden state or loss; without a graph after a recomputing F
    bool has_graph = false;
    bool input_pass_done = false;      // I ran: W may follow
    DeferredWeightGradients deferred;  // the weight products' gradients I left for W
  };
  struct PostedReceive {
    at::Tensor buffer;
    std::unique_ptr<TransportRequest> request;
  };

  Status post_receives();
  Status run_action(int32_t node);
  Status send_output(int32_t node, StepTrace& trace);
  Status forward(int32_t node);
  Status recompute(MicroBatchState& state, int s);
  Status input_backward(int32_t node, bool fused);
  Status weight_backward(int s, int64_t j);
  // The inputs of `node` that other stages produced, in the graph's order, with the producing
  // stage (F: the activation of the stage before, or the partial embeddings of every embedding
  // shard; I and B: the gradient of the stage after, or the partial gradients of every head
  // shard; a head shard's I and B: the other shards' statistics): each the message carrying it,
  // waited on here, or the output an earlier action of this group kept for it.
  Result<std::vector<std::pair<int, at::Tensor>>> take_neighbour_inputs(int32_t node);
  // Their sum: the one input of a stage, or the partial results of a run of shards.
  Result<at::Tensor> take_summed_input(int32_t node);
  // Whether stage `s` is a vocabulary shard of the head (its forward yields statistics).
  bool is_head_shard(int s) const;
  Result<at::Tensor> take_receive(int32_t message);

  const Plan& plan_;
  const ModelSpec& model_;
  const TokenStream& tokens_;
  const RankLayout& layout_;
  const TaskGraph& graph_;
  Transport& transport_;
  c10::Device device_;
  int rank_;
  RankPlace place_;
  int64_t total_micro_batches_;
  // Under context parallelism (splits_sequences), the positions of this rank's tokens of every
  // sequence (undefined otherwise), and how many it holds.
  at::Tensor positions_;
  int64_t local_seq_len_;
  int first_head_shard_;  // the first vocabulary shard of the head; the stage count when none
  int32_t first_node_;    // the group's actions are nodes first_node_ .. + actions_.size()
  std::vector<Action> actions_;  // the group's, in order
  // The micro-batches its R actions recompute on stages that keep their activations: their F
  // keeps only its input, like a recomputing stage's.
  RecomputedMicroBatches recomputed_{{}, {}};
  // Per action of the group: a later action of the group, on another stage, consumes its output.
  std::vector<bool> kept_;
  std::map<int, StageModule*> stages_;
  std::map<int, std::vector<at::Tensor>> stage_params_;
  AfterAction after_action_;

  // Per step.
  int64_t step_ = 0;
  std::map<std::pair<int, int64_t>, MicroBatchState> live_;
  SplitBackward split_;  // where this rank's forwards leave weight gradients for W
  // By producing node: F's activation kept for this group, I's or B's input gradient until it
  // is sent or consumed.
  std::map<int32_t, at::Tensor> outputs_;
  std::map<int32_t, PostedReceive> receives_;  // by message node
  std::vector<std::unique_ptr<TransportRequest>> sends_;
  double loss_sum_ = 0;
  int64_t recomputed_forwards_ = 0;
  std::chrono::steady_clock::time_point ready_;  // when the current action's inputs arrived
};

}  // namespace motley::internal
