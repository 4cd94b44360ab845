// Graph building; docs/simulator.md, "Task graph", gives the tasks, their durations and
// predecessors. Everything here is linear in tasks and writes into memory kept between plans.
#include "sim_graph.h"

#include <algorithm>
#include <array>
#include <map>
#include <utility>

namespace motley::sim_internal {
namespace {

size_t kind_index(ActionKind kind) { return static_cast<size_t>(kind); }

class Builder {
 public:
  Builder(const SimOptions& options, const Plan& plan, const CostModel& cost, SimGraph& out)
      : options_(options),
        plan_(plan),
        cost_(cost),
        topology_(cost.topology()),
        out_(out),
        scratch_(out.scratch),
        stages_(static_cast<int>(plan.stages.size())) {}

  Status build() {
    PlanBounds bounds;
    bounds.num_devices = static_cast<int>(topology_.devices().size());
    bounds.cluster = "the cost model's cluster";
    const Status structure = scratch_.checker.check(plan_, bounds);
    if (!structure.is_ok()) return structure.with_context(options_.source);
    price_stages();
    price_data_parallel();
    fold_replicas();
    out_.graph.assign(sim(), scratch_.lowering.lower(sim()));
    price_actions_and_messages();
    add_all_reduces_and_optimizer_steps();
    out_.graph.link();
    for (int32_t id = 0; id < out_.graph.size(); ++id) {
      out_.tasks[id].pending = out_.graph.indegree(id);
    }
    return Status::ok();
  }

 private:
  size_t at(int r, int s) const { return static_cast<size_t>(r) * stages_ + s; }
  // The plan of the replicas simulated (fold_replicas chooses it).
  const Plan& sim() const { return *out_.simulated; }
  // The policy an R of stage s reruns layer l under in replica r: the stage's own, or a full
  // recompute where the stage keeps its activations and its R actions recompute single
  // micro-batches (plan/dependencies.h, RecomputedMicroBatches).
  RecomputePolicy rerun_policy(int r, int s, int l) const {
    const Stage& st = plan_.stages[s];
    return st.recomputes() || !scratch_.explicit_recompute[at(r, s)] ? st.policy_of(l)
                                                                     : RecomputePolicy::kFull;
  }

  // Per (replica, stage) of the plan: times, memory and boundary bytes, from the cost model once.
  void price_stages() {
    const int n_rep = static_cast<int>(plan_.replicas.size());
    scratch_.explicit_recompute.assign(static_cast<size_t>(n_rep) * stages_, 0);
    scratch_.weight_pass.assign(static_cast<size_t>(n_rep) * stages_, 0);
    for (int r = 0; r < n_rep; ++r) {
      for (const DeviceGroupSchedule& g : plan_.replicas[r].groups) {
        for (const Action& a : g.actions) {
          if (a.kind == ActionKind::kRecompute) scratch_.explicit_recompute[at(r, a.stage)] = 1;
          if (a.kind == ActionKind::kBackwardWeight) scratch_.weight_pass[at(r, a.stage)] = 1;
        }
      }
    }
    scratch_.stage_times.assign(static_cast<size_t>(n_rep) * stages_, SimGraph::StageTimes{});
    out_.stage_memory.assign(static_cast<size_t>(n_rep) * stages_, StageMemory{});
    scratch_.optimizer_time.assign(static_cast<size_t>(n_rep) * stages_, -1.0);
    // Per stage, what its messages carry: the activation leaving its last layer (a vocabulary
    // shard's F sends the loss's statistics instead: per token the largest logit of its rows,
    // their sum of exponentials and the target's logit, three fp32 numbers), and the gradient of
    // its input (the output of the layer before it).
    scratch_.boundary_bytes.assign(2 * static_cast<size_t>(stages_), 0);
    const int head_shards = pipeline_shape(plan_).first_shard();
    for (int s = 0; s < stages_; ++s) {
      const Stage& st = plan_.stages[s];
      const size_t at = 2 * static_cast<size_t>(s);
      // (An embedding shard sends its partial embedding: the hidden state's bytes.)
      scratch_.boundary_bytes[at] = s >= head_shards
                                        ? static_cast<double>(plan_.micro_batch_size) *
                                              static_cast<double>(plan_.seq_len) /
                                              std::max(plan_.context_parallel, 1) * 3.0 * 4.0
                                        : cost_.boundary_bytes(st.layer_end - 1).value();
      scratch_.boundary_bytes[at + 1] =
          st.layer_begin > 0 ? cost_.boundary_bytes(st.layer_begin - 1).value() : 0.0;
    }
    DeviceGroup group;
    for (int r = 0; r < n_rep; ++r) {
      const Replica& rep = plan_.replicas[r];
      for (int s = 0; s < stages_; ++s) {
        const Stage& st = plan_.stages[s];
        const LayerRange layers{st.layer_begin, st.layer_end, vocab_share(plan_.stages, s)};
        group.devices = rep.groups[rep.stage_group[s]].devices;
        const ComputeTimes t =
            stage_compute(cost_, layers, group, st.recompute, st.recompute_layers);
        // Without an explicit R the recompute runs inside the backward that needs it.
        const double folded = scratch_.explicit_recompute[at(r, s)] ? 0.0 : t.recompute.value();
        SimGraph::StageTimes& times = scratch_.stage_times[at(r, s)];
        times[kind_index(ActionKind::kForward)] = t.forward.value();
        times[kind_index(ActionKind::kBackwardInput)] = t.backward_input.value() + folded;
        times[kind_index(ActionKind::kBackwardWeight)] = t.backward_weight.value();
        times[kind_index(ActionKind::kBackward)] = t.fused_backward().value() + folded;
        times[kind_index(ActionKind::kRecompute)] = t.recompute.value();
        if (!st.recomputes() && scratch_.explicit_recompute[at(r, s)]) {
          times[kind_index(ActionKind::kRecompute)] =
              stage_compute(cost_, layers, group, RecomputePolicy::kFull, {}).recompute.value();
        }
        MemoryOptions mem;
        mem.recompute = st.recompute;
        mem.in_flight_micro_batches = 0;
        mem.data_parallel = n_rep;
        mem.zero_stage = plan_.zero_stage;
        mem.expert_parallel = plan_.expert_parallel;
        out_.stage_memory[at(r, s)] =
            stage_memory_with(cost_, layers, group, mem, st.recompute_layers);
        if (const std::optional<Seconds> step = cost_.optimizer_step_time(layers, group, mem)) {
          scratch_.optimizer_time[at(r, s)] = step->value();
        }
      }
    }
  }

  // Each stage's data-parallel collectives over the plan's replicas: TP rank k of every replica
  // reduces with the others' rank k, the rings run at once and the slowest prices the stage
  // (unequal TP degrees: one ring over all), on the largest unsharded bytes among the replicas.
  // Under ZeRO-2 and -3, every micro-batch's passes carry their share (sharded_pass_overhead).
  void price_data_parallel() {
    const int n_rep = static_cast<int>(plan_.replicas.size());
    price_expert_exchanges();
    price_context_exchanges();
    scratch_.sync.clear();
    if (!options_.gradient_all_reduce || n_rep < 2) return;
    const int zero = plan_.zero_stage;
    std::vector<int>& devices = scratch_.devices;
    for (int s = 0; s < stages_; ++s) {
      const Stage& st = plan_.stages[s];
      const LayerRange layers{st.layer_begin, st.layer_end, vocab_share(plan_.stages, s)};
      const std::vector<int>& first =
          plan_.replicas[0].groups[plan_.replicas[0].stage_group[s]].devices;
      const size_t tp = first.size();
      bool same_tp = true;
      StageMemory bytes;  // the largest unsharded gradients and weights among the replicas
      for (int r = 0; r < n_rep; ++r) {
        const Replica& rep = plan_.replicas[r];
        group_.devices = rep.groups[rep.stage_group[s]].devices;
        same_tp = same_tp && group_.devices.size() == tp;
        MemoryOptions whole;  // no ZeRO; expert parallelism's share of the experts
        whole.data_parallel = n_rep;
        whole.expert_parallel = plan_.expert_parallel;
        const StageMemory m =
            zero >= 2 ? cost_.stage_memory(layers, group_, whole) : out_.stage_memory[at(r, s)];
        bytes.gradients = std::max(bytes.gradients, m.gradients);
        bytes.weights = std::max(bytes.weights, m.weights);
      }
      DataParallelSync slowest;  // the slowest ring's, as ZeRO-1 prices them when sharded
      for (size_t k = 0; k < (same_tp ? tp : 1); ++k) {
        devices.clear();
        for (int r = 0; r < n_rep; ++r) {
          const Replica& rep = plan_.replicas[r];
          const std::vector<int>& d = rep.groups[rep.stage_group[s]].devices;
          if (same_tp) {
            devices.push_back(d[k]);
          } else {
            devices.insert(devices.end(), d.begin(), d.end());
          }
        }
        // ZeRO-2 and -3 move ZeRO-1's collectives (ZeRO-3 gathers nothing at the end).
        const DataParallelSync ring = data_parallel_sync(cost_, devices, bytes, std::min(zero, 1),
                                                         options_.all_reduce_algorithm);
        slowest.reduction = std::max(slowest.reduction, ring.reduction);
        slowest.gather = std::max(slowest.gather, ring.gather);
      }
      DataParallelSync sync = slowest;
      if (zero >= 3) sync.gather = Seconds(0);
      scratch_.sync.push_back(sync);
      if (zero < 2) continue;
      for (int r = 0; r < n_rep; ++r) {
        SimGraph::StageTimes& times = scratch_.stage_times[at(r, s)];
        const bool split = scratch_.weight_pass[at(r, s)] != 0;
        const size_t b = kind_index(split ? ActionKind::kBackwardInput : ActionKind::kBackward);
        const size_t g = kind_index(split ? ActionKind::kBackwardWeight : ActionKind::kBackward);
        const ShardedPassOverhead o =
            sharded_pass_overhead(zero, slowest, Seconds(times[kind_index(ActionKind::kForward)]),
                                  Seconds(times[b]), Seconds(times[g]));
        times[kind_index(ActionKind::kForward)] += o.forward.value();
        times[kind_index(ActionKind::kRecompute)] += o.forward.value();
        times[b] += o.backward.value();
        times[g] += o.gradient.value();
        times[kShardedReduction] = o.gradient.value();
      }
    }
  }

  // Expert parallelism: every forward of a stage with MoE layers sends each layer's tokens to
  // their experts and back (two all-to-alls over the replica's expert group, TP rank k with the
  // others' rank k, the slowest pricing it), and so does every backward with their gradients;
  // a full recompute repeats the forward's. On the critical path: the layer waits for them.
  void price_expert_exchanges() {
    const int e = plan_.expert_parallel;
    const int n_rep = static_cast<int>(plan_.replicas.size());
    if (e <= 1 || n_rep % e != 0) return;
    std::vector<int>& devices = scratch_.devices;
    for (int r = 0; r < n_rep; ++r) {
      const int first = r / e * e;
      for (int s = 0; s < stages_; ++s) {
        const Stage& st = plan_.stages[s];
        const std::vector<int>& mine =
            plan_.replicas[r].groups[plan_.replicas[r].stage_group[s]].devices;
        double exchange = 0, recomputed = 0;
        for (int l = st.layer_begin; l < st.layer_end; ++l) {
          const Bytes bytes = cost_.expert_dispatch_bytes(l);
          if (bytes.value() <= 0) continue;
          double slowest = 0;
          for (size_t k = 0; k < mine.size(); ++k) {
            devices.clear();
            for (int q = first; q < first + e; ++q) {
              const Replica& rep = plan_.replicas[q];
              const std::vector<int>& d = rep.groups[rep.stage_group[s]].devices;
              devices.push_back(d[std::min(k, d.size() - 1)]);
            }
            slowest = std::max(
                slowest,
                cost_
                    .expert_exchange_time(l, devices, bytes / static_cast<double>(mine.size()),
                                          options_.all_reduce_algorithm)
                    .value());
          }
          exchange += 2 * slowest;  // dispatch and combine
          if (rerun_policy(r, s, l) == RecomputePolicy::kFull) recomputed += 2 * slowest;
        }
        if (exchange == 0) continue;
        SimGraph::StageTimes& times = scratch_.stage_times[at(r, s)];
        times[kind_index(ActionKind::kForward)] += exchange;
        times[kind_index(ActionKind::kBackwardInput)] += exchange;
        times[kind_index(ActionKind::kBackward)] += exchange;
        times[kind_index(ActionKind::kRecompute)] += recomputed;
      }
    }
  }

  // Context parallelism: every attention layer runs ring attention over the replica's context
  // group, c steps each scoring the device's queries against one member's keys and values
  // while the next chunk travels to it. A step takes the longest of the members' shares of the
  // attention core (1/c of it; the members run in lockstep) and the slowest hop of the ring
  // (TP rank k of each member to rank k of the next, all hops at once), so each of the c - 1
  // steps after the first adds what it exceeds the device's own share by. The
  // backward passes the keys and values with their gradients (twice the bytes); a recompute
  // that reruns the attention core repeats the forward's.
  void price_context_exchanges() {
    const int c = plan_.context_parallel;
    const int n_rep = static_cast<int>(plan_.replicas.size());
    if (c <= 1 || n_rep % c != 0) return;
    const double steps = static_cast<double>(c);
    std::vector<CostModel::ContextExchange> members(static_cast<size_t>(c));
    // Per member of the group: what the ring adds to its F, B and R of the stage.
    std::vector<std::array<double, 3>> added(static_cast<size_t>(c));
    for (int first = 0; first < n_rep; first += c) {
      for (int s = 0; s < stages_; ++s) {
        const Stage& st = plan_.stages[s];
        auto devices = [&](int q) -> const std::vector<int>& {
          const Replica& rep = plan_.replicas[first + q % c];
          return rep.groups[rep.stage_group[s]].devices;
        };
        added.assign(static_cast<size_t>(c), {0.0, 0.0, 0.0});
        for (int l = st.layer_begin; l < st.layer_end; ++l) {
          bool exchanges = false;
          for (int q = 0; q < c; ++q) {
            group_.devices = devices(q);
            members[q] = cost_.context_exchange(l, group_);
            exchanges = exchanges || members[q].bytes.value() > 0;
          }
          if (!exchanges) continue;
          // The slowest step of the ring, forward and backward, over the members.
          double step = 0, step_back = 0;
          for (int q = 0; q < c; ++q) {
            group_.devices = devices(q);
            const std::vector<int>& to = devices(q + 1);
            step = std::max(step, members[q].forward_attention.value() / steps);
            step_back = std::max(step_back, members[q].backward_attention.value() / steps);
            for (size_t k = 0; k < group_.devices.size(); ++k) {
              const int src = group_.devices[k], dst = to[std::min(k, to.size() - 1)];
              const Bytes bytes = members[q].bytes;
              step = std::max(step, cost_.p2p_time(src, dst, bytes).value());
              step_back = std::max(step_back, cost_.p2p_time(src, dst, bytes * 2.0).value());
            }
          }
          for (int q = 0; q < c; ++q) {
            if (members[q].bytes.value() <= 0) continue;
            const double f =
                ring_exchange_exposure(c, Seconds(step), members[q].forward_attention).value();
            added[q][0] += f;
            added[q][1] +=
                ring_exchange_exposure(c, Seconds(step_back), members[q].backward_attention)
                    .value();
            if (rerun_policy(first + q, s, l) != RecomputePolicy::kNone) added[q][2] += f;
          }
        }
        for (int q = 0; q < c; ++q) {
          SimGraph::StageTimes& times = scratch_.stage_times[at(first + q, s)];
          times[kind_index(ActionKind::kForward)] += added[q][0];
          times[kind_index(ActionKind::kBackwardInput)] += added[q][1];
          times[kind_index(ActionKind::kBackward)] += added[q][1];
          times[kind_index(ActionKind::kRecompute)] += added[q][2];
        }
      }
    }
  }

  // The bytes a message of `stage` (its activation, or its input's gradient) from `group` to
  // `peer` of replica r takes on its path: a transfer reaching a fraction of its path's
  // bandwidth takes as long as the bytes over that fraction at full bandwidth, and shares the
  // link as such.
  double wire_bytes(const Plan& plan, int r, int group, int peer, int stage, bool gradient) {
    const Replica& rep = plan.replicas[r];
    src_.devices = rep.groups[group].devices;
    dst_.devices = rep.groups[peer].devices;
    const CostModel::PipelineMessage m = cost_.pipeline_message(
        src_, dst_, Bytes(scratch_.boundary_bytes[2 * static_cast<size_t>(stage) + gradient]));
    return m.bytes.value() / m.bandwidth_efficiency;
  }

  // Chooses the replicas to simulate and keeps their priced stages, in simulated order.
  void fold_replicas() {
    out_.simulated = &plan_;
    if (!options_.fold_identical_replicas || plan_.replicas.size() < 2) {
      out_.folding = no_folding(plan_);
      return;
    }
    out_.folding =
        fold_identical_replicas(plan_, cost_, scratch_.stage_times, out_.stage_memory,
                                [this](int r, int group, int peer, int stage, bool gradient) {
                                  return wire_bytes(plan_, r, group, peer, stage, gradient);
                                });
    if (!out_.folding.folds()) return;
    folded_plan(plan_, out_.folding, out_.folded);
    out_.simulated = &out_.folded;
    // Row k of the simulated replicas is row members[k][0] of the plan's; k <= members[k][0].
    for (size_t k = 0; k < out_.folding.members.size(); ++k) {
      const int from = out_.folding.members[k].front();
      const int to = static_cast<int>(k);
      for (int s = 0; s < stages_; ++s) {
        scratch_.stage_times[at(to, s)] = scratch_.stage_times[at(from, s)];
        out_.stage_memory[at(to, s)] = out_.stage_memory[at(from, s)];
        scratch_.optimizer_time[at(to, s)] = scratch_.optimizer_time[at(from, s)];
      }
    }
    const size_t rows = out_.folding.members.size() * static_cast<size_t>(stages_);
    scratch_.stage_times.resize(rows);
    out_.stage_memory.resize(rows);
    scratch_.optimizer_time.resize(rows);
  }

  // Compute tasks take their stage's time; a message its path's latency before its bytes.
  void price_actions_and_messages() {
    const Plan& sim = this->sim();
    const TaskGraph& graph = out_.graph;
    out_.tasks.assign(graph.size(), TaskState{});
    out_.transfers.clear();
    for (int32_t id = 0; id < graph.num_actions(); ++id) {
      const TaskNode& n = graph.node(id);
      out_.tasks[id].duration =
          scratch_.stage_times[at(n.replica, n.stage)][kind_index(action_kind(n.kind))];
    }
    // How each (replica, sender, receiver, stage) message travels — its path and its bytes on
    // the wire — resolved once for all its micro-batches.
    std::map<std::array<int, 5>, std::pair<Path, double>> route;
    for (int32_t id = graph.num_actions(); id < graph.size(); ++id) {
      const TaskNode& n = graph.node(id);
      const Replica& rep = sim.replicas[n.replica];
      Transfer x;
      x.task = id;
      x.src_device = rep.groups[n.group].devices[0];
      x.dst_device = rep.groups[n.peer_group].devices[0];
      const bool gradient = n.kind == TaskKind::kGradientMessage;
      auto [it, inserted] =
          route.try_emplace({n.replica, n.group, n.peer_group, n.stage, gradient ? 1 : 0});
      if (inserted) {
        it->second = {topology_.path(x.src_device, x.dst_device),
                      wire_bytes(sim, n.replica, n.group, n.peer_group, n.stage, gradient)};
      }
      x.path = it->second.first;
      x.bytes = it->second.second;
      TaskState& t = out_.tasks[id];
      t.duration = x.path.latency.value();
      t.transfer = static_cast<int32_t>(out_.transfers.size());
      t.communication = true;
      out_.transfers.push_back(x);
    }
  }

  int32_t add_task(const TaskNode& node, double duration, bool communication) {
    TaskState t;
    t.duration = duration;
    t.communication = communication;
    out_.tasks.push_back(t);
    return out_.graph.add_node(node);
  }

  // The task after which stage s's gradients are final on simulated replica r: its last W (or
  // fused backward, or B where the stage has no W) in its group's list.
  int32_t last_backward(int r, int s) const {
    const Replica& rep = sim().replicas[r];
    int32_t last = -1;
    for (int j = 0; j < rep.micro_batches; ++j) {
      const int32_t w = out_.graph.find(r, ActionKind::kBackwardWeight, s, j);
      last = std::max(last, w >= 0 ? w : out_.graph.input_backward(r, s, j));
    }
    return last;
  }

  // Gradient all-reduce per stage (one replica: none) and the optimizer step per group. The
  // all-reduce spans every replica of the plan, folded or not.
  void add_all_reduces_and_optimizer_steps() {
    TaskGraph& graph = out_.graph;
    const Plan& sim = this->sim();
    const int n_sim = static_cast<int>(sim.replicas.size());
    const int n_rep = static_cast<int>(plan_.replicas.size());
    const bool reduces = options_.gradient_all_reduce && n_rep > 1;
    std::vector<int32_t>& last = scratch_.last_backward;
    last.assign(reduces ? static_cast<size_t>(n_sim) * stages_ : 0, -1);
    for (int r = 0; reduces && r < n_sim; ++r) {
      for (int s = 0; s < stages_; ++s) {
        last[at(r, s)] = last_backward(r, s);
        // Its reduce-scatter is the sync's (ZeRO-2 and -3).
        out_.tasks[last[at(r, s)]].duration -= scratch_.stage_times[at(r, s)][kShardedReduction];
      }
    }
    std::vector<int32_t>& all_reduce = scratch_.all_reduce;
    all_reduce.assign(stages_, -1);
    if (reduces) {
      for (int s = 0; s < stages_; ++s) {
        const std::vector<int>& first =
            plan_.replicas[0].groups[plan_.replicas[0].stage_group[s]].devices;
        double last_pass = -1;   // the shortest last backward among the replicas
        double first_pass = -1;  // the shortest first forward
        for (int r = 0; r < n_sim; ++r) {
          const double pass = out_.tasks[last[at(r, s)]].duration;
          last_pass = last_pass < 0 ? pass : std::min(last_pass, pass);
          const double forward =
              out_.tasks[out_.graph.find(r, ActionKind::kForward, s, 0)].duration;
          first_pass = first_pass < 0 ? forward : std::min(first_pass, forward);
        }
        const DataParallelSync& sync = scratch_.sync[s];
        group_.devices = first;
        const Stage& st = plan_.stages[s];
        const double duration =
            exposed_data_parallel_sync(
                cost_, sync, LayerRange{st.layer_begin, st.layer_end, vocab_share(plan_.stages, s)},
                group_, n_rep, Seconds(last_pass), Seconds(first_pass))
                .value();
        all_reduce[s] =
            add_task(TaskNode{TaskKind::kExternal, -1, -1, s, -1, -1, -1, -1}, duration, true);
      }
    }

    add_tied_sums(all_reduce);

    std::vector<std::pair<int32_t, int>>& order = scratch_.order;
    for (int r = 0; r < n_sim; ++r) {
      const Replica& rep = sim.replicas[r];
      for (size_t gi = 0; gi < rep.groups.size(); ++gi) {
        const int g = static_cast<int>(gi);
        // The group's all-reduces are issued on its communication stream in the order their
        // last backward appears in its list.
        order.clear();
        for (int s = 0; s < stages_; ++s) {
          if (rep.stage_group[s] != g || all_reduce[s] < 0) continue;
          order.emplace_back(last[at(r, s)], s);
        }
        std::sort(order.begin(), order.end());
        for (size_t i = 0; i < order.size(); ++i) {
          graph.add_edge(order[i].first, all_reduce[order[i].second]);
          if (i > 0) graph.add_edge(all_reduce[order[i - 1].second], all_reduce[order[i].second]);
        }
        if (options_.optimizer_step == OptimizerStepModel::kNone) continue;
        double duration = options_.optimizer_step_time.value();
        if (options_.optimizer_step == OptimizerStepModel::kMemoryBound) {
          const BytesPerSecond bandwidth =
              topology_.device_type(rep.groups[g].devices[0]).memory_bandwidth;
          duration = 0;
          for (int s = 0; s < stages_; ++s) {
            if (rep.stage_group[s] != g) continue;
            // The cost model's step where it has one, else a pass over the stage's state.
            if (scratch_.optimizer_time[at(r, s)] >= 0) {
              duration += scratch_.optimizer_time[at(r, s)];
              continue;
            }
            duration += state_pass_time(out_.stage_memory[at(r, s)], bandwidth).value();
          }
        }
        const int32_t step =
            add_task(TaskNode{TaskKind::kExternal, r, g, -1, -1, -1, -1, -1}, duration, false);
        const int32_t n = graph.group_size(r, g);
        if (n > 0) graph.add_edge(graph.group_begin(r, g) + n - 1, step);
        for (const auto& [last, s] : order) graph.add_edge(all_reduce[s], step);
        const int32_t tied = scratch_.tied_sum[r];
        if (tied >= 0) {
          const TaskNode& node = graph.node(tied);
          if (node.group == g || node.peer_group == g) graph.add_edge(tied, step);
        }
      }
    }
  }

  // The sum of a tied matrix's two gradients (CostModel::tied_layers) on each simulated replica
  // whose two copies lie on different groups: an all-reduce of the head's gradients between the
  // two groups (TP rank k with rank k), after both stages' last backward and their data-parallel
  // reductions (Megatron-LM sums the embedding group once the data-parallel one is done), before
  // either group's optimizer step.
  void add_tied_sums(const std::vector<int32_t>& all_reduce) {
    TaskGraph& graph = out_.graph;
    const Plan& sim = this->sim();
    const int n_sim = static_cast<int>(sim.replicas.size());
    scratch_.tied_sum.assign(n_sim, -1);
    const std::optional<CostModel::TiedLayers> tied = cost_.tied_layers();
    if (!options_.gradient_all_reduce || !tied) return;
    int first = -1, second = -1;
    for (int s = 0; s < stages_; ++s) {
      const Stage& st = plan_.stages[s];
      if (st.layer_begin <= tied->first && tied->first < st.layer_end) first = s;
      if (st.layer_begin <= tied->second && tied->second < st.layer_end) second = s;
    }
    if (first < 0 || second < 0) return;
    for (int r = 0; r < n_sim; ++r) {
      const Replica& rep = sim.replicas[r];
      const int a = rep.stage_group[first], b = rep.stage_group[second];
      if (a == b) continue;
      const double duration = tied_gradient_sum(cost_, rep.groups[a].devices, rep.groups[b].devices,
                                                options_.all_reduce_algorithm)
                                  .value();
      const int32_t task =
          add_task(TaskNode{TaskKind::kExternal, r, a, first, -1, b, -1, -1}, duration, true);
      for (const int s : {first, second}) {
        graph.add_edge(last_backward(r, s), task);
        if (!all_reduce.empty() && all_reduce[s] >= 0) graph.add_edge(all_reduce[s], task);
      }
      scratch_.tied_sum[r] = task;
    }
  }

  const SimOptions& options_;
  const Plan& plan_;
  DeviceGroup src_;
  DeviceGroup dst_;
  DeviceGroup group_;
  const CostModel& cost_;
  const Topology& topology_;
  SimGraph& out_;
  SimGraph::Scratch& scratch_;
  const int stages_;
};

}  // namespace

SimTaskKind SimGraph::kind(int32_t id) const {
  const TaskNode& n = graph.node(id);
  switch (n.kind) {
    case TaskKind::kForward:
      return SimTaskKind::kForward;
    case TaskKind::kBackwardInput:
      return SimTaskKind::kBackwardInput;
    case TaskKind::kBackwardWeight:
      return SimTaskKind::kBackwardWeight;
    case TaskKind::kBackward:
      return SimTaskKind::kBackward;
    case TaskKind::kRecompute:
      return SimTaskKind::kRecompute;
    case TaskKind::kActivationMessage:
      return SimTaskKind::kSendActivation;
    case TaskKind::kGradientMessage:
      return SimTaskKind::kSendGradient;
    case TaskKind::kExternal:
      break;
  }
  // The simulator's own tasks: an all-reduce spans every replica, a tied sum joins two groups
  // of one replica, a step belongs to a group.
  if (n.replica < 0) return SimTaskKind::kGradientAllReduce;
  return n.peer_group >= 0 ? SimTaskKind::kTiedGradientSum : SimTaskKind::kOptimizerStep;
}

SimTask SimGraph::task(int32_t id) const {
  const TaskNode& n = graph.node(id);
  const TaskState& st = tasks[id];
  SimTask t;
  t.kind = kind(id);
  t.replica = n.replica >= 0 ? folding.members[n.replica].front() : n.replica;
  t.group = n.group;
  t.stage = n.stage;
  t.micro_batch = n.micro_batch;
  t.peer_group = n.peer_group;
  if (st.transfer >= 0) {
    t.device = transfers[st.transfer].src_device;
    t.peer_device = transfers[st.transfer].dst_device;
  } else if (n.replica >= 0) {
    t.device = simulated->replicas[n.replica].groups[n.group].devices[0];
  }
  t.start = Seconds(st.start);
  t.end = Seconds(st.end);
  return t;
}

Status build_sim_graph(const SimOptions& options, const Plan& plan, const CostModel& cost,
                       SimGraph& out) {
  return Builder(options, plan, cost, out).build();
}

}  // namespace motley::sim_internal
