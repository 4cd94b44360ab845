#include "action_interpreter.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <string>

#include "optimizer.h"

namespace motley::internal {
namespace {

bool is_recompute_stage(const Stage& stage) { return stage.recompute != RecomputePolicy::kNone; }

std::string message_name(CommKind kind, int stage, int64_t micro_batch) {
  const bool activation = kind == CommKind::kSendActivation || kind == CommKind::kRecvActivation;
  return std::string(activation ? "the activation" : "the gradient") + " of stage " +
         std::to_string(stage) + ", micro-batch " + std::to_string(micro_batch);
}

}  // namespace

ActionInterpreter::ActionInterpreter(const Plan& plan, const ModelSpec& model,
                                     const TokenStream& tokens, const RankLayout& layout, int rank,
                                     std::vector<LoweredOp> ops, std::map<int, StageModule*> stages,
                                     std::map<int, std::vector<at::Tensor>> stage_params,
                                     AfterAction after_action, Transport& transport)
    : plan_(plan),
      model_(model),
      tokens_(tokens),
      layout_(layout),
      transport_(transport),
      rank_(rank),
      place_(layout.place_of(rank)),
      last_stage_(static_cast<int>(plan.stages.size()) - 1),
      total_micro_batches_(total_micro_batches(plan)),
      ops_(std::move(ops)),
      stages_(std::move(stages)),
      stage_params_(std::move(stage_params)),
      after_action_(std::move(after_action)) {}

bool ActionInterpreter::runs_stage(int stage) const {
  return stage >= 0 && stage <= last_stage_ &&
         plan_.replicas[place_.replica].stage_group[stage] == place_.group;
}

Status ActionInterpreter::run_step(int64_t step, Precision precision, const OpCallbacks& callbacks,
                                   StepTrace& trace) {
  const AutocastGuard autocast(precision);  // this thread's F, R, I, W, B; not AdamW
  step_ = step;
  live_.clear();
  local_activation_.clear();
  input_gradient_.clear();
  receives_.clear();
  sends_.clear();
  loss_sum_ = 0;
  MOTLEY_RETURN_IF_ERROR(post_receives());
  for (size_t op_index = 0; op_index < ops_.size(); ++op_index) {
    const LoweredOp& op = ops_[op_index];
    const auto start = std::chrono::steady_clock::now();
    ready_ = start;
    if (callbacks.started) callbacks.started(static_cast<int>(op_index));
    if (const auto* a = std::get_if<Action>(&op)) {
      const Status status = run_action(*a);
      const std::string where =
          std::to_string(a->stage) + action_letter(a->kind) + std::to_string(a->micro_batch);
      MOTLEY_RETURN_IF_ERROR(status.with_context("at " + where));
      if (after_action_) {
        // From when the inputs were there: waiting for a message is not the action's compute.
        const std::chrono::duration<double> elapsed =
            std::chrono::steady_clock::now() - std::max(start, ready_);
        after_action_(rank_, step_, *a, Seconds(elapsed.count()));
      }
      trace.record(TraceEvent::Kind::kAction, *a, where, start, ready_);
    } else {
      const CommOp& c = std::get<CommOp>(op);
      const Status status = run_comm(c);
      const std::string where = std::string(comm_kind_name(c.kind)) + " of stage " +
                                std::to_string(c.stage) + ", micro-batch " +
                                std::to_string(c.micro_batch);
      MOTLEY_RETURN_IF_ERROR(status.with_context("at " + where));
      if (c.kind == CommKind::kSendActivation || c.kind == CommKind::kSendGradient) {
        trace.record(TraceEvent::Kind::kSend,
                     std::string(comm_kind_name(c.kind)) + " " + std::to_string(c.stage) + "/" +
                         std::to_string(c.micro_batch),
                     start);
      }
    }
    if (callbacks.finished) callbacks.finished(static_cast<int>(op_index));
  }
  const auto start = std::chrono::steady_clock::now();
  for (auto& send : sends_) MOTLEY_RETURN_IF_ERROR(send->wait().with_context("finishing sends"));
  trace.record(TraceEvent::Kind::kFinishSends, "finish_sends", start);
  MOTLEY_CHECK(live_.empty() && receives_.empty() && input_gradient_.empty(),
               "a validated plan's step left work behind");
  return Status::ok();
}

// All of the step's receives, each channel's in sequence order, into fresh buffers.
Status ActionInterpreter::post_receives() {
  std::vector<CommOp> wanted;
  for (const LoweredOp& op : ops_) {
    const auto* comm = std::get_if<CommOp>(&op);
    if (comm &&
        (comm->kind == CommKind::kRecvActivation || comm->kind == CommKind::kRecvGradient)) {
      wanted.push_back(*comm);
    }
  }
  std::stable_sort(wanted.begin(), wanted.end(), [](const CommOp& a, const CommOp& b) {
    return std::tie(a.peer_group, a.kind, a.sequence) < std::tie(b.peer_group, b.kind, b.sequence);
  });
  for (const CommOp& op : wanted) {
    // Both payloads have the shape of the activation leaving the producing side's boundary:
    // an activation of stage s leaves layer end(s)-1; a gradient of stage s is taken with
    // respect to stage s's input, which left layer begin(s)-1.
    const int boundary_layer = op.kind == CommKind::kRecvActivation
                                   ? plan_.stages[op.stage].layer_end - 1
                                   : plan_.stages[op.stage].layer_begin - 1;
    PostedReceive posted;
    posted.buffer = at::empty(
        boundary_shape(model_, boundary_layer, plan_.micro_batch_size, plan_.seq_len), at::kFloat);
    MOTLEY_ASSIGN_OR_RETURN(
        posted.request,
        transport_.recv(posted.buffer, layout_.pipeline_source(rank_, op.peer_group),
                        message_tag(step_, op.kind, op.sequence),
                        message_name(op.kind, op.stage, op.micro_batch)));
    receives_[{op.kind, op.stage, op.micro_batch}] = std::move(posted);
  }
  return Status::ok();
}

Result<at::Tensor> ActionInterpreter::take_receive(CommKind kind, int stage, int64_t j) {
  auto it = receives_.find({kind, stage, j});
  MOTLEY_CHECK(it != receives_.end(), "a receive the lowering did not post");
  MOTLEY_RETURN_IF_ERROR(it->second.request->wait());
  ready_ = std::chrono::steady_clock::now();
  at::Tensor buffer = std::move(it->second.buffer);
  receives_.erase(it);
  return buffer;
}

Status ActionInterpreter::forward(int s, int64_t j) {
  MicroBatchState& state = live_[{s, j}];
  StageModule& module = *stages_.at(s);
  at::Tensor inputs, targets;
  if (module.takes_tokens() || module.produces_loss()) {
    micro_batch_tensors(tokens_, global_micro_batch(plan_, step_, place_.replica, j),
                        plan_.micro_batch_size, plan_.seq_len, &inputs, &targets);
  }
  if (module.takes_tokens()) {
    state.input = inputs;
  } else {
    if (runs_stage(s - 1)) {
      auto it = local_activation_.find({s - 1, j});
      MOTLEY_CHECK(it != local_activation_.end(), "F before the previous stage's F on one rank");
      state.input = it->second;
      local_activation_.erase(it);
    } else {
      MOTLEY_ASSIGN_OR_RETURN(state.input, take_receive(CommKind::kRecvActivation, s - 1, j));
    }
    state.input.requires_grad_(true);
  }
  state.targets = targets;
  if (is_recompute_stage(plan_.stages[s])) {
    // Keep only the input; R (or the backward) runs the forward again with a graph.
    at::NoGradGuard no_grad;
    state.output = module.forward(state.input, state.targets);
    state.has_graph = false;
  } else {
    state.output = module.forward(state.input, state.targets);
    state.has_graph = true;
  }
  if (module.produces_loss()) {
    loss_sum_ += state.output.item<double>() / static_cast<double>(total_micro_batches_);
  }
  if (runs_stage(s + 1)) local_activation_[{s, j}] = state.output.detach();
  return Status::ok();
}

Status ActionInterpreter::recompute(MicroBatchState& state, int s) {
  state.output = stages_.at(s)->forward(state.input, state.targets);
  state.has_graph = true;
  return Status::ok();
}

Status ActionInterpreter::input_backward(int s, int64_t j, bool fused) {
  auto it = live_.find({s, j});
  MOTLEY_CHECK(it != live_.end(), "a backward before its forward");
  MicroBatchState& state = it->second;
  if (!state.has_graph) MOTLEY_RETURN_IF_ERROR(recompute(state, s));
  StageModule& module = *stages_.at(s);
  at::Tensor grad_output;
  if (module.produces_loss()) {
    grad_output = loss_seed(total_micro_batches_, state.output);
  } else if (runs_stage(s + 1)) {
    auto g = input_gradient_.find({s + 1, j});
    MOTLEY_CHECK(g != input_gradient_.end(), "B before the next stage's B on one rank");
    grad_output = g->second;
    input_gradient_.erase(g);
  } else {
    MOTLEY_ASSIGN_OR_RETURN(grad_output, take_receive(CommKind::kRecvGradient, s + 1, j));
  }
  const bool wants_input_grad = !module.takes_tokens();
  if (fused) {
    std::vector<at::Tensor> inputs = stage_params_[s];
    if (wants_input_grad) inputs.push_back(state.input);
    torch::autograd::backward({state.output}, {grad_output}, /*retain_graph=*/false,
                              /*create_graph=*/false, inputs);
    if (wants_input_grad) input_gradient_[{s, j}] = state.input.grad();
    live_.erase(it);
  } else {
    if (wants_input_grad) {
      input_gradient_[{s, j}] = torch::autograd::grad({state.output}, {state.input}, {grad_output},
                                                      /*retain_graph=*/true)[0];
    }
    state.grad_output = grad_output;
  }
  return Status::ok();
}

Status ActionInterpreter::weight_backward(int s, int64_t j) {
  auto it = live_.find({s, j});
  MOTLEY_CHECK(it != live_.end() && it->second.grad_output.defined(), "W before its I");
  torch::autograd::backward({it->second.output}, {it->second.grad_output},
                            /*retain_graph=*/false, /*create_graph=*/false, stage_params_[s]);
  live_.erase(it);
  return Status::ok();
}

Status ActionInterpreter::run_action(const Action& a) {
  switch (a.kind) {
    case ActionKind::kForward:
      return forward(a.stage, a.micro_batch);
    case ActionKind::kRecompute: {
      auto it = live_.find({a.stage, static_cast<int64_t>(a.micro_batch)});
      MOTLEY_CHECK(it != live_.end(), "R before its F");
      return it->second.has_graph ? Status::ok() : recompute(it->second, a.stage);
    }
    case ActionKind::kBackwardInput:
      return input_backward(a.stage, a.micro_batch, /*fused=*/false);
    case ActionKind::kBackward:
      return input_backward(a.stage, a.micro_batch, /*fused=*/true);
    case ActionKind::kBackwardWeight:
      return weight_backward(a.stage, a.micro_batch);
  }
  return Status::ok();
}

Status ActionInterpreter::run_comm(const CommOp& op) {
  if (op.kind == CommKind::kRecvActivation || op.kind == CommKind::kRecvGradient) {
    return Status::ok();  // posted at the start of the step, waited on by its consumer
  }
  at::Tensor payload;
  if (op.kind == CommKind::kSendActivation) {
    auto it = live_.find({op.stage, static_cast<int64_t>(op.micro_batch)});
    MOTLEY_CHECK(it != live_.end(), "an activation sent before its F");
    payload = it->second.output.detach().contiguous();
    // A recomputing stage keeps only its input; the send holds the output until it completes.
    if (!it->second.has_graph) it->second.output = at::Tensor();
  } else {
    auto it = input_gradient_.find({op.stage, static_cast<int64_t>(op.micro_batch)});
    MOTLEY_CHECK(it != input_gradient_.end(), "a gradient sent before its B");
    payload = it->second.contiguous();
    input_gradient_.erase(it);
  }
  // Every rank of the receiving group whose copy comes from this rank (rank_layout.h).
  for (int peer : layout_.pipeline_destinations(rank_, op.peer_group)) {
    MOTLEY_ASSIGN_OR_RETURN(auto request,
                            transport_.send(payload, peer, message_tag(step_, op.kind, op.sequence),
                                            message_name(op.kind, op.stage, op.micro_batch)));
    sends_.push_back(std::move(request));
  }
  return Status::ok();
}

}  // namespace motley::internal
