// RankExecutor composes the pieces of one rank: the action interpreter (action_interpreter.h),
// the overlapped gradient sums (gradient_buckets.h), ZeRO-1 sharding (zero1.h), AdamW
// (optimizer.h) and checkpoints (rank_checkpoint.h). It builds them from the plan and the
// rank's stages and sequences one step: the list, then the sums, then the update.
#include "motley/exec/executor.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "action_interpreter.h"
#include "error_text.h"
#include "gradient_buckets.h"
#include "motley/exec/rank_layout.h"
#include "motley/plan/lower.h"
#include "motley/plan/structure.h"
#include "motley/plan/task_graph.h"
#include "optimizer.h"
#include "rank_checkpoint.h"
#include "step_trace.h"
#include "zero1.h"

namespace motley {
namespace {

// Whether stage `stage`'s layers include a mixture of experts.
bool model_has_moe(const ModelSpec& model, const Stage& stage) {
  for (int l = stage.layer_begin; l < stage.layer_end; ++l) {
    if (model.layers[l].moe) return true;
  }
  return false;
}

// What the plan's indices are checked against: the model's layers, and the devices its groups
// name (the executor has no cluster, only one rank per device listed).
PlanBounds bounds_of(const Plan& plan, const ModelSpec& model) {
  PlanBounds bounds;
  bounds.num_layers = static_cast<int>(model.layers.size());
  for (const Replica& replica : plan.replicas) {
    for (const DeviceGroupSchedule& group : replica.groups) {
      for (int device : group.devices) {
        bounds.num_devices = std::max(bounds.num_devices, device + 1);
      }
    }
  }
  bounds.model = fmt::format("model '{}'", model.name);
  bounds.cluster = "the plan";
  return bounds;
}

}  // namespace

struct RankExecutor::Impl {
  Impl(const ExecOptions& o, const Plan& p, const ModelSpec& m, const TokenStream& t, Transport& tr)
      : options(o),
        plan(p),
        model(m),
        tokens(t),
        transport(tr),
        layout(p),
        store(o.device),
        trace(o.record_trace) {}

  ExecOptions options;
  Plan plan;
  ModelSpec model;
  const TokenStream& tokens;
  Transport& transport;
  RankLayout layout;
  TaskGraph graph;  // the plan's; the interpreter reads this rank's group of it
  int rank = 0;
  RankPlace place;
  std::vector<int> group_ranks;  // this rank's tensor-parallel group
  // This rank's expert-parallel (exchanges_experts) or context-parallel (splits_sequences)
  // group: the ranks of its group and index in the replicas forming the group.
  std::vector<int> replica_group_ranks;
  ParameterStore store;
  std::map<int, std::unique_ptr<StageModule>> stages;
  std::vector<at::Tensor> all_params;  // name order
  std::unique_ptr<internal::ActionInterpreter> interpreter;
  std::unique_ptr<internal::GradientBuckets> buckets;
  internal::Zero1Shards zero1;
  std::unique_ptr<internal::AdamWStep> optimizer;  // over the parameters this rank steps
  std::unique_ptr<internal::RankCheckpoint> checkpoint;
  internal::StepTrace trace;
  int64_t steps_done = 0;
  Status failed;

  Status check_inputs() const;
  Status build();
  Status run_step(StepResult* result);
  // The sum over this rank's tensor-parallel group, for the stages' split layers.
  void tensor_parallel_sum(at::Tensor& t) {
    Status status = transport.all_reduce_sum({t}, group_ranks);
    if (!status.is_ok())
      throw std::runtime_error(fmt::format("tensor-parallel all-reduce: {}", status.message()));
  }
  // The sum and the all-to-all over this rank's expert- or context-parallel group, which carry
  // the MoE layers' token exchanges or attention's gathering of keys and values; a transport
  // failure is thrown as the action's error.
  void replica_group_sum(at::Tensor& t) {
    throw_if_failed(transport.all_reduce_sum({t}, replica_group_ranks));
  }
  void replica_group_exchange(const std::vector<at::Tensor>& send,
                              const std::vector<at::Tensor>& recv) {
    throw_if_failed(transport.all_to_all(send, recv, replica_group_ranks));
  }
  void throw_if_failed(const Status& status) const {
    if (status.is_ok()) return;
    throw std::runtime_error(fmt::format(
        "{} exchange: {}", plan.expert_parallel > 1 ? "expert-parallel" : "context-parallel",
        status.message()));
  }
  Status save_checkpoint(const std::string& dir, int keep);  // may throw c10::Error
  Status load_checkpoint(const std::string& dir);
  int64_t optimizer_state_bytes() const;
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

// The executor's own limits; the plan's structure was checked before the layout was made.
Status RankExecutor::Impl::check_inputs() const {
  if (transport.world_size() != layout.world_size()) {
    return invalid_argument(fmt::format(
        "the plan has {} devices (one rank each) but the transport's world has {} ranks",
        layout.world_size(), transport.world_size()));
  }
  for (const Layer& layer : model.layers) {
    const int64_t vocab = layer.embedding ? layer.embedding->vocab
                          : layer.head    ? layer.head->vocab
                                          : kByteVocab;
    if (vocab < kByteVocab) {
      return invalid_argument(fmt::format(
          "model '{}': layer '{}' has a vocabulary of {}; the executor trains on byte tokens and "
          "needs at least 256",
          model.name, layer.name, vocab));
    }
  }
  return Status::ok();
}

Status RankExecutor::Impl::build() {
  rank = transport.rank();
  MOTLEY_RETURN_IF_ERROR(check_inputs());
  place = layout.place_of(rank);
  group_ranks = layout.group_ranks(place.replica, place.group);
  const int experts_split = exchanges_experts(plan) ? plan.expert_parallel : 1;
  const int sequence_split = splits_sequences(plan) ? plan.context_parallel : 1;
  const int members = std::max(experts_split, sequence_split);  // validation allows one of them
  for (int m = 0; m < members; ++m) {
    replica_group_ranks.push_back(
        layout.rank_of(place.replica - place.replica % members + m, place.group, place.tp_rank));
  }
  const int last_stage = static_cast<int>(plan.stages.size()) - 1;
  build_task_graph(plan, lower_plan(plan), graph);
  if (channel_length(graph) > kMaxChannelSequence) {
    return invalid_argument(fmt::format(
        "the plan sends more than {} messages on one channel per step", kMaxChannelSequence));
  }

  StageFactory factory = options.stage_factory;
  if (!factory) {
    factory = [this, experts_split, sequence_split, members](int s, ParameterStore& st) {
      StageModuleOptions stage_options{options.seed, plan.seq_len, {}};
      stage_options.tensor_parallel.rank = place.tp_rank;
      stage_options.tensor_parallel.size = place.tp_size;
      stage_options.tensor_parallel.all_reduce = [this](at::Tensor& t) { tensor_parallel_sum(t); };
      const TensorParallelGroup replica_group{
          place.replica % members, members, [this](at::Tensor& t) { replica_group_sum(t); },
          [this](const std::vector<at::Tensor>& send, const std::vector<at::Tensor>& recv) {
            replica_group_exchange(send, recv);
          }};
      if (experts_split > 1 && model_has_moe(model, plan.stages[s])) {
        stage_options.expert_parallel = replica_group;
      }
      if (sequence_split > 1) stage_options.context_parallel = replica_group;
      stage_options.vocab_begin = plan.stages[s].vocab_begin;
      stage_options.vocab_end = plan.stages[s].vocab_end;
      return make_transformer_stage(model, plan.stages[s].layer_begin, plan.stages[s].layer_end,
                                    stage_options, st);
    };
  }
  // The ranks running stage `s` in the first expert-parallel group's replicas, increasing: the
  // assemblers of its routed experts in a checkpoint.
  auto first_expert_group_ranks = [this, experts_split](int s) {
    std::vector<int> ranks;
    for (int r = 0; r < experts_split; ++r) {
      for (int k : layout.group_ranks(r, plan.replicas[r].stage_group[s])) ranks.push_back(k);
    }
    std::sort(ranks.begin(), ranks.end());
    return ranks;
  };
  static const std::vector<int> kNoStages;
  auto runs_stage = [this, last_stage](int s) {
    return s >= 0 && s <= last_stage && plan.replicas[place.replica].stage_group[s] == place.group;
  };
  std::map<int, std::vector<at::Tensor>> stage_params;  // what W and B differentiate
  std::map<std::string, std::pair<internal::GradientSum, std::vector<int>>> sums;  // -> ranks
  std::map<std::string, internal::CheckpointParameter> saved;
  for (int s : layout.stages_of(rank)) {
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<StageModule> module, factory(s, store));
    for (const StageParameter& p : module->parameters()) {
      stage_params[s].push_back(p.tensor);
      RankLayout::GradientSumRanks holders =
          layout.gradient_sum_ranks(rank, s, p.layers, p.slice.exclusive);
      if (p.expert_shard) {
        // Only the member of each expert-parallel group with this rank's index holds it.
        std::erase_if(holders.ranks, [&](int r) {
          return layout.place_of(r).replica % experts_split != place.replica % experts_split;
        });
      }
      const int layer = p.layers.empty() ? -1 : p.layers[0];
      sums[p.name] = {
          internal::GradientSum{p.tensor, p.slice, holders.full_size, std::max(layer, 0)},
          holders.ranks};
      const std::vector<int>& holding = layer >= 0 ? layout.stages_of_layer(layer) : kNoStages;
      std::set<int> assemblers;
      for (int h : holding) {
        for (int r : layout.stage_ranks(h)) {
          if (layout.place_of(r).replica == 0) assemblers.insert(r);
        }
      }
      saved[p.name] = internal::CheckpointParameter{
          p.tensor, layer, p.slice, std::any_of(holding.begin(), holding.end(), runs_stage),
          std::vector<int>(assemblers.begin(), assemblers.end())};
      if (p.expert_shard) {
        saved[p.name].assemblers = first_expert_group_ranks(s);
        saved[p.name].expert_shard = true;
      }
    }
    for (const StageParameter& p : module->held_elsewhere()) {
      saved[p.name] = internal::CheckpointParameter{at::Tensor(),
                                                    p.layers.empty() ? -1 : p.layers[0],
                                                    p.slice,
                                                    true,
                                                    first_expert_group_ranks(s),
                                                    /*held_elsewhere=*/true,
                                                    /*expert_shard=*/true};
    }
    stages[s] = std::move(module);
  }
  internal::GradientSumSets sets;
  for (auto& [name, entry] : sums) {
    sets[entry.second].push_back(entry.first);
    all_params.push_back(entry.first.param);
  }
  // ZeRO-2 and -3 plans run with ZeRO-1's exchanges: the same sums and updates, so the same
  // numbers, but whole gradients and weights on every replica (docs/executor.md, "Optimizer").
  if (plan.zero_stage >= 1) zero1 = internal::Zero1Shards(sets, rank);
  std::vector<at::Tensor> stepped;
  for (const at::Tensor& p : all_params) {
    if (zero1.steps_here(p)) stepped.push_back(p);
  }
  optimizer = std::make_unique<internal::AdamWStep>(stepped, options.optimizer);

  std::map<int, StageModule*> modules;
  for (auto& [s, module] : stages) modules[s] = module.get();
  interpreter = std::make_unique<internal::ActionInterpreter>(
      plan, model, tokens, layout, rank, graph, std::move(modules), std::move(stage_params),
      options.after_action, transport, options.device);
  const bool holds_loss = runs_stage(last_stage);
  buckets = std::make_unique<internal::GradientBuckets>(
      sets, interpreter->actions(), interpreter->stage_params(), last_stage,
      /*loss_in_backward=*/plan.stages[last_stage].is_vocab_shard(),
      holds_loss ? layout.stage_ranks(last_stage) : std::vector<int>{},
      // Every rank of a tensor-parallel group computes the same loss; one of them counts it.
      [this] { return place.tp_rank == 0 ? interpreter->loss_sum() : 0.0; },
      /*post_from_hooks=*/!options.after_action, transport, options.device,
      [this](const at::TensorImpl* p) { return interpreter->split_backward().defers(p); });
  checkpoint =
      std::make_unique<internal::RankCheckpoint>(model, rank, place, group_ranks, std::move(saved));
  // Set up every rank set this rank sums over, in increasing order on every rank (Gloo creates
  // a process group per set, a rendezvous of its members), so that posting sums in the order
  // gradients become final cannot leave two ranks waiting for each other's set-up.
  std::set<std::vector<int>> rank_sets = {group_ranks};
  if (replica_group_ranks.size() > 1) rank_sets.insert(replica_group_ranks);
  for (const std::vector<int>& ranks : buckets->rank_sets()) rank_sets.insert(ranks);
  MOTLEY_RETURN_IF_ERROR(transport.prepare_peers(interpreter->peers()));
  return transport.prepare_collectives(
      std::vector<std::vector<int>>(rank_sets.begin(), rank_sets.end()));
}

Status RankExecutor::Impl::run_step(StepResult* result) {
  trace.begin();
  zero_gradients();
  buckets->begin_step();
  const internal::ActionCallbacks callbacks{[this](int i) { buckets->begin_action(i); },
                                            [this](int i) { buckets->end_action(i); }};
  MOTLEY_RETURN_IF_ERROR(interpreter->run_step(steps_done, options.precision, callbacks, trace));
  auto start = std::chrono::steady_clock::now();
  MOTLEY_RETURN_IF_ERROR(buckets->finish(&result->loss, trace));
  materialize_gradients();  // parameters no bucket holds (a set of this rank alone)
  trace.record(TraceEvent::Kind::kAllReduce, "all_reduce", start);
  start = std::chrono::steady_clock::now();
  optimizer->step();
  MOTLEY_RETURN_IF_ERROR(zero1.share_updates(transport));
  trace.record(TraceEvent::Kind::kOptimizer, "optimizer", start);
  result->optimizer_state_bytes = optimizer_state_bytes();
  result->events = trace.take();
  return Status::ok();
}

int64_t RankExecutor::Impl::optimizer_state_bytes() const {
  int64_t n = 0;
  for (const at::Tensor& p : all_params) {
    if (optimizer->state(p)) n += 2 * p.numel();  // exp_avg and exp_avg_sq
  }
  return n * static_cast<int64_t>(sizeof(float));
}

Status RankExecutor::Impl::save_checkpoint(const std::string& dir, int keep) {
  // ZeRO-1 moments come from their owners, whatever replica they are in.
  MOTLEY_ASSIGN_OR_RETURN(auto zero_state, zero1.gather_state(transport, *optimizer, steps_done));
  auto state_of = [&](const at::Tensor& param) {
    if (auto it = zero_state.find(param.unsafeGetTensorImpl()); it != zero_state.end()) {
      return std::optional<internal::AdamWStep::State>(it->second);
    }
    return optimizer->state(param);
  };
  return checkpoint->save(dir, steps_done, keep, state_of, transport);
}

Status RankExecutor::Impl::load_checkpoint(const std::string& dir) {
  auto restore = [this](const at::Tensor& param, const internal::AdamWStep::State& state) {
    if (zero1.steps_here(param)) optimizer->set_state(param, state);
  };
  MOTLEY_ASSIGN_OR_RETURN(steps_done, checkpoint->load(dir, restore));
  return Status::ok();
}

RankExecutor::RankExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RankExecutor::~RankExecutor() = default;

Result<std::unique_ptr<RankExecutor>> RankExecutor::create(const ExecOptions& options,
                                                           const Plan& plan, const ModelSpec& model,
                                                           const TokenStream& tokens,
                                                           Transport& transport) {
  // Before the layout indexes the plan.
  MOTLEY_RETURN_IF_ERROR(check_plan_structure(plan, bounds_of(plan, model)));
  auto impl = std::make_unique<Impl>(options, plan, model, tokens, transport);
  try {
    MOTLEY_RETURN_IF_ERROR(impl->build());
  } catch (const std::exception& e) {
    return internal_error(fmt::format("rank {}: building the stages failed: {}", transport.rank(),
                                      internal::first_line(e.what())));
  }
  return std::unique_ptr<RankExecutor>(new RankExecutor(std::move(impl)));
}

Result<StepResult> RankExecutor::step() {
  Impl& m = *impl_;
  if (!m.failed.is_ok()) return m.failed;
  const std::string context = fmt::format("rank {} (replica {}, device group {}), step {}", m.rank,
                                          m.place.replica, m.place.group, m.steps_done);
  StepResult result;
  result.step = m.steps_done;
  Status status;
  try {
    status = m.run_step(&result);
  } catch (const std::exception& e) {
    status = internal_error(internal::first_line(e.what()));
  }
  if (!status.is_ok()) {
    m.failed = status.with_context(context);
    return m.failed;
  }
  ++m.steps_done;
  return result;
}

Status RankExecutor::save_checkpoint(const std::string& dir, int keep) {
  if (!impl_->failed.is_ok()) return impl_->failed;
  try {
    return impl_->save_checkpoint(dir, keep);
  } catch (const std::exception& e) {
    return internal_error(
        fmt::format("saving checkpoint {}: {}", dir, internal::first_line(e.what())));
  }
}

Status RankExecutor::load_checkpoint(const std::string& dir) {
  try {
    return impl_->load_checkpoint(dir);
  } catch (const std::exception& e) {
    return internal_error(
        fmt::format("loading checkpoint {}: {}", dir, internal::first_line(e.what())));
  }
}

std::vector<NamedTensor> RankExecutor::parameters() const { return impl_->store.parameters(); }

int64_t RankExecutor::optimizer_state_bytes() const { return impl_->optimizer_state_bytes(); }

std::map<std::string, TensorSlice> RankExecutor::slices() const {
  std::map<std::string, TensorSlice> out;
  for (const auto& [name, p] : impl_->checkpoint->parameters()) {
    if (!p.held_elsewhere) out[name] = p.slice;
  }
  return out;
}

int64_t RankExecutor::steps_done() const { return impl_->steps_done; }

}  // namespace motley
