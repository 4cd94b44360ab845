#include "action_interpreter.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>

#include "motley/exec/compute_device.h"
#include "motley/plan/plan_json.h"
#include "optimizer.h"

namespace motley::internal {
namespace {

// A stage with per-layer recompute recomputes all its layers here (the same numbers; more
// compute and less memory than the plan prices).
bool is_recompute_stage(const Stage& stage) { return stage.recomputes(); }

std::string message_name(const TaskNode& message) {
  return fmt::format(
      "{} of stage {}, micro-batch {}",
      message.kind == TaskKind::kActivationMessage ? "the activation" : "the gradient",
      message.stage, message.micro_batch);
}

const char* send_name(const TaskNode& message) {
  return comm_kind_name(message.kind == TaskKind::kActivationMessage ? CommKind::kSendActivation
                                                                     : CommKind::kSendGradient);
}

}  // namespace

ActionInterpreter::ActionInterpreter(const Plan& plan, const ModelSpec& model,
                                     const TokenStream& tokens, const RankLayout& layout, int rank,
                                     const TaskGraph& graph, std::map<int, StageModule*> stages,
                                     std::map<int, std::vector<at::Tensor>> stage_params,
                                     AfterAction after_action, Transport& transport,
                                     c10::Device device)
    : plan_(plan),
      model_(model),
      tokens_(tokens),
      layout_(layout),
      graph_(graph),
      transport_(transport),
      device_(device),
      rank_(rank),
      place_(layout.place_of(rank)),
      total_micro_batches_(total_micro_batches(plan)),
      local_seq_len_(plan.seq_len),
      first_head_shard_(static_cast<int>(plan.stages.size()) - vocab_shard_count(plan.stages)),
      first_node_(graph.group_begin(place_.replica, place_.group)),
      stages_(std::move(stages)),
      stage_params_(std::move(stage_params)),
      after_action_(std::move(after_action)) {
  if (splits_sequences(plan)) {
    const int c = plan.context_parallel;
    positions_ = context_parallel_positions(plan.seq_len, c, place_.replica % c);
    local_seq_len_ = plan.seq_len / c;
  }
  const int32_t size = graph.group_size(place_.replica, place_.group);
  kept_.assign(size, false);
  for (int32_t v = first_node_; v < first_node_ + size; ++v) {
    const TaskNode& n = graph.node(v);
    actions_.push_back(Action{action_kind(n.kind), n.stage, n.micro_batch});
    // Without a message, another stage's output comes from this group (the lowering sends
    // exactly what crosses groups).
    for (const TaskInput& in : graph.inputs(v)) {
      if (in.message < 0 && graph.node(in.producer).stage != n.stage) {
        kept_[in.producer - first_node_] = true;
      }
    }
  }
  recomputed_ = RecomputedMicroBatches(plan.stages, actions_);
}

Status ActionInterpreter::run_step(int64_t step, Precision precision,
                                   const ActionCallbacks& callbacks, StepTrace& trace) {
  const AutocastGuard autocast(precision, device_.type());  // F, R, I, W, B; not AdamW
  const SplitBackward::Recording recording(split_);
  step_ = step;
  live_.clear();
  outputs_.clear();
  receives_.clear();
  sends_.clear();
  loss_sum_ = 0;
  recomputed_forwards_ = 0;
  MOTLEY_RETURN_IF_ERROR(post_receives());
  for (size_t i = 0; i < actions_.size(); ++i) {
    const Action& a = actions_[i];
    const int32_t node = first_node_ + static_cast<int32_t>(i);
    const auto start = std::chrono::steady_clock::now();
    ready_ = start;
    if (callbacks.started) callbacks.started(static_cast<int>(i));
    const std::string where = action_to_string(a);
    MOTLEY_RETURN_IF_ERROR(run_action(node).with_context(fmt::format("at {}", where)));
    // A GPU runs the action's kernels after the host queued them: when the action is timed,
    // its end is when the device finished.
    if (after_action_ || trace.enabled()) synchronize_device(device_);
    if (after_action_) {
      // From when the inputs were there: waiting for a message is not the action's compute.
      const std::chrono::duration<double> elapsed =
          std::chrono::steady_clock::now() - std::max(start, ready_);
      after_action_(rank_, step_, a, Seconds(elapsed.count()));
    }
    trace.record(TraceEvent::Kind::kAction, a, where, start, ready_);
    if (callbacks.finished) callbacks.finished(static_cast<int>(i));
    MOTLEY_RETURN_IF_ERROR(send_output(node, trace));
  }
  const auto start = std::chrono::steady_clock::now();
  for (auto& send : sends_) MOTLEY_RETURN_IF_ERROR(send->wait().with_context("finishing sends"));
  trace.record(TraceEvent::Kind::kFinishSends, "finish_sends", start);
  MOTLEY_CHECK(live_.empty() && receives_.empty() && outputs_.empty(),
               "a validated plan's step left work behind");
  return Status::ok();
}

// Every message the group's actions wait on into fresh buffers, in message id order: by sending
// group, then in the order that group sends them (task_graph.h), so that the receives from each
// peer rank are posted in the order it sends — what a transport matching in order needs
// (MessageMatching::kInOrder; each channel's sequence order follows).
Status ActionInterpreter::post_receives() {
  std::vector<int32_t> wanted;
  for (int32_t v = first_node_; v < first_node_ + static_cast<int32_t>(actions_.size()); ++v) {
    for (const TaskInput& in : graph_.inputs(v)) {
      if (in.message >= 0) wanted.push_back(in.message);
    }
  }
  std::sort(wanted.begin(), wanted.end());
  for (int32_t id : wanted) {
    const TaskNode& m = graph_.node(id);
    // Both payloads have the shape of the activation leaving the producing side's boundary:
    // an activation of stage s leaves layer end(s)-1; a gradient of stage s is taken with
    // respect to stage s's input, which left layer begin(s)-1.
    // A head shard's activation is its statistics: three numbers per token.
    const int boundary_layer = m.kind == TaskKind::kActivationMessage
                                   ? plan_.stages[m.stage].layer_end - 1
                                   : plan_.stages[m.stage].layer_begin - 1;
    const bool statistics = m.kind == TaskKind::kActivationMessage && is_head_shard(m.stage);
    PostedReceive posted;
    posted.buffer = at::empty(
        statistics ? std::vector<int64_t>{plan_.micro_batch_size * local_seq_len_, 3}
                   : boundary_shape(model_, boundary_layer, plan_.micro_batch_size, local_seq_len_),
        at::TensorOptions().dtype(at::kFloat).device(device_));
    MOTLEY_ASSIGN_OR_RETURN(
        posted.request, transport_.recv(posted.buffer, layout_.pipeline_source(rank_, m.group),
                                        message_tag(step_, m.kind, m.sequence), message_name(m)));
    receives_[id] = std::move(posted);
  }
  return Status::ok();
}

std::vector<int> ActionInterpreter::peers() const {
  std::set<int> peers;
  for (int32_t v = first_node_; v < first_node_ + static_cast<int32_t>(actions_.size()); ++v) {
    for (const TaskInput& in : graph_.inputs(v)) {
      if (in.message >= 0)
        peers.insert(layout_.pipeline_source(rank_, graph_.node(in.message).group));
    }
    for (int32_t message : graph_.sent_messages(v)) {
      for (int peer : layout_.pipeline_destinations(rank_, graph_.node(message).peer_group)) {
        peers.insert(peer);
      }
    }
  }
  return {peers.begin(), peers.end()};
}

Result<at::Tensor> ActionInterpreter::take_receive(int32_t message) {
  auto it = receives_.find(message);
  MOTLEY_CHECK(it != receives_.end(), "a message no action of this group waits on");
  MOTLEY_RETURN_IF_ERROR(it->second.request->wait());
  ready_ = std::chrono::steady_clock::now();
  at::Tensor buffer = std::move(it->second.buffer);
  receives_.erase(it);
  return buffer;
}

bool ActionInterpreter::is_head_shard(int s) const {
  return s >= first_head_shard_ && plan_.stages[s].is_vocab_shard();
}

Result<std::vector<std::pair<int, at::Tensor>>> ActionInterpreter::take_neighbour_inputs(
    int32_t node) {
  const int stage = graph_.node(node).stage;
  std::vector<std::pair<int, at::Tensor>> out;
  for (const TaskInput& in : graph_.inputs(node)) {
    const int from = graph_.node(in.producer).stage;
    if (from == stage) continue;
    if (in.message >= 0) {
      MOTLEY_ASSIGN_OR_RETURN(at::Tensor t, take_receive(in.message));
      out.emplace_back(from, std::move(t));
      continue;
    }
    auto it = outputs_.find(in.producer);
    MOTLEY_CHECK(it != outputs_.end(), "an input taken before this group produced it");
    out.emplace_back(from, std::move(it->second));
    outputs_.erase(it);
  }
  MOTLEY_CHECK(!out.empty(), "an action with no input from another stage");
  return out;
}

Result<at::Tensor> ActionInterpreter::take_summed_input(int32_t node) {
  MOTLEY_ASSIGN_OR_RETURN(auto inputs, take_neighbour_inputs(node));
  at::Tensor sum = std::move(inputs[0].second);
  for (size_t i = 1; i < inputs.size(); ++i) sum = sum + inputs[i].second;
  return sum;
}

Status ActionInterpreter::forward(int32_t node) {
  const TaskNode& n = graph_.node(node);
  const int s = n.stage;
  const int64_t j = n.micro_batch;
  MicroBatchState& state = live_[{s, j}];
  StageModule& module = *stages_.at(s);
  at::Tensor inputs, targets;
  if (module.takes_tokens() || module.produces_loss()) {
    micro_batch_tensors(tokens_, global_micro_batch(plan_, step_, place_.replica, j),
                        plan_.micro_batch_size, plan_.seq_len, &inputs, &targets);
    if (positions_.defined()) {  // this rank's share of every sequence
      inputs = inputs.index_select(1, positions_);
      targets = targets.index_select(1, positions_);
    }
    inputs = inputs.to(device_);
    targets = targets.to(device_);
  }
  if (module.takes_tokens()) {
    state.input = inputs;
  } else {
    MOTLEY_ASSIGN_OR_RETURN(state.input, take_summed_input(node));
    state.input.requires_grad_(true);
  }
  state.targets = targets;
  if (is_recompute_stage(plan_.stages[s]) || recomputed_.contains(s, static_cast<int>(j))) {
    // Keep only the input; R (or the backward) runs the forward again with a graph.
    at::NoGradGuard no_grad;
    state.output = module.forward(state.input, state.targets);
    state.has_graph = false;
  } else {
    state.output = module.forward(state.input, state.targets);
    state.has_graph = true;
  }
  // A head shard's loss needs every shard's statistics: it comes in its I or B.
  if (module.produces_loss() && !is_head_shard(s)) {
    loss_sum_ += state.output.item<double>() / static_cast<double>(total_micro_batches_);
  }
  if (kept_[node - first_node_]) outputs_[node] = state.output.detach();
  return Status::ok();
}

Status ActionInterpreter::recompute(MicroBatchState& state, int s) {
  ++recomputed_forwards_;
  state.output = stages_.at(s)->forward(state.input, state.targets);
  state.has_graph = true;
  return Status::ok();
}

Status ActionInterpreter::input_backward(int32_t node, bool fused) {
  const TaskNode& n = graph_.node(node);
  const int s = n.stage;
  auto it = live_.find({s, static_cast<int64_t>(n.micro_batch)});
  MOTLEY_CHECK(it != live_.end(), "a backward before its forward");
  MicroBatchState& state = it->second;
  if (!state.has_graph) MOTLEY_RETURN_IF_ERROR(recompute(state, s));
  StageModule& module = *stages_.at(s);
  at::Tensor grad_output;
  if (is_head_shard(s)) {
    // The loss from every shard's statistics (in shard order, this shard's own with its graph);
    // each shard computes the same value, the last stage counts it.
    MOTLEY_ASSIGN_OR_RETURN(auto received, take_neighbour_inputs(node));
    std::vector<at::Tensor> statistics(plan_.stages.size() - first_head_shard_);
    statistics[s - first_head_shard_] = state.output;
    for (auto& [from, t] : received) statistics.at(from - first_head_shard_) = std::move(t);
    state.output = vocab_shard_loss(statistics);
    if (s + 1 == static_cast<int>(plan_.stages.size())) {
      loss_sum_ += state.output.item<double>() / static_cast<double>(total_micro_batches_);
    }
  }
  if (module.produces_loss()) {
    grad_output = loss_seed(total_micro_batches_, state.output);
  } else {
    MOTLEY_ASSIGN_OR_RETURN(grad_output, take_summed_input(node));
  }
  const bool wants_input_grad = !module.takes_tokens();
  if (fused) {
    std::vector<at::Tensor> inputs = stage_params_[s];
    if (wants_input_grad) inputs.push_back(state.input);
    torch::autograd::backward({state.output}, {grad_output}, /*retain_graph=*/false,
                              /*create_graph=*/false, inputs);
    if (wants_input_grad) outputs_[node] = state.input.grad();
    live_.erase(it);
  } else {
    // Everything but the weight products' weight gradients, which wait for W.
    const at::Tensor input_grad =
        split_.input_pass(state.output, grad_output, wants_input_grad ? state.input : at::Tensor(),
                          stage_params_[s], state.deferred);
    if (wants_input_grad) outputs_[node] = input_grad;
    state.output = at::Tensor();  // the graph is gone; W needs only what I left it
    state.input_pass_done = true;
  }
  return Status::ok();
}

Status ActionInterpreter::weight_backward(int s, int64_t j) {
  auto it = live_.find({s, j});
  MOTLEY_CHECK(it != live_.end() && it->second.input_pass_done, "W before its I");
  it->second.deferred.apply();
  live_.erase(it);
  return Status::ok();
}

Status ActionInterpreter::run_action(int32_t node) {
  const Action& a = actions_[node - first_node_];
  switch (a.kind) {
    case ActionKind::kForward:
      return forward(node);
    case ActionKind::kRecompute: {
      auto it = live_.find({a.stage, static_cast<int64_t>(a.micro_batch)});
      MOTLEY_CHECK(it != live_.end(), "R before its F");
      return it->second.has_graph ? Status::ok() : recompute(it->second, a.stage);
    }
    case ActionKind::kBackwardInput:
      return input_backward(node, /*fused=*/false);
    case ActionKind::kBackward:
      return input_backward(node, /*fused=*/true);
    case ActionKind::kBackwardWeight:
      return weight_backward(a.stage, a.micro_batch);
  }
  return Status::ok();
}

// Posts the messages carrying `node`'s output to other groups, when there are any: one, or one
// per group of a run of vocabulary shards the output goes to (or a head shard's statistics to
// every other shard).
Status ActionInterpreter::send_output(int32_t node, StepTrace& trace) {
  const std::vector<int32_t> sent = graph_.sent_messages(node);
  if (sent.empty()) return Status::ok();
  const TaskNode& first = graph_.node(sent.front());
  const auto start = std::chrono::steady_clock::now();
  at::Tensor payload;
  if (first.kind == TaskKind::kActivationMessage) {
    auto it = live_.find({first.stage, static_cast<int64_t>(first.micro_batch)});
    MOTLEY_CHECK(it != live_.end(), "an activation sent before its F");
    payload = it->second.output.detach().contiguous();
    // A recomputing stage keeps only its input; the send holds the output until it completes.
    if (!it->second.has_graph) it->second.output = at::Tensor();
  } else {
    auto it = outputs_.find(node);
    MOTLEY_CHECK(it != outputs_.end(), "a gradient sent before its B");
    payload = it->second.contiguous();
    // Kept too when a shard on this group takes it as well.
    if (!kept_[node - first_node_]) outputs_.erase(it);
  }
  for (int32_t message : sent) {
    const TaskNode& m = graph_.node(message);
    const std::string at =
        fmt::format("{} of stage {}, micro-batch {}", send_name(m), m.stage, m.micro_batch);
    // Every rank of the receiving group whose copy comes from this rank (rank_layout.h).
    for (int peer : layout_.pipeline_destinations(rank_, m.peer_group)) {
      Result<std::unique_ptr<TransportRequest>> request =
          transport_.send(payload, peer, message_tag(step_, m.kind, m.sequence), message_name(m));
      if (!request.is_ok()) return request.status().with_context(fmt::format("at {}", at));
      sends_.push_back(std::move(request).value());
    }
  }
  trace.record(TraceEvent::Kind::kSend,
               fmt::format("{} {}/{}", send_name(first), first.stage, first.micro_batch), start);
  return Status::ok();
}

}  // namespace motley::internal
