// The plan assembler (docs/planner.md, "Assembling a plan"): the common refinement of the
// replicas' stage bounds, per replica the memory budgets of its groups, then its orders — the
// adaptive scheduler on the fine stages, or a named schedule on the replica's coarse stages
// expanded onto the fine ones — and the peak-memory check of the whole plan.
#include "motley/schedule/assemble.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "motley/core/check.h"
#include "motley/plan/dependencies.h"

namespace motley {
namespace {

std::string gib(Bytes b) {
  std::ostringstream out;
  out.precision(3);
  out << b.value() / kGiB;
  return out.str();
}

// What a plan may fill on `device`: its capacity times the usable fraction.
Bytes capacity(const CostModel& cost, int device, double usable) {
  return cost.topology().device_type(device).memory * usable;
}

// Fixed memory (no activations) and activations per micro-batch of a plan's stage on a group.
StageMemory stage_memory_of(const Plan& plan, const CostModel& cost, int stage,
                            const std::vector<int>& devices, int64_t data_parallel) {
  const Stage& st = plan.stages[stage];
  MemoryOptions m;
  m.recompute = st.recompute;
  m.in_flight_micro_batches = 0;
  m.data_parallel = data_parallel > 0 ? data_parallel : static_cast<int64_t>(plan.replicas.size());
  m.zero_stage = plan.zero_stage;
  m.expert_parallel = plan.expert_parallel;
  return stage_memory_with(
      cost, LayerRange{st.layer_begin, st.layer_end, vocab_share(plan.stages, stage)},
      DeviceGroup{devices}, m, st.recompute_layers);
}

// Each coarse action becomes the actions of its fine stages: forwards in pipeline order,
// backward passes in reverse.
std::vector<Action> expand(const std::vector<Action>& coarse,
                           const std::vector<std::vector<int>>& fine_of) {
  std::vector<Action> out;
  size_t n = 0;
  for (const Action& a : coarse) n += fine_of[a.stage].size();
  out.reserve(n);
  for (const Action& a : coarse) {
    const std::vector<int>& fine = fine_of[a.stage];
    if (a.kind == ActionKind::kForward) {
      for (int f : fine) out.push_back(Action{a.kind, f, a.micro_batch});
    } else {
      for (auto it = fine.rbegin(); it != fine.rend(); ++it) {
        out.push_back(Action{a.kind, *it, a.micro_batch});
      }
    }
  }
  return out;
}

Status check_candidate(const AssembleOptions& o, const Candidate& c) {
  const char* pre = "candidate: ";
  if (c.replicas.empty()) return invalid_argument(fmt::format("{}no replicas", pre));
  if (!(o.usable_memory_fraction > 0 && o.usable_memory_fraction <= 1)) {
    return invalid_argument(fmt::format("{}the usable memory fraction must be in (0, 1], got {}",
                                        pre, o.usable_memory_fraction));
  }
  if (c.micro_batch_size <= 0) {
    return invalid_argument(fmt::format("{}micro-batch size must be positive", pre));
  }
  const int cp = std::max({o.context_parallel, c.context_parallel, 1});
  if (c.replicas.size() % static_cast<size_t>(cp) != 0) {
    return invalid_argument(fmt::format("{}context parallelism {} does not divide the {} replicas",
                                        pre, cp, c.replicas.size()));
  }
  int64_t sequences = 0;
  for (size_t r = 0; r < c.replicas.size(); ++r) {
    const PipelineSpec& rep = c.replicas[r];
    const int p = static_cast<int>(rep.groups.size());
    if (p == 0) return invalid_argument(fmt::format("{}replica {} has no groups", pre, r));
    const size_t stages = static_cast<size_t>(p) * c.schedule.chunks;
    if (rep.bounds.size() != stages + 1 || rep.recompute.size() != stages) {
      return invalid_argument(fmt::format("{}replica {} needs {} stages", pre, r, stages));
    }
    if (rep.bounds.front() != 0 || rep.bounds.back() != o.num_layers) {
      return invalid_argument(
          fmt::format("{}replica {} does not cover the model's layers", pre, r));
    }
    for (size_t s = 0; s < stages; ++s) {
      if (rep.bounds[s + 1] <= rep.bounds[s]) {
        return invalid_argument(fmt::format("{}replica {} stage {} is empty", pre, r, s));
      }
    }
    if (rep.micro_batches <= 0) {
      return invalid_argument(fmt::format("{}replica {} has no micro-batches", pre, r));
    }
    const PipelineSpec& lead = c.replicas[r / cp * cp];
    if (rep.micro_batches != lead.micro_batches) {
      return invalid_argument(
          fmt::format("{}replica {} runs {} micro-batches, not the {} of its context group", pre, r,
                      rep.micro_batches, lead.micro_batches));
    }
    if (r % cp == 0) sequences += rep.micro_batches * c.micro_batch_size;
  }
  if (o.global_batch > 0 && sequences != o.global_batch) {
    return internal_error(fmt::format("{}replicas run {} sequences, not the global batch of {}",
                                      pre, sequences, o.global_batch));
  }
  return Status::ok();
}

// Refuses replica r if a group's peak memory under its orders (fixed memory plus the most
// activations live at once, per device) exceeds the group's capacity.
Status check_replica_memory(const Plan& plan, size_t r, const CostModel& cost,
                            int64_t data_parallel, double usable) {
  const int stages = static_cast<int>(plan.stages.size());
  const Replica& rep = plan.replicas[r];
  std::vector<double> act(stages, 0), recomputed_act(stages, 0);
  for (size_t g = 0; g < rep.groups.size(); ++g) {
    const std::vector<int>& devices = rep.groups[g].devices;
    Bytes fixed;
    for (int s = 0; s < stages; ++s) {
      if (rep.stage_group[s] != static_cast<int>(g)) continue;
      StageMemory m = stage_memory_of(plan, cost, s, devices, data_parallel);
      act[s] = m.activations_per_micro_batch.value();
      recomputed_act[s] = m.recomputed_activations_per_micro_batch.value();
      m.activations = Bytes(0);
      fixed += m.total();
    }
    const RecomputedMicroBatches recomputed(plan.stages, rep.groups[g].actions);
    double live = 0, peak = 0;
    for (const Action& a : rep.groups[g].actions) {
      live += recomputed.change(a, act[a.stage], recomputed_act[a.stage]);
      peak = std::max(peak, live);
    }
    const Bytes total = fixed + Bytes(peak);
    const Bytes cap = capacity(cost, devices.front(), usable);
    if (total > cap) {
      return infeasible(
          fmt::format("memory: replica {} group {} peaks at {} GiB of {} GiB under {}", r, g,
                      gib(total), gib(cap), plan.schedule));
    }
  }
  return Status::ok();
}

// One replica's memory and times on the plan's (fine) stages.
struct ReplicaFacts {
  std::vector<double> budget;       // per group: bytes for activations (infinite when unchecked)
  std::vector<double> reserve;      // per group: one micro-batch's activations over its stages
  std::vector<double> activations;  // per fine stage, one micro-batch
  std::vector<ComputeTimes> times;  // per fine stage
  // Per fine stage, with ScheduleSpec::recompute_single: what a micro-batch recomputed alone
  // keeps (its activations where the stage may not), and its R's time.
  std::vector<double> recomputed;
  std::vector<double> recompute_time;
};

Result<ReplicaFacts> replica_facts(const AssembleOptions& o, const ScheduleSpec& schedule,
                                   const Plan& plan, size_t r, const PipelineSpec& rep,
                                   bool need_memory, const CostModel& cost) {
  const Replica& out = plan.replicas[r];
  const int p = static_cast<int>(rep.groups.size());
  const int stages = static_cast<int>(plan.stages.size());
  ReplicaFacts f;
  std::vector<double> fixed(p, 0);
  f.reserve.assign(p, 0);
  f.activations.assign(stages, 0);
  f.times.resize(stages);
  const bool single = schedule.adaptive && schedule.recompute_single && need_memory;
  if (single) {
    f.recomputed.assign(stages, 0);
    f.recompute_time.assign(stages, 0);
  }
  // Per group with single recomputes: the most one micro-batch needs there
  // (least_activation_need).
  std::vector<double> least(p, 0);
  for (int s = 0; s < stages; ++s) {
    const int g = out.stage_group[s];
    const Stage& st = plan.stages[s];
    const LayerRange layers{st.layer_begin, st.layer_end, vocab_share(plan.stages, s)};
    if (need_memory) {
      StageMemory m = stage_memory_of(plan, cost, s, rep.groups[g], o.data_parallel);
      f.activations[s] = m.activations_per_micro_batch.value();
      f.reserve[g] += f.activations[s];
      if (single) {
        const bool may = !st.recomputes() && !st.is_vocab_shard();
        f.recomputed[s] = may ? m.recomputed_activations_per_micro_batch.value() : f.activations[s];
        if (may) {
          f.recompute_time[s] =
              stage_compute(cost, layers, DeviceGroup{rep.groups[g]}, RecomputePolicy::kFull, {})
                  .recompute.value();
        }
      }
      m.activations = Bytes(0);
      fixed[g] += m.total().value();
    }
    f.times[s] =
        stage_compute(cost, layers, DeviceGroup{rep.groups[g]}, st.recompute, st.recompute_layers);
  }
  if (single) {
    for (int g = 0; g < p; ++g) {
      least[g] = least_activation_need(out.stage_group, f.activations, f.recomputed, g);
    }
  }
  f.budget.assign(p, std::numeric_limits<double>::infinity());
  if (!o.check_memory) return f;
  for (int g = 0; g < p; ++g) {
    const Bytes cap = capacity(cost, rep.groups[g].front(), o.usable_memory_fraction);
    f.budget[g] = cap.value() - fixed[g];
    if (f.budget[g] < (single ? least[g] : f.reserve[g])) {
      return infeasible(
          fmt::format("memory: replica {} group {} ({}) needs {} GiB for one micro-batch but has "
                      "{} GiB",
                      r, g, cost.topology().devices()[rep.groups[g][0]].type,
                      gib(Bytes(fixed[g] + f.reserve[g])), gib(cap)));
    }
  }
  return f;
}

// The transfer time of an activation leaving `layer` from group `a` to group `b` (first devices).
Seconds hop(const CostModel& cost, const PipelineSpec& rep, int a, int b, int layer) {
  return cost.p2p_time(rep.groups[a][0], rep.groups[b][0], cost.boundary_bytes(layer));
}

// Schedule requests as bytes. generate_schedule and adaptive_schedule are functions of their
// requests, so replicas with equal requests (thousands, in a large data-parallel plan) share one
// generation, kept under this key. Every list's length is written before it.
class RequestKey {
 public:
  template <typename T>
  void put(const T& value) {
    key_.append(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  void put(Seconds t) { put(t.value()); }
  void put(Bytes b) { put(b.value()); }
  void put(const ComputeTimes& t) {
    put(t.forward);
    put(t.backward_input);
    put(t.backward_weight);
    put(t.recompute);
    put(t.fused_backward_saving);
  }
  template <typename T>
  void put_all(const std::vector<T>& values) {
    put(values.size());
    for (const T& v : values) put(v);
  }
  std::string take() { return std::move(key_); }

 private:
  std::string key_;
};

std::string request_key(ScheduleKind kind, const ScheduleRequest& req) {
  RequestKey key;
  key.put('N');
  key.put(kind);
  key.put(req.num_groups);
  key.put(req.num_stages);
  key.put(req.micro_batches);
  key.put(req.p2p_time);
  key.put_all(req.stage_group);
  key.put_all(req.stage_times);
  key.put_all(req.max_in_flight);
  return key.take();
}

std::string adaptive_request_key(const AdaptiveRequest& req) {
  RequestKey key;
  key.put('A');
  key.put(req.num_groups);
  key.put_all(req.stage_group);
  key.put(req.micro_batches);
  key.put_all(req.stage_times);
  key.put_all(req.transfer_time);
  key.put(req.vocab_shards);
  key.put(req.embedding_shards);
  key.put_all(req.activation_bytes);
  key.put_all(req.memory_budget);
  key.put_all(req.recomputed_bytes);
  key.put_all(req.recompute_time);
  key.put(req.split_backward);
  key.put(req.priority);
  key.put(req.weight_fill);
  return key.take();
}

Result<GroupOrders> adaptive_orders(const ScheduleSpec& spec, const Plan& plan, const Replica& out,
                                    const PipelineSpec& rep, const ReplicaFacts& f,
                                    const CostModel& cost,
                                    std::map<std::string, GroupOrders>& generated) {
  const int stages = static_cast<int>(plan.stages.size());
  const PipelineShape shape = pipeline_shape(plan);
  const int first_shard = shape.first_shard();
  AdaptiveRequest req;
  req.num_groups = static_cast<int>(rep.groups.size());
  req.stage_group = out.stage_group;
  req.micro_batches = rep.micro_batches;
  req.stage_times = f.times;
  req.vocab_shards = shape.vocab_shards;
  req.embedding_shards = shape.embedding_shards;
  for (int s = 0; s + 1 < stages; ++s) {
    const int a = out.stage_group[s];
    Seconds t(0);
    if (s + 1 < first_shard) {
      const int b = out.stage_group[s + 1];
      if (a != b) t = hop(cost, rep, a, b, plan.stages[s].layer_end - 1);
    } else if (s + 1 == first_shard) {
      // The hidden state to each shard (and its gradient back): the slowest of the hops.
      for (int k = first_shard; k < stages; ++k) {
        const int b = out.stage_group[k];
        if (a != b) t = std::max(t, hop(cost, rep, a, b, plan.stages[s].layer_end - 1));
      }
    } else {
      // The loss statistics between shards: three fp32 numbers per token.
      const Bytes stats(static_cast<double>(plan.micro_batch_size) *
                        static_cast<double>(plan.seq_len) * 3.0 * 4.0);
      for (int k = first_shard; k < stages; ++k) {
        if (k == s) continue;
        t = std::max(t, cost.p2p_time(rep.groups[a][0], rep.groups[out.stage_group[k]][0], stats));
      }
    }
    req.transfer_time.push_back(t);
  }
  for (int s = 0; s < stages; ++s) req.activation_bytes.push_back(Bytes(f.activations[s]));
  for (double b : f.budget) req.memory_budget.push_back(Bytes(b));
  for (double b : f.recomputed) req.recomputed_bytes.push_back(Bytes(b));
  for (double t : f.recompute_time) req.recompute_time.push_back(Seconds(t));
  req.split_backward = true;
  req.priority = spec.priority;
  req.weight_fill = spec.weight_fill;
  // adaptive_schedule is a function of its request: replicas with equal requests (thousands of
  // identical replicas, in a large data-parallel plan) share one.
  std::string key = adaptive_request_key(req);
  auto known = generated.find(key);
  if (known == generated.end()) {
    MOTLEY_ASSIGN_OR_RETURN(GroupOrders orders, adaptive_schedule(req));
    known = generated.emplace(std::move(key), std::move(orders)).first;
  }
  return known->second;
}

// A named schedule runs on the replica's coarse stages (times summed over their fine stages);
// its orders are then expanded onto the fine stages. `generated` keeps the orders of the
// requests met so far.
Result<GroupOrders> named_orders(const ScheduleSpec& spec, const PipelineSpec& rep,
                                 const std::vector<int>& coarse_of, const ReplicaFacts& f,
                                 bool check_memory, const CostModel& cost,
                                 std::map<std::string, GroupOrders>& generated) {
  const int p = static_cast<int>(rep.groups.size());
  const int stages = static_cast<int>(coarse_of.size());
  const int coarse_stages = static_cast<int>(rep.bounds.size()) - 1;
  std::vector<std::vector<int>> fine_of(coarse_stages);
  for (int s = 0; s < stages; ++s) fine_of[coarse_of[s]].push_back(s);
  ScheduleRequest req;
  req.num_groups = p;
  req.num_stages = coarse_stages;
  req.stage_group = shape_stage_group(spec, p);
  req.micro_batches = rep.micro_batches;
  req.stage_times.assign(coarse_stages, ComputeTimes{});
  for (int s = 0; s < stages; ++s) {
    ComputeTimes& t = req.stage_times[coarse_of[s]];
    t.forward += f.times[s].forward;
    t.backward_input += f.times[s].backward_input;
    t.backward_weight += f.times[s].backward_weight;
    t.recompute += f.times[s].recompute;
  }
  for (int cs = 0; cs + 1 < coarse_stages; ++cs) {
    const int a = req.stage_group[cs], b = req.stage_group[cs + 1];
    if (a == b) continue;
    req.p2p_time = std::max(req.p2p_time, hop(cost, rep, a, b, rep.bounds[cs + 1] - 1));
  }
  if (check_memory && spec.limit_in_flight &&
      (spec.kind == ScheduleKind::kZbH1 || spec.kind == ScheduleKind::kZbH2)) {
    for (int g = 0; g < p; ++g) {
      req.max_in_flight.push_back(
          std::max<int64_t>(1, static_cast<int64_t>(f.budget[g] / std::max(f.reserve[g], 1.0))));
    }
  }
  // Kept expanded: the key names the fine stages each coarse one holds.
  std::string key = request_key(spec.kind, req);
  for (int cs : coarse_of) key += fmt::format(",{}", cs);
  auto known = generated.find(key);
  if (known == generated.end()) {
    MOTLEY_ASSIGN_OR_RETURN(GroupOrders orders, generate_schedule(spec.kind, req));
    for (int g = 0; g < p; ++g) orders[g] = expand(orders[g], fine_of);
    known = generated.emplace(std::move(key), std::move(orders)).first;
  }
  return known->second;
}

// Vocabulary parallelism: the head's stage (the last fine stage, cut at the head) becomes one
// shard per group, rows in proportion to each group's speed on the head (replica 0's groups;
// every replica has as many), each at least one row.
Status split_head(const AssembleOptions& o, const Candidate& c, const CostModel& cost, Plan& plan,
                  std::vector<std::vector<int>>& coarse_of) {
  const char* pre = "candidate: vocabulary parallelism ";
  if (o.head_vocab <= 0 || o.num_layers < 2) {
    return invalid_argument(
        fmt::format("{}needs a model whose last layer is a head, after another layer", pre));
  }
  if (!c.schedule.adaptive) {
    return invalid_argument(
        fmt::format("{}needs the adaptive scheduler, not {}", pre, c.schedule.name()));
  }
  const std::vector<std::vector<int>>& groups = c.replicas[0].groups;
  const int p = static_cast<int>(groups.size());
  for (const PipelineSpec& rep : c.replicas) {
    if (static_cast<int>(rep.groups.size()) != p) {
      return invalid_argument(
          fmt::format("{}needs every replica to have as many groups (one shard each)", pre));
    }
  }
  if (p < 2 || p > kMaxVocabShards || o.head_vocab < p) {
    return invalid_argument(fmt::format(
        "{}needs 2 to {} groups and at least a row per group: {} groups, a vocabulary of {}", pre,
        kMaxVocabShards, p, o.head_vocab));
  }
  if (!c.head_shares.empty()) {
    const bool positive = std::all_of(c.head_shares.begin(), c.head_shares.end(),
                                      [](double w) { return std::isfinite(w) && w > 0; });
    if (static_cast<int>(c.head_shares.size()) != p || !positive) {
      return invalid_argument(
          fmt::format("{}needs one positive, finite head share per group: {} groups, {} shares",
                      pre, p, c.head_shares.size()));
    }
  }
  // One shard of `layer` per group, rows by the groups' speed on it.
  auto shards_of = [&](int layer, int64_t vocab) {
    const LayerRange whole{layer, layer + 1};
    std::vector<double> time(p);
    for (int g = 0; g < p; ++g) {
      const ComputeTimes t = cost.compute(whole, DeviceGroup{groups[g]}, RecomputePolicy::kNone);
      time[g] = (t.forward + t.backward()).value();
    }
    const bool weighted = layer == o.num_layers - 1 && !c.head_shares.empty();
    std::vector<Stage> out;
    int64_t begin = 0;
    for (int64_t end : weighted
                           ? vocab_shard_ends_by_weight(vocab, c.head_shares, vocab_row_granule(c))
                           : vocab_shard_ends(vocab, time, vocab_row_granule(c))) {
      out.push_back(Stage{whole.begin, whole.end, RecomputePolicy::kNone, begin, end});
      begin = end;
    }
    return out;
  };
  const std::vector<Stage> head = shards_of(o.num_layers - 1, o.head_vocab);
  plan.stages.pop_back();
  plan.stages.insert(plan.stages.end(), head.begin(), head.end());
  for (std::vector<int>& map : coarse_of) map.resize(plan.stages.size(), map.back());
  // The embedding too, where it has the rows for a shard per group and a layer after it.
  if (c.vocab_embedding && o.embedding_vocab >= p && o.num_layers >= 3) {
    const std::vector<Stage> embedding = shards_of(0, o.embedding_vocab);
    plan.stages.erase(plan.stages.begin());
    plan.stages.insert(plan.stages.begin(), embedding.begin(), embedding.end());
    for (std::vector<int>& map : coarse_of) {
      map.insert(map.begin(), static_cast<size_t>(p) - 1, map.front());
    }
  }
  return Status::ok();
}

}  // namespace

ScheduleSpec ScheduleSpec::named(ScheduleKind kind, int virtual_stages) {
  ScheduleSpec s;
  s.kind = kind;
  if (kind == ScheduleKind::kInterleaved) {
    s.shape = StageShape::kInterleaved;
    s.chunks = std::max(virtual_stages, 2);
  } else if (kind == ScheduleKind::kZbV || kind == ScheduleKind::kDualPipeV) {
    s.shape = StageShape::kV;
    s.chunks = 2;
  }
  return s;
}

ScheduleSpec ScheduleSpec::adaptive_on(StageShape shape, int chunks, AdaptivePriority priority,
                                       WeightFill fill) {
  ScheduleSpec s;
  s.adaptive = true;
  s.shape = shape;
  s.chunks = shape == StageShape::kLinear ? 1 : std::max(chunks, 2);
  s.priority = priority;
  s.weight_fill = fill;
  return s;
}

std::string ScheduleSpec::name() const {
  if (!adaptive) {
    std::string n = schedule_kind_name(kind);
    if (kind == ScheduleKind::kInterleaved) n += "(v=" + std::to_string(chunks) + ")";
    return n;
  }
  std::string n = "adaptive";
  if (shape == StageShape::kV) {
    n += chunks == 2 ? "-v" : "-zigzag(v=" + std::to_string(chunks) + ")";
  }
  if (shape == StageShape::kInterleaved) n += "-interleaved(v=" + std::to_string(chunks) + ")";
  std::string variant;
  if (priority == AdaptivePriority::kForwardFirst) variant = "forward-first";
  if (priority == AdaptivePriority::kAlternate) variant = "alternate";
  if (weight_fill == WeightFill::kAlways)
    variant += (variant.empty() ? "" : ", ") + std::string("eager-w");
  if (recompute_single) variant += (variant.empty() ? "" : ", ") + std::string("recompute-some");
  if (!variant.empty()) n += "(" + variant + ")";
  return n;
}

bool runs_fused_backward(const ScheduleSpec& schedule) {
  // The adaptive generator always splits (assemble_plan asks it for B and W).
  return !schedule.adaptive && !splits_backward(schedule.kind);
}

std::vector<int> shape_stage_group(const ScheduleSpec& schedule, int p) {
  switch (schedule.shape) {
    case StageShape::kLinear:
      return default_stage_group(ScheduleKind::k1f1b, p, 1);
    case StageShape::kInterleaved:
      return default_stage_group(ScheduleKind::kInterleaved, p, schedule.chunks);
    case StageShape::kV: {
      std::vector<int> out(static_cast<size_t>(p) * std::max(schedule.chunks, 2));
      for (size_t s = 0; s < out.size(); ++s) {
        const int k = static_cast<int>(s) / p;
        const int i = static_cast<int>(s) % p;
        out[s] = k % 2 == 0 ? i : p - 1 - i;
      }
      return out;
    }
  }
  return {};
}

std::vector<int64_t> vocab_shard_ends(int64_t vocab, const std::vector<double>& head_time,
                                      int64_t granule) {
  std::vector<double> speed(head_time.size());
  for (size_t g = 0; g < head_time.size(); ++g) {
    speed[g] = head_time[g] > 0 ? 1.0 / head_time[g] : 1.0;
  }
  return vocab_shard_ends_by_weight(vocab, speed, granule);
}

std::vector<int64_t> vocab_shard_ends_by_weight(int64_t vocab, const std::vector<double>& speed,
                                                int64_t granule) {
  const int p = static_cast<int>(speed.size());
  MOTLEY_CHECK(p >= 1 && vocab >= p && granule >= 1, "vocab_shard_ends: fewer rows than groups");
  const int64_t unit = vocab >= granule * p ? granule : 1;
  double total = 0;
  for (double s : speed) total += s;
  std::vector<int64_t> ends;
  int64_t begin = 0;
  double cumulative = 0;
  for (int g = 0; g < p; ++g) {
    cumulative += speed[g];
    // Rows up to the rounded cumulative share (in units), leaving a unit for each group after g.
    int64_t end = g + 1 == p ? vocab
                             : unit * std::llround(static_cast<double>(vocab) * cumulative /
                                                   (total * static_cast<double>(unit)));
    if (g + 1 < p) end = std::clamp<int64_t>(end, begin + unit, vocab - (p - 1 - g) * unit);
    ends.push_back(end);
    begin = end;
  }
  return ends;
}

std::vector<double> balanced_head_shares(const std::vector<double>& base,
                                         const std::vector<double>& head, double min_share) {
  const size_t p = head.size();
  MOTLEY_CHECK(p >= 1 && base.size() == p && min_share >= 0 &&
                   min_share * static_cast<double>(p) <= 1 + 1e-12,
               "balanced_head_shares: mismatched or infeasible inputs");
  // Every group first takes min_share; the rest fills the lowest ends up to a common level L:
  // group g takes max(0, (L - end_g) / head_g) more, and L solves sum = rest (piecewise linear
  // and increasing in L: walk the groups by their end).
  std::vector<double> end(p);
  for (size_t g = 0; g < p; ++g) end[g] = base[g] + min_share * head[g];
  const double rest = std::max(0.0, 1.0 - min_share * static_cast<double>(p));
  std::vector<size_t> order(p);
  for (size_t g = 0; g < p; ++g) order[g] = g;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return end[a] < end[b]; });
  double rate = 0;    // sum of 1 / head over the groups below the level
  double offset = 0;  // sum of end / head over them
  double level = end[order[0]];
  for (size_t i = 0; i < p; ++i) {
    rate += 1.0 / head[order[i]];
    offset += end[order[i]] / head[order[i]];
    // With groups order[0..i] filling: their shares sum to level * rate - offset.
    const double candidate = (rest + offset) / rate;
    if (i + 1 == p || candidate <= end[order[i + 1]]) {
      level = candidate;
      break;
    }
  }
  std::vector<double> shares(p);
  for (size_t g = 0; g < p; ++g) {
    shares[g] = min_share + std::max(0.0, (level - end[g]) / head[g]);
  }
  return shares;
}

int64_t vocab_row_granule(const std::vector<std::vector<int>>& groups, int64_t granule) {
  for (const std::vector<int>& g : groups) {
    granule = std::lcm(granule, static_cast<int64_t>(std::max<size_t>(g.size(), 1)));
  }
  return granule;
}

int64_t vocab_row_granule(const Candidate& c) {
  int64_t granule = 1;
  for (const PipelineSpec& rep : c.replicas) granule = vocab_row_granule(rep.groups, granule);
  return granule;
}

Result<Plan> assemble_plan(const AssembleOptions& o, const Candidate& c, const CostModel& cost) {
  MOTLEY_RETURN_IF_ERROR(check_candidate(o, c));

  // The common refinement of every replica's stage bounds (and the head on its own, to split).
  std::set<int> cuts;
  for (const PipelineSpec& rep : c.replicas) cuts.insert(rep.bounds.begin(), rep.bounds.end());
  if (c.vocab_parallel) {
    cuts.insert(o.num_layers - 1);
    if (c.vocab_embedding && o.embedding_vocab > 0 && o.num_layers >= 3) cuts.insert(1);
  }
  const std::vector<int> fine(cuts.begin(), cuts.end());
  int stages = static_cast<int>(fine.size()) - 1;

  Plan plan;
  plan.model = o.model;
  plan.cluster = o.cluster;
  plan.micro_batch_size = c.micro_batch_size;
  plan.seq_len = o.seq_len;
  plan.context_parallel = std::max(o.context_parallel, c.context_parallel);
  plan.global_batch = 0;
  for (size_t r = 0; r < c.replicas.size(); r += static_cast<size_t>(plan.context_parallel)) {
    plan.global_batch += c.replicas[r].micro_batches * c.micro_batch_size;
  }
  plan.schedule = c.schedule.name();
  plan.zero_stage = std::max(o.zero_stage, c.zero_stage);
  plan.expert_parallel = std::max(o.expert_parallel, c.expert_parallel);
  plan.sequence_parallel = o.sequence_parallel || c.sequence_parallel;
  for (int s = 0; s < stages; ++s) plan.stages.push_back(Stage{fine[s], fine[s + 1]});

  // Per replica, fine stage -> coarse stage; a fine stage takes the most recompute any replica
  // asks of the layers it holds, so that every replica's memory estimate stays an upper bound.
  std::vector<std::vector<int>> coarse_of(c.replicas.size(), std::vector<int>(stages));
  for (size_t r = 0; r < c.replicas.size(); ++r) {
    const PipelineSpec& rep = c.replicas[r];
    int cs = 0;
    for (int s = 0; s < stages; ++s) {
      while (rep.bounds[cs + 1] <= fine[s]) ++cs;
      coarse_of[r][s] = cs;
      plan.stages[s].recompute = std::max(plan.stages[s].recompute, rep.recompute[cs]);
    }
  }
  for (Stage& st : plan.stages) {
    if (st.recompute == RecomputePolicy::kFull || st.is_vocab_shard()) continue;
    for (int l : c.recompute_layers) {
      if (l >= st.layer_begin && l < st.layer_end) st.recompute_layers.push_back(l);
    }
  }

  if (c.vocab_parallel) {
    MOTLEY_RETURN_IF_ERROR(split_head(o, c, cost, plan, coarse_of));
    stages = static_cast<int>(plan.stages.size());
  }
  const int first_shard = pipeline_shape(plan).first_shard();
  const int embedding_shards = pipeline_shape(plan).embedding_shards;

  for (size_t r = 0; r < c.replicas.size(); ++r) {
    const PipelineSpec& rep = c.replicas[r];
    const std::vector<int> coarse_group =
        shape_stage_group(c.schedule, static_cast<int>(rep.groups.size()));
    Replica out;
    out.micro_batches = rep.micro_batches;
    for (int s = 0; s < stages; ++s) {
      // Shard k of either run runs on group k.
      out.stage_group.push_back(s >= first_shard       ? s - first_shard
                                : s < embedding_shards ? s
                                                       : coarse_group[coarse_of[r][s]]);
    }
    for (const auto& g : rep.groups) out.groups.push_back(DeviceGroupSchedule{g, {}});
    plan.replicas.push_back(std::move(out));
  }

  // The adaptive scheduler admits micro-batches by their activations even without budgets.
  const bool need_memory = o.check_memory || c.schedule.adaptive;
  std::map<std::string, GroupOrders> generated;
  for (size_t r = 0; r < c.replicas.size(); ++r) {
    const PipelineSpec& rep = c.replicas[r];
    Replica& out = plan.replicas[r];
    MOTLEY_ASSIGN_OR_RETURN(const ReplicaFacts facts,
                            replica_facts(o, c.schedule, plan, r, rep, need_memory, cost));
    MOTLEY_ASSIGN_OR_RETURN(
        GroupOrders orders,
        c.schedule.adaptive
            ? adaptive_orders(c.schedule, plan, out, rep, facts, cost, generated)
            : named_orders(c.schedule, rep, coarse_of[r], facts, o.check_memory, cost, generated));
    for (size_t g = 0; g < orders.size(); ++g) out.groups[g].actions = std::move(orders[g]);
    // Checked as each replica is built: a plan that does not fit (on tens of thousands of
    // devices, most of a large sweep's) is refused without building the replicas after it.
    if (o.check_memory) {
      MOTLEY_RETURN_IF_ERROR(
          check_replica_memory(plan, r, cost, o.data_parallel, o.usable_memory_fraction));
    }
  }
  return plan;
}

}  // namespace motley
