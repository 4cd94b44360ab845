#include "candidate.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <string>

namespace motley::tune_internal {
namespace {

std::string gib(Bytes b) {
  std::ostringstream out;
  out.precision(3);
  out << b.value() / kGiB;
  return out.str();
}

// Fixed memory (no activations) and activations per micro-batch of a plan's stage on a group.
StageMemory stage_memory_of(const Plan& plan, const CostModel& cost, int stage,
                            const std::vector<int>& devices, int64_t data_parallel = 0) {
  const Stage& st = plan.stages[stage];
  MemoryOptions m;
  m.recompute = st.recompute;
  m.in_flight_micro_batches = 0;
  m.data_parallel = data_parallel > 0 ? data_parallel : static_cast<int64_t>(plan.replicas.size());
  m.zero1 = plan.zero1;
  return cost.stage_memory(LayerRange{st.layer_begin, st.layer_end}, DeviceGroup{devices}, m);
}

// Each coarse action becomes the actions of its fine stages: forwards in pipeline order,
// backward passes in reverse.
std::vector<Action> expand(const std::vector<Action>& coarse,
                           const std::vector<std::vector<int>>& fine_of) {
  std::vector<Action> out;
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

Status check_candidate(const Context& ctx, const Candidate& c, bool whole_batch) {
  const std::string pre = "candidate: ";
  if (c.replicas.empty()) return invalid_argument(pre + "no replicas");
  if (c.micro_batch_size <= 0) return invalid_argument(pre + "micro-batch size must be positive");
  int64_t sequences = 0;
  for (size_t r = 0; r < c.replicas.size(); ++r) {
    const PipelineSpec& rep = c.replicas[r];
    const int p = static_cast<int>(rep.groups.size());
    if (p == 0) return invalid_argument(pre + "replica " + std::to_string(r) + " has no groups");
    const size_t stages = static_cast<size_t>(p) * c.schedule.chunks;
    if (rep.bounds.size() != stages + 1 || rep.recompute.size() != stages) {
      return invalid_argument(pre + "replica " + std::to_string(r) + " needs " +
                              std::to_string(stages) + " stages");
    }
    if (rep.bounds.front() != 0 || rep.bounds.back() != ctx.num_layers()) {
      return invalid_argument(pre + "replica " + std::to_string(r) +
                              " does not cover the model's layers");
    }
    for (size_t s = 0; s < stages; ++s) {
      if (rep.bounds[s + 1] <= rep.bounds[s]) {
        return invalid_argument(pre + "replica " + std::to_string(r) + " stage " +
                                std::to_string(s) + " is empty");
      }
    }
    if (rep.micro_batches <= 0) {
      return invalid_argument(pre + "replica " + std::to_string(r) + " has no micro-batches");
    }
    sequences += rep.micro_batches * c.micro_batch_size;
  }
  if (whole_batch && sequences != ctx.global_batch()) {
    return internal_error(pre + "replicas run " + std::to_string(sequences) +
                          " sequences, not the global batch of " +
                          std::to_string(ctx.global_batch()));
  }
  return Status::ok();
}

}  // namespace

ScheduleSpec ScheduleSpec::named(ScheduleKind kind, int virtual_stages) {
  ScheduleSpec s;
  s.kind = kind;
  if (kind == ScheduleKind::kInterleaved) {
    s.shape = Shape::kInterleaved;
    s.chunks = std::max(virtual_stages, 2);
  } else if (kind == ScheduleKind::kZbV || kind == ScheduleKind::kDualPipeV) {
    s.shape = Shape::kV;
    s.chunks = 2;
  }
  return s;
}

ScheduleSpec ScheduleSpec::adaptive_on(Shape shape, int chunks, AdaptivePriority priority,
                                       WeightFill fill) {
  ScheduleSpec s;
  s.adaptive = true;
  s.shape = shape;
  s.chunks = shape == Shape::kLinear ? 1 : shape == Shape::kV ? 2 : std::max(chunks, 2);
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
  if (shape == Shape::kV) n += "-v";
  if (shape == Shape::kInterleaved) n += "-interleaved(v=" + std::to_string(chunks) + ")";
  std::string variant;
  if (priority == AdaptivePriority::kForwardFirst) variant = "forward-first";
  if (weight_fill == WeightFill::kAlways)
    variant += (variant.empty() ? "" : ", ") + std::string("eager-w");
  if (!variant.empty()) n += "(" + variant + ")";
  return n;
}

std::vector<int> shape_stage_group(const ScheduleSpec& schedule, int p) {
  switch (schedule.shape) {
    case Shape::kLinear:
      return default_stage_group(ScheduleKind::k1f1b, p, 1);
    case Shape::kInterleaved:
      return default_stage_group(ScheduleKind::kInterleaved, p, schedule.chunks);
    case Shape::kV:
      return default_stage_group(ScheduleKind::kZbV, p, 2);
  }
  return {};
}

std::string candidate_key(const Candidate& c) {
  std::ostringstream k;
  k << c.micro_batch_size << '|' << c.schedule.name() << (c.schedule.limit_in_flight ? "" : "!")
    << '|';
  for (const PipelineSpec& r : c.replicas) {
    k << 'm' << r.micro_batches << ':';
    for (const auto& g : r.groups) {
      k << '[';
      for (int d : g) k << d << ',';
      k << ']';
    }
    k << 'b';
    for (int b : r.bounds) k << b << ',';
    k << 'r';
    for (RecomputePolicy p : r.recompute) k << static_cast<int>(p);
    k << ';';
  }
  return k.str();
}

std::vector<std::vector<GroupLoad>> group_loads(const Context& ctx, const Candidate& c) {
  const CostModel& cost = ctx.cost(c.micro_batch_size);
  std::vector<std::vector<GroupLoad>> out;
  for (const PipelineSpec& rep : c.replicas) {
    const int p = static_cast<int>(rep.groups.size());
    const std::vector<int> stage_group = shape_stage_group(c.schedule, p);
    std::vector<GroupLoad> loads(p);
    for (size_t s = 0; s + 1 < rep.bounds.size(); ++s) {
      const int g = stage_group[s];
      const ComputeTimes t = cost.compute(LayerRange{rep.bounds[s], rep.bounds[s + 1]},
                                          DeviceGroup{rep.groups[g]}, rep.recompute[s]);
      loads[g].forward += t.forward.value();
      loads[g].backward += (t.backward_input + t.recompute).value();
      loads[g].weight += t.backward_weight.value();
    }
    out.push_back(std::move(loads));
  }
  return out;
}

std::vector<std::vector<GroupMemory>> plan_memory(const Context& ctx, const Plan& plan,
                                                  const CostModel& cost, int64_t data_parallel) {
  std::vector<std::vector<GroupMemory>> out;
  const int stages = static_cast<int>(plan.stages.size());
  for (const Replica& rep : plan.replicas) {
    std::vector<GroupMemory> groups;
    std::vector<double> act(stages, 0);
    for (size_t g = 0; g < rep.groups.size(); ++g) {
      const std::vector<int>& devices = rep.groups[g].devices;
      GroupMemory gm;
      for (int s = 0; s < stages; ++s) {
        if (rep.stage_group[s] != static_cast<int>(g)) continue;
        StageMemory m = stage_memory_of(plan, cost, s, devices, data_parallel);
        act[s] = m.activations_per_micro_batch.value();
        m.activations = Bytes(0);
        gm.fixed += m.total();
      }
      double live = 0, peak = 0;
      for (const Action& a : rep.groups[g].actions) {
        if (a.kind == ActionKind::kForward) {
          live += act[a.stage];
          peak = std::max(peak, live);
        } else if (a.kind == ActionKind::kBackwardWeight || a.kind == ActionKind::kBackward) {
          live -= act[a.stage];
        }
      }
      gm.peak = gm.fixed + Bytes(peak);
      gm.capacity = ctx.capacity(devices.front());
      groups.push_back(gm);
    }
    out.push_back(std::move(groups));
  }
  return out;
}

Result<Plan> assemble(const Context& ctx, const Candidate& c, const AssembleOptions& options) {
  MOTLEY_RETURN_IF_ERROR(check_candidate(ctx, c, options.whole_batch));
  const CostModel& cost = ctx.cost(c.micro_batch_size);

  // The common refinement of every replica's stage bounds.
  std::set<int> cuts;
  for (const PipelineSpec& rep : c.replicas) cuts.insert(rep.bounds.begin(), rep.bounds.end());
  const std::vector<int> fine(cuts.begin(), cuts.end());
  const int stages = static_cast<int>(fine.size()) - 1;

  Plan plan;
  plan.model = ctx.model_ref();
  plan.cluster = ctx.cluster_ref();
  plan.micro_batch_size = c.micro_batch_size;
  plan.seq_len = ctx.seq_len();
  plan.global_batch = 0;
  for (const PipelineSpec& rep : c.replicas)
    plan.global_batch += rep.micro_batches * c.micro_batch_size;
  plan.schedule = c.schedule.name();
  plan.zero1 = ctx.options().zero1;
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

  for (size_t r = 0; r < c.replicas.size(); ++r) {
    const PipelineSpec& rep = c.replicas[r];
    const int p = static_cast<int>(rep.groups.size());
    const std::vector<int> coarse_group = shape_stage_group(c.schedule, p);
    Replica out;
    out.micro_batches = rep.micro_batches;
    for (int s = 0; s < stages; ++s) out.stage_group.push_back(coarse_group[coarse_of[r][s]]);
    for (const auto& g : rep.groups) out.groups.push_back(DeviceGroupSchedule{g, {}});
    plan.replicas.push_back(std::move(out));
  }

  // Memory left for activations on each group, and one micro-batch's activations there.
  for (size_t r = 0; r < c.replicas.size(); ++r) {
    const PipelineSpec& rep = c.replicas[r];
    Replica& out = plan.replicas[r];
    const int p = static_cast<int>(rep.groups.size());
    std::vector<double> fixed(p, 0), reserve(p, 0);
    std::vector<double> act(stages, 0);
    std::vector<ComputeTimes> fine_times(stages);
    for (int s = 0; s < stages; ++s) {
      const int g = out.stage_group[s];
      StageMemory m = stage_memory_of(plan, cost, s, rep.groups[g], options.data_parallel);
      act[s] = m.activations_per_micro_batch.value();
      reserve[g] += act[s];
      m.activations = Bytes(0);
      fixed[g] += m.total().value();
      fine_times[s] = cost.compute(LayerRange{fine[s], fine[s + 1]}, DeviceGroup{rep.groups[g]},
                                   plan.stages[s].recompute);
    }
    std::vector<double> budget(p);
    for (int g = 0; g < p; ++g) {
      budget[g] = ctx.capacity(rep.groups[g].front()).value() - fixed[g];
      if (budget[g] < reserve[g]) {
        return infeasible("memory: replica " + std::to_string(r) + " group " + std::to_string(g) +
                          " (" + ctx.devices()[rep.groups[g][0]].type + ") needs " +
                          gib(Bytes(fixed[g] + reserve[g])) + " GiB for one micro-batch but has " +
                          gib(ctx.capacity(rep.groups[g].front())) + " GiB");
      }
    }

    if (c.schedule.adaptive) {
      AdaptiveRequest req;
      req.num_groups = p;
      req.stage_group = out.stage_group;
      req.micro_batches = rep.micro_batches;
      req.stage_times = fine_times;
      for (int s = 0; s + 1 < stages; ++s) {
        const int a = out.stage_group[s], b = out.stage_group[s + 1];
        req.transfer_time.push_back(a == b ? Seconds(0)
                                           : cost.p2p_time(rep.groups[a][0], rep.groups[b][0],
                                                           cost.boundary_bytes(fine[s + 1] - 1)));
      }
      for (int s = 0; s < stages; ++s) req.activation_bytes.push_back(Bytes(act[s]));
      for (int g = 0; g < p; ++g) req.memory_budget.push_back(Bytes(budget[g]));
      req.split_backward = true;
      req.priority = c.schedule.priority;
      req.weight_fill = c.schedule.weight_fill;
      MOTLEY_ASSIGN_OR_RETURN(GroupOrders orders, adaptive_schedule(req));
      for (int g = 0; g < p; ++g) out.groups[g].actions = std::move(orders[g]);
      continue;
    }

    // Named schedules run on the replica's coarse stages, then expand onto the fine ones.
    const int coarse_stages = static_cast<int>(rep.bounds.size()) - 1;
    std::vector<std::vector<int>> fine_of(coarse_stages);
    for (int s = 0; s < stages; ++s) fine_of[coarse_of[r][s]].push_back(s);
    ScheduleRequest req;
    req.num_groups = p;
    req.num_stages = coarse_stages;
    req.stage_group = shape_stage_group(c.schedule, p);
    req.micro_batches = rep.micro_batches;
    req.stage_times.assign(coarse_stages, ComputeTimes{});
    for (int s = 0; s < stages; ++s) {
      ComputeTimes& t = req.stage_times[coarse_of[r][s]];
      t.forward += fine_times[s].forward;
      t.backward_input += fine_times[s].backward_input;
      t.backward_weight += fine_times[s].backward_weight;
      t.recompute += fine_times[s].recompute;
    }
    for (int cs = 0; cs + 1 < coarse_stages; ++cs) {
      const int a = req.stage_group[cs], b = req.stage_group[cs + 1];
      if (a == b) continue;
      req.p2p_time =
          std::max(req.p2p_time, cost.p2p_time(rep.groups[a][0], rep.groups[b][0],
                                               cost.boundary_bytes(rep.bounds[cs + 1] - 1)));
    }
    if (c.schedule.limit_in_flight &&
        (c.schedule.kind == ScheduleKind::kZbH1 || c.schedule.kind == ScheduleKind::kZbH2)) {
      for (int g = 0; g < p; ++g) {
        req.max_in_flight.push_back(
            std::max<int64_t>(1, static_cast<int64_t>(budget[g] / std::max(reserve[g], 1.0))));
      }
    }
    MOTLEY_ASSIGN_OR_RETURN(GroupOrders orders, generate_schedule(c.schedule.kind, req));
    for (int g = 0; g < p; ++g) out.groups[g].actions = expand(orders[g], fine_of);
  }

  const auto memory = plan_memory(ctx, plan, cost, options.data_parallel);
  for (size_t r = 0; r < memory.size(); ++r) {
    for (size_t g = 0; g < memory[r].size(); ++g) {
      const GroupMemory& m = memory[r][g];
      if (m.peak > m.capacity) {
        return infeasible("memory: replica " + std::to_string(r) + " group " + std::to_string(g) +
                          " peaks at " + gib(m.peak) + " GiB of " + gib(m.capacity) +
                          " GiB under " + plan.schedule);
      }
    }
  }
  return plan;
}

}  // namespace motley::tune_internal
