// The action interpreter. docs/executor.md explains the rules it follows (receives posted at the
// start of a step, sends never waited on before the end of it, each receive waited on right
// before the action that consumes it) and why they cannot deadlock on a validated plan.
#include "motley/exec/executor.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
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
  // One parameter's gradient sum. A plain shard (or an unsplit parameter) whose holders all
  // split it alike sums its local gradient with the same-index ranks of the other holders;
  // anything else (rows shared within a group, replicas with different tensor-parallel degrees)
  // sums full-size contributions over every holding rank and keeps its rows.
  struct Reduction {
    at::Tensor param;
    TensorSlice slice;
    bool full_size = false;
    int layer = 0;  // the layer it belongs to (the embedding's, for a tied matrix)
  };
  // The unit of an overlapped gradient sum (PyTorch DDP's bucket): one rank set's parameters of
  // one layer, and the loss as a bucket of its own. A bucket is posted (asynchronously) as soon
  // as its gradients are final on this rank — during the backward that finishes them, from the
  // parameters' gradient-accumulation hooks — but only after the set's earlier buckets in one
  // order every member shares (the loss first, then decreasing layer), so the members of a set
  // post its sums in the same order. All buckets are waited on after the rank's last action.
  struct Bucket {
    std::vector<int> ranks;
    std::vector<Reduction> reductions;
    bool loss = false;
    int final_op = -1;     // index into `ops` of the action after which it is final
    int final_params = 0;  // its parameters whose last accumulation happens in that action
    int pending = 0;       // of those, the ones not accumulated yet this step
    bool posted = false;
    std::vector<at::Tensor> tensors;  // what travels: gradients or full-size contributions
    at::Tensor loss_value;
    std::unique_ptr<TransportRequest> request;
    std::chrono::steady_clock::time_point posted_at;
  };
  // Gradient sums: per set of ranks, that set's parameters (name order), summed in Buckets.
  // Blocking collectives over these sets after the step (ZeRO-1) go in increasing set order on
  // every rank, so overlapping sets cannot deadlock.
  std::map<std::vector<int>, std::vector<Reduction>> reduce_sets;
  // ZeRO-1 (Plan::zero1): the optimizer state of a set of replicas' identical parameters is
  // split among them by whole tensors, as PyTorch's ZeroRedundancyOptimizer splits it (largest
  // first, each to the member holding the fewest elements so far). Each member steps the tensors
  // it owns; the new values then reach the others through a sum in which only the owner
  // contributes.
  struct ZeroSet {
    std::vector<int> ranks;
    std::vector<at::Tensor> params;  // the set's parameters, name order
    std::vector<bool> owned;         // by this rank
  };
  std::vector<ZeroSet> zero_sets;                   // in the order of their rank sets
  std::set<const at::TensorImpl*> owned_elsewhere;  // ZeRO-1 parameters another member steps
  std::vector<Bucket> buckets;
  std::map<std::vector<int>, std::vector<size_t>> set_buckets;  // each set's, in posting order
  std::map<std::vector<int>, size_t> next_bucket;               // per set: next to post
  std::map<const at::TensorImpl*, size_t> bucket_of;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // keep the hooks alive
  int running_op = -1;    // the op being run (gradient hooks fire inside it)
  int completed_op = -1;  // every op up to this one has finished
  Status post_failure;    // a failed post, reported at the end of the step
  std::vector<at::Tensor> all_params;
  std::unique_ptr<internal::AdamWStep> optimizer;  // over the parameters this rank steps
  // Every parameter of this rank with the layer it belongs to (its checkpoint file) and the
  // part of the model's tensor it holds.
  struct OwnedParameter {
    at::Tensor tensor;
    int layer = 0;
    TensorSlice slice;
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
  // The sum over this rank's tensor-parallel group, for the stages' split layers.
  void tensor_parallel_sum(at::Tensor& t) {
    Status status = transport.all_reduce_sum({t}, group_ranks);
    if (!status.is_ok())
      throw std::runtime_error("tensor-parallel all-reduce: " + status.message());
  }
  std::vector<int> group_ranks;  // this rank's tensor-parallel group

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
  // The full value of a split tensor of this rank's group (`local` has `slice`'s rows): a sum
  // over the group in which each row comes from one rank. A collective of the group.
  Result<at::Tensor> gather_full(const at::Tensor& local, const TensorSlice& slice);
  // After the optimizer step: every ZeRO-1 set's owners send their new values to the others.
  Status share_zero_updates();
  // Overlapped gradient sums (Bucket).
  void build_buckets();
  void install_gradient_hooks();
  void on_gradient_final(const at::TensorImpl* param);
  void post_ready_buckets(const std::vector<int>& ranks);
  Status post_bucket(Bucket& b);
  void reset_buckets() {
    for (auto& [ranks, next] : next_bucket) next = 0;
    for (Bucket& b : buckets) {
      b.posted = false;
      b.pending = b.final_params;
    }
    post_failure = Status::ok();
    running_op = -1;
    completed_op = -1;
  }
  // The AdamW moments of every ZeRO-1 set's parameters, from their owners (for checkpoints):
  // by parameter TensorImpl. A collective of each set.
  Result<std::map<const at::TensorImpl*, internal::AdamWStep::State>> gather_zero_state();
  int64_t optimizer_state_bytes() const;
  // Whether this rank's optimizer steps `param` (not so for a ZeRO-1 parameter another member
  // of its set owns).
  bool steps_this_rank(const at::Tensor& param) const {
    return owned_elsewhere.count(param.unsafeGetTensorImpl()) == 0;
  }
  void zero_gradients() {
    for (at::Tensor& p : all_params) {
      if (p.grad().defined()) {
        p.mutable_grad().detach_();
        p.mutable_grad().zero_();
      }
    }
  }
  void materialize_gradients() {
    for (at::Tensor& p : all_params) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    }
  }
};

Status RankExecutor::Impl::build() {
  rank = transport.rank();
  if (transport.world_size() != layout.world_size()) {
    return invalid_argument("the plan has " + std::to_string(layout.world_size()) +
                            " devices (one rank each) but the transport's world has " +
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
  group_ranks = layout.group_ranks(place.replica, place.group);
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
      StageModuleOptions stage_options{options.seed, plan.seq_len, {}};
      stage_options.tensor_parallel.rank = place.tp_rank;
      stage_options.tensor_parallel.size = place.tp_size;
      stage_options.tensor_parallel.all_reduce = [this](at::Tensor& t) { tensor_parallel_sum(t); };
      return make_transformer_stage(model, plan.stages[s].layer_begin, plan.stages[s].layer_end,
                                    stage_options, st);
    };
  }
  // Which stage holds each layer, to find every rank that holds a parameter.
  stage_of_layer.assign(model.layers.size(), -1);
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    for (int l = plan.stages[s].layer_begin; l < plan.stages[s].layer_end; ++l) {
      stage_of_layer[l] = static_cast<int>(s);
    }
  }
  std::map<std::string, std::pair<Reduction, std::vector<int>>> by_name;  // -> (sum, ranks)
  for (int s : layout.stages_of(rank)) {
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<StageModule> module, factory(s, store));
    for (const StageParameter& p : module->parameters()) {
      stage_params[s].push_back(p.tensor);
      // The device groups (replica, group) that hold a layer reading the parameter.
      std::set<std::pair<int, int>> holders;
      for (int l : p.layers) {
        const int holder_stage =
            l >= 0 && l < static_cast<int>(stage_of_layer.size()) ? stage_of_layer[l] : s;
        for (int r : layout.stage_ranks(holder_stage)) {
          const RankPlace h = layout.place_of(r);
          holders.insert({h.replica, h.group});
        }
      }
      bool alike = p.slice.exclusive;
      for (const auto& [replica, group] : holders) {
        alike = alike && layout.place_of(layout.rank_of(replica, group)).tp_size == place.tp_size;
      }
      std::set<int> ranks;
      for (const auto& [replica, group] : holders) {
        if (alike) {
          ranks.insert(layout.rank_of(replica, group, place.tp_rank));
        } else {
          for (int r : layout.group_ranks(replica, group)) ranks.insert(r);
        }
      }
      by_name[p.name] = {Reduction{p.tensor, p.slice, !alike, p.layers.empty() ? 0 : p.layers[0]},
                         std::vector<int>(ranks.begin(), ranks.end())};
      parameters_by_name[p.name] =
          OwnedParameter{p.tensor, p.layers.empty() ? -1 : p.layers[0], p.slice};
    }
    stages[s] = std::move(module);
  }
  for (auto& [name, entry] : by_name) {
    reduce_sets[entry.second].push_back(entry.first);
    all_params.push_back(entry.first.param);
  }
  if (plan.zero1) {
    for (const auto& [ranks, reductions] : reduce_sets) {
      const bool shardable =
          ranks.size() > 1 && std::none_of(reductions.begin(), reductions.end(),
                                           [](const Reduction& r) { return r.full_size; });
      if (!shardable) continue;
      ZeroSet z;
      z.ranks = ranks;
      const size_t me =
          static_cast<size_t>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
      for (const Reduction& r : reductions) z.params.push_back(r.param);
      std::vector<size_t> order(z.params.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&z](size_t a, size_t b) {
        return z.params[a].numel() > z.params[b].numel();
      });
      std::vector<int64_t> load(ranks.size(), 0);
      z.owned.assign(z.params.size(), false);
      for (size_t i : order) {
        const size_t owner =
            static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        load[owner] += z.params[i].numel();
        z.owned[i] = owner == me;
        if (owner != me) owned_elsewhere.insert(z.params[i].unsafeGetTensorImpl());
      }
      zero_sets.push_back(std::move(z));
    }
  }
  std::vector<at::Tensor> stepped;
  for (const at::Tensor& p : all_params) {
    if (steps_this_rank(p)) stepped.push_back(p);
  }
  optimizer = std::make_unique<internal::AdamWStep>(stepped, options.optimizer);
  build_buckets();
  install_gradient_hooks();
  // Set up every rank set this rank sums over, in increasing order on every rank (Gloo creates
  // a process group per set, a rendezvous of its members), so that posting sums in the order
  // gradients become final cannot leave two ranks waiting for each other's set-up.
  std::set<std::vector<int>> sets = {group_ranks};
  for (const auto& [ranks, reductions] : reduce_sets) sets.insert(ranks);
  return transport.prepare_collectives(std::vector<std::vector<int>>(sets.begin(), sets.end()));
}

Result<std::map<const at::TensorImpl*, internal::AdamWStep::State>>
RankExecutor::Impl::gather_zero_state() {
  std::map<const at::TensorImpl*, internal::AdamWStep::State> out;
  if (steps_done == 0) return out;  // no moments before the first step
  for (const ZeroSet& z : zero_sets) {
    std::vector<at::Tensor> moments;  // exp_avg, exp_avg_sq per parameter
    for (size_t i = 0; i < z.params.size(); ++i) {
      const auto state = z.owned[i] ? optimizer->state(z.params[i]) : std::nullopt;
      moments.push_back(state ? state->exp_avg.clone() : at::zeros_like(z.params[i]));
      moments.push_back(state ? state->exp_avg_sq.clone() : at::zeros_like(z.params[i]));
    }
    MOTLEY_RETURN_IF_ERROR(transport.all_reduce_sum(moments, z.ranks)
                               .with_context("gathering ZeRO-1 optimizer state"));
    for (size_t i = 0; i < z.params.size(); ++i) {
      out[z.params[i].unsafeGetTensorImpl()] =
          internal::AdamWStep::State{steps_done, moments[2 * i], moments[2 * i + 1]};
    }
  }
  return out;
}

int64_t RankExecutor::Impl::optimizer_state_bytes() const {
  int64_t n = 0;
  for (const at::Tensor& p : all_params) {
    if (optimizer->state(p)) n += 2 * p.numel();  // exp_avg and exp_avg_sq
  }
  return n * static_cast<int64_t>(sizeof(float));
}

Status RankExecutor::Impl::share_zero_updates() {
  for (const ZeroSet& z : zero_sets) {
    std::vector<at::Tensor> values;
    for (size_t i = 0; i < z.params.size(); ++i) {
      values.push_back(z.owned[i] ? z.params[i].detach().clone() : at::zeros_like(z.params[i]));
    }
    MOTLEY_RETURN_IF_ERROR(
        transport.all_reduce_sum(values, z.ranks).with_context("sharing ZeRO-1 updates"));
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < z.params.size(); ++i) {
      if (!z.owned[i]) z.params[i].copy_(values[i]);
    }
  }
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
    MOTLEY_ASSIGN_OR_RETURN(
        posted.request, transport.recv(posted.buffer, layout.pipeline_source(rank, op.peer_group),
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
  // Every rank of the receiving group whose copy comes from this rank (rank_layout.h).
  for (int peer : layout.pipeline_destinations(rank, op.peer_group)) {
    MOTLEY_ASSIGN_OR_RETURN(
        auto request, transport.send(payload, peer, message_tag(steps_done, op.kind, op.sequence),
                                     message_name(op.kind, op.stage, op.micro_batch)));
    sends.push_back(std::move(request));
  }
  return Status::ok();
}

void RankExecutor::Impl::build_buckets() {
  // The last action of this rank's list that accumulates into each stage's weights.
  std::map<int, int> last_weight_op;  // stage -> op index
  int last_loss_op = -1;
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto* a = std::get_if<Action>(&ops[i]);
    if (a == nullptr) continue;
    if (a->kind == ActionKind::kBackwardWeight || a->kind == ActionKind::kBackward) {
      last_weight_op[a->stage] = static_cast<int>(i);
    }
    if (a->kind == ActionKind::kForward && a->stage == last_stage) {
      last_loss_op = static_cast<int>(i);
    }
  }
  std::map<const at::TensorImpl*, int> final_of;  // parameter -> op of its last accumulation
  for (const auto& [stage, params] : stage_params) {
    for (const at::Tensor& p : params) {
      int& f = final_of.emplace(p.unsafeGetTensorImpl(), -1).first->second;
      f = std::max(f, last_weight_op.count(stage) ? last_weight_op.at(stage) : -1);
    }
  }
  const std::vector<int>& loss_ranks = layout.stage_ranks(last_stage);
  const bool holds_loss = on_this_rank(last_stage);
  if (holds_loss && !reduce_sets.count(loss_ranks)) reduce_sets[loss_ranks] = {};
  for (const auto& [ranks, reductions] : reduce_sets) {
    std::vector<size_t>& order = set_buckets[ranks];
    auto add_bucket = [&]() -> Bucket& {
      order.push_back(buckets.size());
      buckets.emplace_back();
      buckets.back().ranks = set_buckets.find(ranks)->first;
      return buckets.back();
    };
    if (holds_loss && ranks == loss_ranks) {
      Bucket& b = add_bucket();
      b.loss = true;
      b.final_op = last_loss_op;
    }
    std::map<int, std::vector<Reduction>, std::greater<int>> by_layer;
    for (const Reduction& r : reductions) by_layer[r.layer].push_back(r);
    for (auto& [layer, members] : by_layer) {
      Bucket& b = add_bucket();
      for (const Reduction& r : members) {
        b.final_op = std::max(b.final_op, final_of.at(r.param.unsafeGetTensorImpl()));
      }
      for (const Reduction& r : members) {
        if (final_of.at(r.param.unsafeGetTensorImpl()) == b.final_op) ++b.final_params;
      }
      b.reductions = std::move(members);
    }
  }
  for (size_t k = 0; k < buckets.size(); ++k) {
    for (const Reduction& r : buckets[k].reductions) bucket_of[r.param.unsafeGetTensorImpl()] = k;
  }
}

void RankExecutor::Impl::install_gradient_hooks() {
  // Runs after autograd accumulated into the parameter's .grad (a post hook of its
  // AccumulateGrad node), for every backward that reaches it.
  struct Accumulated final : torch::autograd::FunctionPostHook {
    std::function<void()> done;
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list&) override {
      done();
      return outputs;
    }
  };
  for (const at::Tensor& p : all_params) {
    std::shared_ptr<torch::autograd::Node> node = torch::autograd::impl::grad_accumulator(p);
    auto hook = std::make_unique<Accumulated>();
    const at::TensorImpl* key = p.unsafeGetTensorImpl();
    hook->done = [this, key] { on_gradient_final(key); };
    node->add_post_hook(std::move(hook));
    accumulators.push_back(std::move(node));
  }
}

void RankExecutor::Impl::on_gradient_final(const at::TensorImpl* param) {
  // Under an after_action hook (emulation slows an action down after it ran) a bucket waits for
  // the end of the action, so that nothing leaves before the emulated device would be done.
  if (options.after_action) return;
  auto it = bucket_of.find(param);
  if (it == bucket_of.end()) return;
  Bucket& b = buckets[it->second];
  if (b.posted || b.final_op != running_op) return;  // not its last accumulation this step
  if (--b.pending == 0) post_ready_buckets(b.ranks);
}

void RankExecutor::Impl::post_ready_buckets(const std::vector<int>& ranks) {
  const std::vector<size_t>& order = set_buckets.at(ranks);
  size_t& next = next_bucket[ranks];
  while (next < order.size()) {
    Bucket& b = buckets[order[next]];
    const bool ready = b.final_op <= completed_op || (b.final_op == running_op && b.pending <= 0);
    if (!ready) return;
    if (!post_failure.is_ok()) return;
    post_failure = post_bucket(b);
    ++next;
  }
}

Status RankExecutor::Impl::post_bucket(Bucket& b) {
  b.tensors.clear();
  for (const Reduction& r : b.reductions) {
    at::Tensor& grad = r.param.mutable_grad();
    if (!grad.defined()) grad = at::zeros_like(r.param);  // not reached this step
    if (!r.full_size) {
      b.tensors.push_back(grad);
      continue;
    }
    const TensorSlice& s = r.slice;
    b.tensors.push_back(at::zeros(s.full_shape, grad.options())
                            .index_add_(s.dim, s.rows.index_select(0, s.grad_rows),
                                        grad.index_select(s.dim, s.grad_rows)));
  }
  if (b.loss) {
    // Every rank of a tensor-parallel group computes the same loss; one of them counts it.
    b.loss_value = at::full({1}, place.tp_rank == 0 ? loss_sum : 0.0, at::kFloat);
    b.tensors.push_back(b.loss_value);
  }
  b.posted = true;
  b.posted_at = std::chrono::steady_clock::now();
  MOTLEY_ASSIGN_OR_RETURN(b.request, transport.all_reduce_sum_async(b.tensors, b.ranks));
  return Status::ok();
}

Status RankExecutor::Impl::reduce_and_update(StepResult* result) {
  auto start = std::chrono::steady_clock::now();
  running_op = -1;
  completed_op = static_cast<int>(ops.size());  // everything is final now
  for (const auto& [ranks, order] : set_buckets) post_ready_buckets(ranks);
  MOTLEY_RETURN_IF_ERROR(post_failure.with_context("gradient all-reduce"));
  for (Bucket& b : buckets) {
    MOTLEY_RETURN_IF_ERROR(b.request->wait().with_context("gradient all-reduce"));
    if (options.record_trace) {
      TraceEvent e;
      e.kind = TraceEvent::Kind::kGradientSum;
      e.name = b.loss ? "sum loss"
                      : "sum layer " + std::to_string(b.reductions.front().layer) + " gradients";
      e.start = since_start(b.posted_at);
      e.ready = e.start;
      e.end = since_start(std::chrono::steady_clock::now());
      events.push_back(std::move(e));
    }
    for (size_t i = 0; i < b.reductions.size(); ++i) {
      const Reduction& r = b.reductions[i];
      if (r.full_size) {
        r.param.mutable_grad().copy_(b.tensors[i].index_select(r.slice.dim, r.slice.rows));
      }
    }
    if (b.loss) result->loss = b.loss_value.item<double>();
    // Holding no gradient between steps lets autograd accumulate into .grad in place.
    b.tensors.clear();
    b.request.reset();
  }
  materialize_gradients();  // parameters no bucket holds (a set of this rank alone)
  record(TraceEvent::Kind::kAllReduce, std::nullopt, "all_reduce", start);
  start = std::chrono::steady_clock::now();
  optimizer->step();
  MOTLEY_RETURN_IF_ERROR(share_zero_updates());
  record(TraceEvent::Kind::kOptimizer, std::nullopt, "optimizer", start);
  result->optimizer_state_bytes = optimizer_state_bytes();
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
  zero_gradients();
  reset_buckets();
  MOTLEY_RETURN_IF_ERROR(post_receives());
  for (size_t op_index = 0; op_index < ops.size(); ++op_index) {
    const LoweredOp& op = ops[op_index];
    const auto start = std::chrono::steady_clock::now();
    ready = start;
    running_op = static_cast<int>(op_index);
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
    completed_op = static_cast<int>(op_index);
    for (const auto& [ranks, order] : set_buckets) post_ready_buckets(ranks);
  }
  const auto start = std::chrono::steady_clock::now();
  running_op = -1;
  for (auto& send : sends) MOTLEY_RETURN_IF_ERROR(send->wait().with_context("finishing sends"));
  record(TraceEvent::Kind::kFinishSends, std::nullopt, "finish_sends", start);
  MOTLEY_CHECK(live.empty() && receives.empty() && input_gradient.empty(),
               "a validated plan's step left work behind");
  return Status::ok();
}

Result<at::Tensor> RankExecutor::Impl::gather_full(const at::Tensor& local,
                                                   const TensorSlice& slice) {
  if (place.tp_size == 1) return local;
  at::Tensor full = at::zeros(slice.full_shape, local.options());
  full.index_copy_(slice.dim, slice.rows.index_select(0, slice.value_rows),
                   local.index_select(slice.dim, slice.value_rows));
  MOTLEY_RETURN_IF_ERROR(transport.all_reduce_sum({full}, group_ranks)
                             .with_context("assembling tensor-parallel parameters"));
  return full;
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
  // ZeRO-1 moments come from their owners, whatever replica they are in.
  MOTLEY_ASSIGN_OR_RETURN(auto zero_state, m.gather_zero_state());
  if (m.place.replica == 0) {
    // A tensor-parallel group assembles its full tensors (a collective of the group, in name
    // order on every member); its first rank writes them.
    std::map<int, TensorFile> files;
    for (const auto& [name, p] : m.parameters_by_name) {
      if (p.layer < 0 || !m.on_this_rank(m.stage_of_layer[p.layer])) continue;  // a tied copy
      TensorFile& file = files[p.layer];
      file.step = m.steps_done;
      MOTLEY_ASSIGN_OR_RETURN(at::Tensor value, m.gather_full(p.tensor.detach(), p.slice));
      file.tensors.push_back({name, value});
      std::optional<internal::AdamWStep::State> state = m.optimizer->state(p.tensor);
      if (auto it = zero_state.find(p.tensor.unsafeGetTensorImpl()); it != zero_state.end()) {
        state = it->second;
      }
      if (state) {
        MOTLEY_ASSIGN_OR_RETURN(at::Tensor avg, m.gather_full(state->exp_avg, p.slice));
        MOTLEY_ASSIGN_OR_RETURN(at::Tensor avg_sq, m.gather_full(state->exp_avg_sq, p.slice));
        file.tensors.push_back({name + ".exp_avg", avg});
        file.tensors.push_back({name + ".exp_avg_sq", avg_sq});
        file.tensors.push_back({name + ".step", at::full({1}, state->step, at::kLong)});
      }
    }
    if (m.place.tp_rank == 0) {
      for (const auto& [layer, file] : files) {
        MOTLEY_RETURN_IF_ERROR(write_tensor_file(layer_file(dir, layer), file));
      }
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
    if (value == it->second.end() || !value->second.sizes().equals(p.slice.full_shape)) {
      return invalid_argument(path + ": no parameter '" + name + "' of the model's shape");
    }
    // The checkpoint holds whole tensors; a tensor-parallel rank keeps its rows.
    const TensorSlice& slice = p.slice;
    auto mine = [&slice](const at::Tensor& full) {
      return slice.rows.numel() == full.size(slice.dim) ? full
                                                        : full.index_select(slice.dim, slice.rows);
    };
    {
      at::NoGradGuard no_grad;
      p.tensor.copy_(mine(value->second));
    }
    auto avg = it->second.find(name + ".exp_avg");
    auto avg_sq = it->second.find(name + ".exp_avg_sq");
    auto count = it->second.find(name + ".step");
    if (avg != it->second.end() && avg_sq != it->second.end() && count != it->second.end() &&
        m.steps_this_rank(p.tensor)) {
      m.optimizer->set_state(
          p.tensor, internal::AdamWStep::State{count->second.item<int64_t>(), mine(avg->second),
                                               mine(avg_sq->second)});
    }
  }
  m.steps_done = step;
  return Status::ok();
}

std::vector<NamedTensor> RankExecutor::parameters() const { return impl_->store.parameters(); }

int64_t RankExecutor::optimizer_state_bytes() const { return impl_->optimizer_state_bytes(); }

std::map<std::string, TensorSlice> RankExecutor::slices() const {
  std::map<std::string, TensorSlice> out;
  for (const auto& [name, p] : impl_->parameters_by_name) out[name] = p.slice;
  return out;
}

int64_t RankExecutor::steps_done() const { return impl_->steps_done; }

}  // namespace motley
