#include "candidate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "space.h"

namespace motley::tune_internal {

namespace {

void append_number(std::string* out, int64_t x) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof(buf), x).ptr;
  out->append(buf, end);
}

// A run of consecutive stages on one group: stages [first, last].
struct StageRun {
  int group = 0;
  int first = 0;
  int last = 0;
};

std::vector<StageRun> stage_runs(const Replica& replica) {
  std::vector<StageRun> runs;
  for (int s = 0; s < static_cast<int>(replica.stage_group.size()); ++s) {
    const int g = replica.stage_group[s];
    if (!runs.empty() && runs.back().group == g) {
      runs.back().last = s;
    } else {
      runs.push_back(StageRun{g, s, s});
    }
  }
  return runs;
}

// The runs at which a V or zigzag of `chunks` over p groups turns: c - 1 of them.
std::vector<int> turn_runs(int p, int chunks) {
  std::vector<int> out;
  for (int t = 1; t < chunks; ++t) out.push_back(t * (p - 1));
  return out;
}

// The shape and chunk count whose stage map the runs follow over p groups in order, or nullopt.
std::optional<std::pair<StageShape, int>> runs_shape(const std::vector<StageRun>& runs, int p) {
  const int n = static_cast<int>(runs.size());
  if (p <= 0) return std::nullopt;
  auto follows = [&](auto group_of) {
    for (int i = 0; i < n; ++i) {
      if (runs[i].group != group_of(i)) return false;
    }
    return true;
  };
  if (n == p && follows([](int i) { return i; })) return std::pair{StageShape::kLinear, 1};
  if (n % p == 0 && n / p >= 2 && follows([p](int i) { return i % p; })) {
    return std::pair{StageShape::kInterleaved, n / p};
  }
  // V and zigzag: out to the last group and back (and out again ...), each turn's two stages on
  // the group it turns at fused into one run: c chunks make c (p - 1) + 1 runs.
  if (p > 1 && n > p && (n - 1) % (p - 1) == 0) {
    const int chunks = (n - 1) / (p - 1);
    const bool zigzag = follows([p](int i) {
      const int leg = i / (p - 1), at = i % (p - 1);
      return leg % 2 == 0 ? at : p - 1 - at;
    });
    bool turns_split = true;
    for (int at : turn_runs(p, chunks)) {
      turns_split = turns_split && runs[static_cast<size_t>(at)].last > runs[at].first;
    }
    if (zigzag && turns_split) return std::pair{StageShape::kV, chunks};
  }
  return std::nullopt;
}

// The named or adaptive schedule called `name` on `shape` with `chunks` stages per group.
ScheduleSpec schedule_named(const std::string& name, StageShape shape, int chunks) {
  std::vector<ScheduleSpec> specs;
  const std::string kind_name = name.substr(0, name.find('('));
  if (std::optional<ScheduleKind> kind = parse_schedule_kind(kind_name)) {
    specs.push_back(ScheduleSpec::named(*kind, chunks));
  }
  for (AdaptivePriority priority :
       {AdaptivePriority::kBackwardFirst, AdaptivePriority::kForwardFirst,
        AdaptivePriority::kAlternate}) {
    for (WeightFill fill : {WeightFill::kIfItFits, WeightFill::kAlways}) {
      specs.push_back(ScheduleSpec::adaptive_on(shape, chunks, priority, fill));
    }
  }
  for (const ScheduleSpec& spec : specs) {
    if (spec.name() == name && spec.shape == shape && spec.chunks == chunks) return spec;
  }
  return ScheduleSpec::adaptive_on(shape, chunks, AdaptivePriority::kBackwardFirst,
                                   WeightFill::kIfItFits);
}

}  // namespace

Result<Candidate> candidate_from_plan(const Plan& plan) {
  // Vocabulary shards: the plan as if its head ran whole on the stage before them.
  if (has_vocab_shards(plan.stages)) {
    MOTLEY_ASSIGN_OR_RETURN(Candidate c, candidate_from_plan(without_vocab_shards(plan)));
    c.vocab_parallel = true;
    c.vocab_embedding = embedding_shard_count(plan.stages) > 0;
    return c;
  }
  Candidate c;
  c.micro_batch_size = plan.micro_batch_size;
  c.zero_stage = plan.replicas.size() > 1 ? plan.zero_stage : 0;
  c.expert_parallel = plan.expert_parallel;
  c.context_parallel = plan.context_parallel;
  c.sequence_parallel = plan.sequence_parallel;
  std::optional<std::pair<StageShape, int>> shape;
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    const Replica& replica = plan.replicas[r];
    const int p = static_cast<int>(replica.groups.size());
    std::vector<StageRun> runs = stage_runs(replica);
    const std::optional<std::pair<StageShape, int>> mine = runs_shape(runs, p);
    if (!mine || (shape && *mine != *shape)) {
      return invalid_argument(fmt::format(
          "replica {}: its stages are not a linear, interleaved, V or zigzag map over its {} "
          "groups in order{}",
          r, p, shape && mine ? ", or not the other replicas' shape" : ""));
    }
    shape = mine;
    if (mine->first == StageShape::kV) {
      // Split each turn where its two halves' layer counts are closest, the last turn first so
      // that the earlier ones keep their indices.
      const std::vector<int> turns = turn_runs(p, mine->second);
      for (auto it = turns.rbegin(); it != turns.rend(); ++it) {
        const StageRun turn = runs[*it];
        const int begin = plan.stages[turn.first].layer_begin;
        const int end = plan.stages[turn.last].layer_end;
        int split = turn.first + 1;
        for (int s = turn.first + 1; s <= turn.last; ++s) {
          const int here = std::abs(2 * plan.stages[s].layer_begin - begin - end);
          if (here < std::abs(2 * plan.stages[split].layer_begin - begin - end)) split = s;
        }
        runs[*it].last = split - 1;
        runs.insert(runs.begin() + *it + 1, StageRun{turn.group, split, turn.last});
      }
    }
    PipelineSpec spec;
    spec.micro_batches = replica.micro_batches;
    for (const DeviceGroupSchedule& g : replica.groups) spec.groups.push_back(g.devices);
    for (const StageRun& run : runs) {
      spec.bounds.push_back(plan.stages[run.first].layer_begin);
      RecomputePolicy most = RecomputePolicy::kNone;
      for (int s = run.first; s <= run.last; ++s) most = std::max(most, plan.stages[s].recompute);
      spec.recompute.push_back(most);
    }
    spec.bounds.push_back(plan.stages.empty() ? 0 : plan.stages.back().layer_end);
    c.replicas.push_back(std::move(spec));
  }
  if (!shape) return invalid_argument("the plan has no replicas");
  for (const Stage& st : plan.stages) {
    c.recompute_layers.insert(c.recompute_layers.end(), st.recompute_layers.begin(),
                              st.recompute_layers.end());
  }
  c.schedule = schedule_named(plan.schedule, shape->first, shape->second);
  return c;
}

Candidate with_replicas(const Candidate& c, std::vector<PipelineSpec> replicas) {
  // Every field of Candidate but `replicas`.
  Candidate out;
  out.micro_batch_size = c.micro_batch_size;
  out.schedule = c.schedule;
  out.replicas = std::move(replicas);
  out.zero_stage = c.zero_stage;
  out.expert_parallel = c.expert_parallel;
  out.context_parallel = c.context_parallel;
  out.sequence_parallel = c.sequence_parallel;
  out.vocab_parallel = c.vocab_parallel;
  out.vocab_embedding = c.vocab_embedding;
  out.head_shares = c.head_shares;
  out.recompute_layers = c.recompute_layers;
  return out;
}

// Built by appending rather than through a string stream: the search asks for a key for every
// candidate it evaluates.
std::string candidate_key(const Candidate& c) {
  std::string k;
  k.reserve(64);
  append_number(&k, c.micro_batch_size);
  k += '|';
  k += c.schedule.name();
  if (!c.schedule.limit_in_flight) k += '!';
  if (c.zero_stage > 0) append_number(&(k += 'z'), c.zero_stage);
  if (c.expert_parallel > 1) append_number(&(k += 'e'), c.expert_parallel);
  if (c.context_parallel > 1) append_number(&(k += 'c'), c.context_parallel);
  if (c.sequence_parallel) k += 's';
  if (c.vocab_parallel) k += 'v';
  if (c.vocab_embedding) k += 'E';
  for (double w : c.head_shares) {
    // Weights equal to a part in a million give the same rows for any vocabulary below that.
    append_number(&(k += 'h'), std::llround(w * 1e6));
  }
  k += '|';
  // The offset that takes every device of `prev` to the same place in `r`, where `r` is `prev`
  // moved (same micro-batches, layers, recompute and group sizes); nullopt otherwise.
  auto moved_by = [](const PipelineSpec& prev, const PipelineSpec& r) -> std::optional<int> {
    if (r.micro_batches != prev.micro_batches || r.bounds != prev.bounds ||
        r.recompute != prev.recompute || r.groups.size() != prev.groups.size() ||
        r.groups.empty() || r.groups[0].empty() || prev.groups[0].empty()) {
      return std::nullopt;
    }
    const int offset = r.groups[0][0] - prev.groups[0][0];
    for (size_t g = 0; g < r.groups.size(); ++g) {
      if (r.groups[g].size() != prev.groups[g].size()) return std::nullopt;
      for (size_t i = 0; i < r.groups[g].size(); ++i) {
        if (r.groups[g][i] != prev.groups[g][i] + offset) return std::nullopt;
      }
    }
    return offset;
  };
  for (size_t i = 0; i < c.replicas.size(); ++i) {
    const PipelineSpec& r = c.replicas[i];
    if (i > 0) {
      // "*offset,n;": this replica and the n - 1 after it, each the one before moved by offset.
      if (const std::optional<int> offset = moved_by(c.replicas[i - 1], r)) {
        size_t n = 1;
        while (i + n < c.replicas.size() &&
               moved_by(c.replicas[i + n - 1], c.replicas[i + n]) == offset) {
          ++n;
        }
        append_number(&(k += '*'), *offset);
        append_number(&(k += ','), static_cast<int64_t>(n));
        k += ';';
        i += n - 1;
        continue;
      }
    }
    k += 'm';
    append_number(&k, r.micro_batches);
    k += ':';
    for (const auto& g : r.groups) {
      k += '[';
      for (int d : g) {
        append_number(&k, d);
        k += ',';
      }
      k += ']';
    }
    k += 'b';
    for (int b : r.bounds) {
      append_number(&k, b);
      k += ',';
    }
    k += 'r';
    for (RecomputePolicy p : r.recompute) append_number(&k, static_cast<int>(p));
    k += ';';
  }
  if (!c.recompute_layers.empty()) {
    k += 'L';
    for (int l : c.recompute_layers) {
      append_number(&k, l);
      k += ',';
    }
  }
  return k;
}

std::vector<std::vector<GroupLoad>> group_loads(const Context& ctx, const Candidate& c,
                                                const CostModel* collectives,
                                                const std::vector<size_t>* only) {
  const CostModel& cost = ctx.cost(c.micro_batch_size, c.sequence_parallel, c.context_parallel);
  std::vector<std::vector<GroupLoad>> out(c.replicas.size());
  PassOverheadCache shared;
  std::vector<size_t> all;
  if (only == nullptr) {
    all.resize(c.replicas.size());
    std::iota(all.begin(), all.end(), size_t{0});
  }
  for (size_t r : only != nullptr ? *only : all) {
    const PipelineSpec& rep = c.replicas[r];
    const int p = static_cast<int>(rep.groups.size());
    const std::vector<int> stage_group = shape_stage_group(c.schedule, p);
    std::vector<GroupLoad> loads(p);
    for (size_t s = 0; s + 1 < rep.bounds.size(); ++s) {
      const int g = stage_group[s];
      const LayerRange layers = own_layers(ctx, c, rep, s);
      if (layers.size() == 0) continue;
      const ComputeTimes t = cost.compute(layers, DeviceGroup{rep.groups[g]}, rep.recompute[s]);
      const PassOverhead o = pass_overhead(ctx, collectives != nullptr ? *collectives : cost, c,
                                           static_cast<int>(r), s, t, &shared);
      loads[g].forward += t.forward.value() + o.forward;
      loads[g].backward += (t.backward_input + t.recompute).value() + o.backward;
      loads[g].weight += t.backward_weight.value() + o.weight;
    }
    const std::vector<ComputeTimes> shards = vocab_shard_times(ctx, cost, c, static_cast<int>(r));
    for (size_t g = 0; g < shards.size(); ++g) {
      loads[g].forward += shards[g].forward.value();
      loads[g].backward += shards[g].backward_input.value();
      loads[g].weight += shards[g].backward_weight.value();
    }
    out[r] = std::move(loads);
  }
  return out;
}

std::vector<StateHolder> candidate_state_holders(const Candidate& c) {
  std::vector<StateHolder> out;
  for (const PipelineSpec& rep : c.replicas) {
    const std::vector<int> stage_group =
        shape_stage_group(c.schedule, static_cast<int>(rep.groups.size()));
    for (size_t s = 0; s + 1 < rep.bounds.size(); ++s) {
      out.push_back(
          StateHolder{LayerRange{rep.bounds[s], rep.bounds[s + 1]}, rep.groups[stage_group[s]]});
    }
  }
  return out;
}

std::string schedule_family(const ScheduleSpec& s) {
  return s.adaptive ? "adaptive" : schedule_kind_name(s.kind);
}

bool schedule_allowed(const Context& ctx, const ScheduleSpec& s) {
  const std::vector<std::string>& allowed = ctx.options().constraints.schedules;
  return allowed.empty() ||
         std::find(allowed.begin(), allowed.end(), schedule_family(s)) != allowed.end();
}

std::string constraint_violation(const Context& ctx, const Candidate& c) {
  const PlanConstraints& k = ctx.options().constraints;
  if (!schedule_allowed(ctx, c.schedule)) {
    return fmt::format("schedule {} is not among the allowed families ({})", c.schedule.name(),
                       fmt::join(k.schedules, ", "));
  }
  if (k.data_parallel > 0 && static_cast<int>(c.replicas.size()) != k.data_parallel) {
    return fmt::format("{} replicas, not the data-parallel degree {}", c.replicas.size(),
                       k.data_parallel);
  }
  for (const PipelineSpec& r : c.replicas) {
    if (k.pipeline_parallel > 0 && static_cast<int>(r.groups.size()) != k.pipeline_parallel) {
      return fmt::format("a pipeline of {} device groups, not the pipeline-parallel degree {}",
                         r.groups.size(), k.pipeline_parallel);
    }
    for (const auto& g : r.groups) {
      if (k.tensor_parallel > 0 && static_cast<int>(g.size()) != k.tensor_parallel) {
        return fmt::format("a device group of {}, not the tensor-parallel degree {}", g.size(),
                           k.tensor_parallel);
      }
      for (int d : g) {
        if (d < 0 || d >= ctx.num_cluster_devices() || ctx.type_of(d) < 0) {
          return fmt::format("device {} is left out", d);
        }
      }
    }
  }
  return "";
}

PreemptionEstimate candidate_preemption(const Context& ctx, const std::vector<StateHolder>& holders,
                                        double iteration_time) {
  if (!ctx.interruptible() || !(iteration_time > 0)) return PreemptionEstimate{};
  return estimate_preemption(
      ctx.cluster(), checkpoint_shares(holders, ctx.layer_state(), ctx.num_cluster_devices()),
      Seconds(iteration_time));
}

PreemptionEstimate candidate_preemption(const Context& ctx, const Candidate& c,
                                        double iteration_time) {
  if (!ctx.interruptible() || !(iteration_time > 0)) return PreemptionEstimate{};
  return candidate_preemption(ctx, candidate_state_holders(c), iteration_time);
}

Result<Plan> assemble(const Context& ctx, const Candidate& c, int64_t data_parallel,
                      bool whole_batch) {
  AssembleOptions options;
  options.model = ctx.model_ref();
  options.cluster = ctx.cluster_ref();
  options.num_layers = ctx.num_layers();
  options.seq_len = ctx.seq_len();
  options.zero_stage = ctx.options().zero_stage.value_or(c.zero_stage);
  options.expert_parallel = c.expert_parallel;
  options.context_parallel = c.context_parallel;
  options.head_vocab = head_vocab(ctx.model());
  options.embedding_vocab = embedding_vocab(ctx.model());
  options.usable_memory_fraction = ctx.usable_memory_fraction();
  options.data_parallel = data_parallel;
  options.global_batch = whole_batch ? ctx.global_batch() : 0;
  return assemble_plan(options, c,
                       ctx.cost(c.micro_batch_size, c.sequence_parallel, c.context_parallel));
}

}  // namespace motley::tune_internal
