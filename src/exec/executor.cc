// The action interpreter. docs/executor.md explains the rules it follows (receives posted at the
// start of a step, sends never waited on before the end of it, each receive waited on right
// before the action that consumes it) and why they cannot deadlock on a validated plan.
#include "motley/exec/executor.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "motley/core/json.h"
#include "motley/exec/checkpoint.h"
#include "motley/exec/rank_layout.h"
#include "motley/plan/lower.h"
#include "motley/plan/spec_hash.h"
#include "training.h"

namespace motley {

// ---------------------------------------------------------------------------------------------
// Shared with the sequential reference.

namespace internal {

struct AdamWStep::Impl {
  std::vector<at::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> optimizer;
};

AdamWStep::AdamWStep(std::vector<at::Tensor> params, const OptimizerOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->params = params;
  torch::optim::AdamWOptions adamw(options.learning_rate);
  adamw.betas(std::make_tuple(options.beta1, options.beta2));
  adamw.eps(options.epsilon);
  adamw.weight_decay(options.weight_decay);
  impl_->optimizer = std::make_unique<torch::optim::AdamW>(std::move(params), adamw);
}

AdamWStep::~AdamWStep() = default;

void AdamWStep::materialize_gradients() {
  for (at::Tensor& p : impl_->params) {
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
  }
}

void AdamWStep::step() {
  materialize_gradients();
  impl_->optimizer->step();
}

void AdamWStep::zero_gradients() { impl_->optimizer->zero_grad(); }

// torch::optim keys its per-parameter state by the address of the parameter's TensorImpl,
// printed as c10::guts::to_string prints it (torch/csrc/api/src/optim/adamw.cpp).
std::optional<AdamWStep::State> AdamWStep::state(const at::Tensor& param) const {
  auto& states = impl_->optimizer->state();
  auto it = states.find(c10::guts::to_string(param.unsafeGetTensorImpl()));
  if (it == states.end()) return std::nullopt;
  const auto& adamw = static_cast<const torch::optim::AdamWParamState&>(*it->second);
  return State{adamw.step(), adamw.exp_avg(), adamw.exp_avg_sq()};
}

void AdamWStep::set_state(const at::Tensor& param, const State& state) {
  auto adamw = std::make_unique<torch::optim::AdamWParamState>();
  adamw->step(state.step);
  adamw->exp_avg(state.exp_avg.clone());
  adamw->exp_avg_sq(state.exp_avg_sq.clone());
  impl_->optimizer->state()[c10::guts::to_string(param.unsafeGetTensorImpl())] = std::move(adamw);
}

at::Tensor loss_seed(int64_t total_micro_batches, const at::Tensor& loss) {
  return at::full({}, 1.0 / static_cast<double>(total_micro_batches), loss.scalar_type());
}

}  // namespace internal

// ---------------------------------------------------------------------------------------------

namespace {

bool is_recompute_stage(const Stage& stage) { return stage.recompute != RecomputePolicy::kNone; }

std::string message_name(CommKind kind, int stage, int64_t micro_batch) {
  const bool activation = kind == CommKind::kSendActivation || kind == CommKind::kRecvActivation;
  return std::string(activation ? "the activation" : "the gradient") + " of stage " +
         std::to_string(stage) + ", micro-batch " + std::to_string(micro_batch);
}

std::string first_line(const char* what) {
  std::string text = what;
  const size_t end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

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

}  // namespace

struct RankExecutor::Impl {
  Impl(const ExecOptions& o, const Plan& p, const ModelSpec& m, const TokenStream& t, Transport& tr)
      : options(o), plan(p), model(m), tokens(t), transport(tr), layout(p) {}

  ExecOptions options;
  Plan plan;
  ModelSpec model;
  const TokenStream& tokens;
  Transport& transport;
  RankLayout layout;
  int rank = 0;
  RankPlace place;
  int last_stage = 0;
  int64_t total_micro_batches = 0;
  std::vector<LoweredOp> ops;
  ParameterStore store;
  std::map<int, std::unique_ptr<StageModule>> stages;
  std::map<int, std::vector<at::Tensor>> stage_params;  // what W and B differentiate
  // Gradient sums: per set of ranks holding a parameter, that set's tensors (name order). The
  // sets are visited in increasing order on every rank, so overlapping sets cannot deadlock.
  std::map<std::vector<int>, std::vector<at::Tensor>> reduce_sets;
  std::unique_ptr<internal::AdamWStep> optimizer;
  // Every parameter of this rank with the layer it belongs to (its checkpoint file).
  struct OwnedParameter {
    at::Tensor tensor;
    int layer = 0;
  };
  std::map<std::string, OwnedParameter> parameters_by_name;
  std::vector<int> stage_of_layer;
  int64_t steps_done = 0;
  Status failed;

  // Per step.
  std::map<std::pair<int, int64_t>, MicroBatchState> live;
  std::map<std::pair<int, int64_t>, at::Tensor> local_activation;  // F(s) -> F(s+1), same rank
  std::map<std::pair<int, int64_t>, at::Tensor> input_gradient;    // I/B(s) -> send or B(s-1)
  std::map<std::tuple<CommKind, int, int64_t>, PostedReceive> receives;
  std::vector<std::unique_ptr<TransportRequest>> sends;
  double loss_sum = 0;
  std::chrono::steady_clock::time_point step_start;
  std::chrono::steady_clock::time_point ready;  // when the current action's inputs arrived
  std::vector<TraceEvent> events;

  Seconds since_start(std::chrono::steady_clock::time_point t) const {
    return Seconds(std::chrono::duration<double>(t - step_start).count());
  }
  void record(TraceEvent::Kind kind, std::optional<Action> action, std::string name,
              std::chrono::steady_clock::time_point start) {
    if (!options.record_trace) return;
    const auto end = std::chrono::steady_clock::now();
    TraceEvent e;
    e.kind = kind;
    e.action = action;
    e.name = std::move(name);
    e.start = since_start(start);
    e.ready = since_start(std::max(start, ready));
    e.end = since_start(end);
    events.push_back(std::move(e));
  }

  bool on_this_rank(int stage) const {
    return stage >= 0 && stage <= last_stage &&
           plan.replicas[place.replica].stage_group[stage] == place.group;
  }
  int peer_rank(int peer_group) const { return layout.rank_of(place.replica, peer_group); }

  Status build();
  Status run_step();
  Status post_receives();
  Status run_action(const Action& a);
  Status run_comm(const CommOp& op);
  Status forward(int s, int64_t j);
  Status recompute(MicroBatchState& state, int s);
  Status input_backward(int s, int64_t j, bool fused);
  Status weight_backward(int s, int64_t j);
  Result<at::Tensor> take_receive(CommKind kind, int stage, int64_t j);
  Status reduce_and_update(StepResult* result);
};

Status RankExecutor::Impl::build() {
  rank = transport.rank();
  if (transport.world_size() != layout.world_size()) {
    return invalid_argument("the plan has " + std::to_string(layout.world_size()) +
                            " device groups (one rank each) but the transport's world has " +
                            std::to_string(transport.world_size()) + " ranks");
  }
  for (const Stage& s : plan.stages) {
    if (s.layer_begin < 0 || s.layer_end > static_cast<int>(model.layers.size()) ||
        s.layer_begin >= s.layer_end) {
      return invalid_argument("plan stage layers [" + std::to_string(s.layer_begin) + ", " +
                              std::to_string(s.layer_end) + ") do not fit model '" + model.name +
                              "'; was the plan validated against it?");
    }
  }
  for (const Layer& layer : model.layers) {
    const int64_t vocab = layer.embedding ? layer.embedding->vocab
                          : layer.head    ? layer.head->vocab
                                          : kByteVocab;
    if (vocab < kByteVocab) {
      return invalid_argument("model '" + model.name + "': layer '" + layer.name +
                              "' has a vocabulary of " + std::to_string(vocab) +
                              "; the executor trains on byte tokens and needs at least 256");
    }
  }
  place = layout.place_of(rank);
  last_stage = static_cast<int>(plan.stages.size()) - 1;
  total_micro_batches = motley::total_micro_batches(plan);
  const LoweredPlan lowered = lower_plan(plan);
  if (channel_length(lowered) > kMaxChannelSequence) {
    return invalid_argument("the plan sends more than " + std::to_string(kMaxChannelSequence) +
                            " messages on one channel per step");
  }
  ops = lowered.replicas[place.replica].groups[place.group];

  StageFactory factory = options.stage_factory;
  if (!factory) {
    factory = [this](int s, ParameterStore& st) {
      return make_transformer_stage(model, plan.stages[s].layer_begin, plan.stages[s].layer_end,
                                    StageModuleOptions{options.seed, plan.seq_len}, st);
    };
  }
  // Which stage holds each layer, to find every rank that holds a parameter.
  stage_of_layer.assign(model.layers.size(), -1);
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    for (int l = plan.stages[s].layer_begin; l < plan.stages[s].layer_end; ++l) {
      stage_of_layer[l] = static_cast<int>(s);
    }
  }
  std::map<std::string, std::pair<at::Tensor, std::vector<int>>> by_name;  // -> (tensor, ranks)
  for (int s : layout.stages_of(rank)) {
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<StageModule> module, factory(s, store));
    for (const StageParameter& p : module->parameters()) {
      stage_params[s].push_back(p.tensor);
      std::set<int> holders;
      for (int l : p.layers) {
        const int holder_stage =
            l >= 0 && l < static_cast<int>(stage_of_layer.size()) ? stage_of_layer[l] : s;
        for (int r : layout.stage_ranks(holder_stage)) holders.insert(r);
      }
      by_name[p.name] = {p.tensor, std::vector<int>(holders.begin(), holders.end())};
      parameters_by_name[p.name] = OwnedParameter{p.tensor, p.layers.empty() ? -1 : p.layers[0]};
    }
    stages[s] = std::move(module);
  }
  std::vector<at::Tensor> all_params;
  for (auto& [name, entry] : by_name) {
    reduce_sets[entry.second].push_back(entry.first);
    all_params.push_back(entry.first);
  }
  optimizer = std::make_unique<internal::AdamWStep>(all_params, options.optimizer);
  return Status::ok();
}

// All of the step's receives, each channel's in sequence order, into fresh buffers.
Status RankExecutor::Impl::post_receives() {
  std::vector<CommOp> wanted;
  for (const LoweredOp& op : ops) {
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
                                   ? plan.stages[op.stage].layer_end - 1
                                   : plan.stages[op.stage].layer_begin - 1;
    PostedReceive posted;
    posted.buffer = at::empty(
        boundary_shape(model, boundary_layer, plan.micro_batch_size, plan.seq_len), at::kFloat);
    MOTLEY_ASSIGN_OR_RETURN(posted.request,
                            transport.recv(posted.buffer, peer_rank(op.peer_group),
                                           message_tag(steps_done, op.kind, op.sequence),
                                           message_name(op.kind, op.stage, op.micro_batch)));
    receives[{op.kind, op.stage, op.micro_batch}] = std::move(posted);
  }
  return Status::ok();
}

Result<at::Tensor> RankExecutor::Impl::take_receive(CommKind kind, int stage, int64_t j) {
  auto it = receives.find({kind, stage, j});
  MOTLEY_CHECK(it != receives.end(), "a receive the lowering did not post");
  MOTLEY_RETURN_IF_ERROR(it->second.request->wait());
  ready = std::chrono::steady_clock::now();
  at::Tensor buffer = std::move(it->second.buffer);
  receives.erase(it);
  return buffer;
}

Status RankExecutor::Impl::forward(int s, int64_t j) {
  MicroBatchState& state = live[{s, j}];
  StageModule& module = *stages.at(s);
  at::Tensor inputs, targets;
  if (module.takes_tokens() || module.produces_loss()) {
    micro_batch_tensors(tokens, global_micro_batch(plan, steps_done, place.replica, j),
                        plan.micro_batch_size, plan.seq_len, &inputs, &targets);
  }
  if (module.takes_tokens()) {
    state.input = inputs;
  } else {
    if (on_this_rank(s - 1)) {
      auto it = local_activation.find({s - 1, j});
      MOTLEY_CHECK(it != local_activation.end(), "F before the previous stage's F on one rank");
      state.input = it->second;
      local_activation.erase(it);
    } else {
      MOTLEY_ASSIGN_OR_RETURN(state.input, take_receive(CommKind::kRecvActivation, s - 1, j));
    }
    state.input.requires_grad_(true);
  }
  state.targets = targets;
  if (is_recompute_stage(plan.stages[s])) {
    // Keep only the input; R (or the backward) runs the forward again with a graph.
    at::NoGradGuard no_grad;
    state.output = module.forward(state.input, state.targets);
    state.has_graph = false;
  } else {
    state.output = module.forward(state.input, state.targets);
    state.has_graph = true;
  }
  if (module.produces_loss()) {
    loss_sum += state.output.item<double>() / static_cast<double>(total_micro_batches);
  }
  if (on_this_rank(s + 1)) local_activation[{s, j}] = state.output.detach();
  return Status::ok();
}

Status RankExecutor::Impl::recompute(MicroBatchState& state, int s) {
  state.output = stages.at(s)->forward(state.input, state.targets);
  state.has_graph = true;
  return Status::ok();
}

Status RankExecutor::Impl::input_backward(int s, int64_t j, bool fused) {
  auto it = live.find({s, j});
  MOTLEY_CHECK(it != live.end(), "a backward before its forward");
  MicroBatchState& state = it->second;
  if (!state.has_graph) MOTLEY_RETURN_IF_ERROR(recompute(state, s));
  StageModule& module = *stages.at(s);
  at::Tensor grad_output;
  if (module.produces_loss()) {
    grad_output = internal::loss_seed(total_micro_batches, state.output);
  } else if (on_this_rank(s + 1)) {
    auto g = input_gradient.find({s + 1, j});
    MOTLEY_CHECK(g != input_gradient.end(), "B before the next stage's B on one rank");
    grad_output = g->second;
    input_gradient.erase(g);
  } else {
    MOTLEY_ASSIGN_OR_RETURN(grad_output, take_receive(CommKind::kRecvGradient, s + 1, j));
  }
  const bool wants_input_grad = !module.takes_tokens();
  if (fused) {
    std::vector<at::Tensor> inputs = stage_params[s];
    if (wants_input_grad) inputs.push_back(state.input);
    torch::autograd::backward({state.output}, {grad_output}, /*retain_graph=*/false,
                              /*create_graph=*/false, inputs);
    if (wants_input_grad) input_gradient[{s, j}] = state.input.grad();
    live.erase(it);
  } else {
    if (wants_input_grad) {
      input_gradient[{s, j}] = torch::autograd::grad({state.output}, {state.input}, {grad_output},
                                                     /*retain_graph=*/true)[0];
    }
    state.grad_output = grad_output;
  }
  return Status::ok();
}

Status RankExecutor::Impl::weight_backward(int s, int64_t j) {
  auto it = live.find({s, j});
  MOTLEY_CHECK(it != live.end() && it->second.grad_output.defined(), "W before its I");
  torch::autograd::backward({it->second.output}, {it->second.grad_output},
                            /*retain_graph=*/false, /*create_graph=*/false, stage_params[s]);
  live.erase(it);
  return Status::ok();
}

Status RankExecutor::Impl::run_action(const Action& a) {
  switch (a.kind) {
    case ActionKind::kForward:
      return forward(a.stage, a.micro_batch);
    case ActionKind::kRecompute: {
      auto it = live.find({a.stage, static_cast<int64_t>(a.micro_batch)});
      MOTLEY_CHECK(it != live.end(), "R before its F");
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

Status RankExecutor::Impl::run_comm(const CommOp& op) {
  if (op.kind == CommKind::kRecvActivation || op.kind == CommKind::kRecvGradient) {
    return Status::ok();  // posted at the start of the step, waited on by its consumer
  }
  at::Tensor payload;
  if (op.kind == CommKind::kSendActivation) {
    auto it = live.find({op.stage, static_cast<int64_t>(op.micro_batch)});
    MOTLEY_CHECK(it != live.end(), "an activation sent before its F");
    payload = it->second.output.detach().contiguous();
    // A recomputing stage keeps only its input; the send holds the output until it completes.
    if (!it->second.has_graph) it->second.output = at::Tensor();
  } else {
    auto it = input_gradient.find({op.stage, static_cast<int64_t>(op.micro_batch)});
    MOTLEY_CHECK(it != input_gradient.end(), "a gradient sent before its B");
    payload = it->second.contiguous();
    input_gradient.erase(it);
  }
  MOTLEY_ASSIGN_OR_RETURN(auto request,
                          transport.send(payload, peer_rank(op.peer_group),
                                         message_tag(steps_done, op.kind, op.sequence),
                                         message_name(op.kind, op.stage, op.micro_batch)));
  sends.push_back(std::move(request));
  return Status::ok();
}

Status RankExecutor::Impl::reduce_and_update(StepResult* result) {
  auto start = std::chrono::steady_clock::now();
  optimizer->materialize_gradients();
  at::Tensor loss = at::full({1}, loss_sum, at::kFloat);
  const std::vector<int>& loss_ranks = layout.stage_ranks(last_stage);
  const bool holds_loss = on_this_rank(last_stage);
  if (holds_loss && !reduce_sets.count(loss_ranks)) reduce_sets[loss_ranks] = {};
  for (auto& [ranks, params] : reduce_sets) {
    std::vector<at::Tensor> tensors;
    for (const at::Tensor& p : params) tensors.push_back(p.grad());
    if (holds_loss && ranks == loss_ranks) tensors.push_back(loss);
    if (tensors.empty()) continue;
    MOTLEY_RETURN_IF_ERROR(
        transport.all_reduce_sum(tensors, ranks).with_context("gradient all-reduce"));
  }
  record(TraceEvent::Kind::kAllReduce, std::nullopt, "all_reduce", start);
  start = std::chrono::steady_clock::now();
  optimizer->step();
  record(TraceEvent::Kind::kOptimizer, std::nullopt, "optimizer", start);
  if (holds_loss) result->loss = loss.item<double>();
  result->events = std::move(events);
  events.clear();
  return Status::ok();
}

Status RankExecutor::Impl::run_step() {
  const AutocastGuard autocast(options.precision);  // this thread's F, R, I, W, B; not AdamW
  live.clear();
  local_activation.clear();
  input_gradient.clear();
  receives.clear();
  sends.clear();
  events.clear();
  loss_sum = 0;
  step_start = std::chrono::steady_clock::now();
  optimizer->zero_gradients();
  MOTLEY_RETURN_IF_ERROR(post_receives());
  for (const LoweredOp& op : ops) {
    const auto start = std::chrono::steady_clock::now();
    ready = start;
    Status status;
    std::string where;
    if (const auto* a = std::get_if<Action>(&op)) {
      status = run_action(*a);
      where = std::to_string(a->stage) + action_letter(a->kind) + std::to_string(a->micro_batch);
      MOTLEY_RETURN_IF_ERROR(status.with_context("at " + where));
      if (options.after_action) {
        // From when the inputs were there: waiting for a message is not the action's compute.
        const std::chrono::duration<double> elapsed =
            std::chrono::steady_clock::now() - std::max(start, ready);
        options.after_action(rank, steps_done, *a, Seconds(elapsed.count()));
      }
      record(TraceEvent::Kind::kAction, *a, where, start);
    } else {
      const CommOp& c = std::get<CommOp>(op);
      status = run_comm(c);
      where = std::string(comm_kind_name(c.kind)) + " of stage " + std::to_string(c.stage) +
              ", micro-batch " + std::to_string(c.micro_batch);
      MOTLEY_RETURN_IF_ERROR(status.with_context("at " + where));
      if (c.kind == CommKind::kSendActivation || c.kind == CommKind::kSendGradient) {
        record(TraceEvent::Kind::kSend, std::nullopt,
               std::string(comm_kind_name(c.kind)) + " " + std::to_string(c.stage) + "/" +
                   std::to_string(c.micro_batch),
               start);
      }
    }
  }
  const auto start = std::chrono::steady_clock::now();
  for (auto& send : sends) MOTLEY_RETURN_IF_ERROR(send->wait().with_context("finishing sends"));
  record(TraceEvent::Kind::kFinishSends, std::nullopt, "finish_sends", start);
  MOTLEY_CHECK(live.empty() && receives.empty() && input_gradient.empty(),
               "a validated plan's step left work behind");
  return Status::ok();
}

RankExecutor::RankExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RankExecutor::~RankExecutor() = default;

Result<std::unique_ptr<RankExecutor>> RankExecutor::create(const ExecOptions& options,
                                                           const Plan& plan, const ModelSpec& model,
                                                           const TokenStream& tokens,
                                                           Transport& transport) {
  auto impl = std::make_unique<Impl>(options, plan, model, tokens, transport);
  try {
    MOTLEY_RETURN_IF_ERROR(impl->build());
  } catch (const std::exception& e) {
    return internal_error("rank " + std::to_string(transport.rank()) +
                          ": building the stages failed: " + first_line(e.what()));
  }
  return std::unique_ptr<RankExecutor>(new RankExecutor(std::move(impl)));
}

Result<StepResult> RankExecutor::step() {
  Impl& m = *impl_;
  if (!m.failed.is_ok()) return m.failed;
  const std::string context =
      "rank " + std::to_string(m.rank) + " (replica " + std::to_string(m.place.replica) +
      ", device group " + std::to_string(m.place.group) + "), step " + std::to_string(m.steps_done);
  StepResult result;
  result.step = m.steps_done;
  Status status;
  try {
    status = m.run_step();
    if (status.is_ok()) status = m.reduce_and_update(&result);
  } catch (const std::exception& e) {
    status = internal_error(first_line(e.what()));
  }
  if (!status.is_ok()) {
    m.failed = status.with_context(context);
    return m.failed;
  }
  ++m.steps_done;
  return result;
}

namespace {

std::string layer_file(const std::string& dir, int layer) {
  return (std::filesystem::path(dir) / ("layer-" + std::to_string(layer) + ".bin")).string();
}

std::string manifest_file(const std::string& dir) {
  return (std::filesystem::path(dir) / "manifest.json").string();
}

}  // namespace

Status RankExecutor::save_checkpoint(const std::string& dir) {
  try {
    return save_checkpoint_unchecked(dir);
  } catch (const std::exception& e) {
    return internal_error("saving checkpoint " + dir + ": " + first_line(e.what()));
  }
}

Status RankExecutor::load_checkpoint(const std::string& dir) {
  try {
    return load_checkpoint_unchecked(dir);
  } catch (const std::exception& e) {
    return internal_error("loading checkpoint " + dir + ": " + first_line(e.what()));
  }
}

Status RankExecutor::save_checkpoint_unchecked(const std::string& dir) {
  Impl& m = *impl_;
  if (!m.failed.is_ok()) return m.failed;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return io_error(dir + ": cannot create the checkpoint directory: " + error.message());
  if (m.place.replica == 0) {
    std::map<int, TensorFile> files;
    for (const auto& [name, p] : m.parameters_by_name) {
      if (p.layer < 0 || !m.on_this_rank(m.stage_of_layer[p.layer])) continue;  // a tied copy
      TensorFile& file = files[p.layer];
      file.step = m.steps_done;
      file.tensors.push_back({name, p.tensor});
      if (auto state = m.optimizer->state(p.tensor)) {
        file.tensors.push_back({name + ".exp_avg", state->exp_avg});
        file.tensors.push_back({name + ".exp_avg_sq", state->exp_avg_sq});
        file.tensors.push_back({name + ".step", at::full({1}, state->step, at::kLong)});
      }
    }
    for (const auto& [layer, file] : files) {
      MOTLEY_RETURN_IF_ERROR(write_tensor_file(layer_file(dir, layer), file));
    }
  }
  MOTLEY_RETURN_IF_ERROR(m.transport.barrier().with_context("saving checkpoint " + dir));
  if (m.rank == 0) {
    const SpecRef ref = model_ref(m.model);
    Json manifest = {{"format", kCheckpointFormat},
                     {"step", m.steps_done},
                     {"model", {{"name", ref.name}, {"hash", ref.hash}}},
                     {"layers", m.model.layers.size()}};
    MOTLEY_RETURN_IF_ERROR(write_file_atomically(manifest_file(dir), manifest.dump(2) + "\n"));
  }
  return m.transport.barrier().with_context("saving checkpoint " + dir);
}

Status RankExecutor::load_checkpoint_unchecked(const std::string& dir) {
  Impl& m = *impl_;
  const std::string manifest_path = manifest_file(dir);
  MOTLEY_ASSIGN_OR_RETURN(Json manifest, read_json_file(manifest_path));
  JsonField root(manifest, manifest_path);
  MOTLEY_ASSIGN_OR_RETURN(std::string format, root.get_string("format"));
  if (format != kCheckpointFormat) {
    return root.child_error("format", std::string("expected \"") + kCheckpointFormat + "\"");
  }
  MOTLEY_ASSIGN_OR_RETURN(int64_t step, root.get_nonnegative_int("step"));
  MOTLEY_ASSIGN_OR_RETURN(JsonField model_field, root.get("model"));
  MOTLEY_ASSIGN_OR_RETURN(std::string hash, model_field.get_string("hash"));
  const SpecRef ref = model_ref(m.model);
  if (hash != ref.hash) {
    return model_field.child_error("hash", "the checkpoint is of another model than '" + ref.name +
                                               "' (hash " + ref.hash + ")");
  }
  std::map<int, std::map<std::string, at::Tensor>> files;
  for (const auto& [name, p] : m.parameters_by_name) {
    auto it = files.find(p.layer);
    if (it == files.end()) {
      const std::string path = layer_file(dir, p.layer);
      MOTLEY_ASSIGN_OR_RETURN(TensorFile file, read_tensor_file(path));
      if (file.step != step) {
        return invalid_argument(path + ": holds step " + std::to_string(file.step) +
                                " but the manifest says step " + std::to_string(step) +
                                " (an interrupted save?)");
      }
      std::map<std::string, at::Tensor> by_name;
      for (NamedTensor& t : file.tensors) by_name[t.name] = t.tensor;
      it = files.emplace(p.layer, std::move(by_name)).first;
    }
    const std::string path = layer_file(dir, p.layer);
    auto value = it->second.find(name);
    if (value == it->second.end() || !value->second.sizes().equals(p.tensor.sizes())) {
      return invalid_argument(path + ": no parameter '" + name + "' of the model's shape");
    }
    {
      at::NoGradGuard no_grad;
      p.tensor.copy_(value->second);
    }
    auto avg = it->second.find(name + ".exp_avg");
    auto avg_sq = it->second.find(name + ".exp_avg_sq");
    auto count = it->second.find(name + ".step");
    if (avg != it->second.end() && avg_sq != it->second.end() && count != it->second.end()) {
      m.optimizer->set_state(p.tensor, internal::AdamWStep::State{count->second.item<int64_t>(),
                                                                  avg->second, avg_sq->second});
    }
  }
  m.steps_done = step;
  return Status::ok();
}

std::vector<NamedTensor> RankExecutor::parameters() const { return impl_->store.parameters(); }

int64_t RankExecutor::steps_done() const { return impl_->steps_done; }

}  // namespace motley
