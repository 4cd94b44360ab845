// Plan validation; the rules and the dependency graph are documented in docs/plan-format.md,
// "Validation". Checks run from the cheapest (references, structure, placement) to the most
// expensive (the dependency graph, memory), and the first failure is reported.
#include "motley/plan/validate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "labels.h"
#include "motley/core/check.h"
#include "motley/core/checked_math.h"
#include "motley/model/layer_cost.h"
#include "motley/plan/dependencies.h"
#include "motley/plan/lower.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/spec_hash.h"
#include "motley/plan/structure.h"
#include "motley/plan/task_graph.h"

namespace motley {
namespace {

using plan_labels::action_label;
using plan_labels::Labels;

// Sizes in GiB with one decimal, or three when one would make the two sides look equal.
std::string gib(Bytes b, int decimals) {
  std::string s = fmt::format("{:.{}f}", b.value() / kGiB, decimals);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return fmt::format("{} GiB", s);
}

Status check_spec_hashes(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster) {
  SpecRef m = model_ref(model);
  if (plan.model.hash != m.hash) {
    return invalid_argument(fmt::format(
        "the plan was made for model '{}' (hash {}) but the model given is '{}' (hash {}); make a "
        "new plan for this model, or pass the model it was made for",
        plan.model.name, plan.model.hash, m.name, m.hash));
  }
  SpecRef c = cluster_ref(cluster);
  if (plan.cluster.hash != c.hash) {
    return invalid_argument(fmt::format(
        "the plan was made for cluster '{}' (hash {}) but the cluster given is '{}' (hash {}); "
        "make a new plan for this cluster, or pass the cluster it was made for",
        plan.cluster.name, plan.cluster.hash, c.name, c.hash));
  }
  return Status::ok();
}

// The placement rules; the structure check has already proved every device id exists.
Status check_devices(const Plan& plan, const ClusterSpec& cluster, const Labels& labels) {
  const std::vector<Device> devices = cluster_devices(cluster);
  std::map<int, std::pair<int, int>> owner;  // device -> (replica, group)
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    const Replica& rep = plan.replicas[r];
    for (size_t g = 0; g < rep.groups.size(); ++g) {
      const int ri = static_cast<int>(r);
      const int gi = static_cast<int>(g);
      const std::vector<int>& ids = rep.groups[g].devices;
      for (int d : ids) {
        auto [it, inserted] = owner.emplace(d, std::make_pair(ri, gi));
        if (!inserted) {
          const auto [r0, g0] = it->second;
          const bool same = r0 == ri && g0 == gi;
          const std::string where =
              same ? fmt::format("listed twice in {}", labels.group_with_stages(ri, gi))
                   : fmt::format("in {}, and in {}", labels.group_with_stages(r0, g0),
                                 labels.group_with_stages(ri, gi));
          return invalid_argument(
              fmt::format("device {} ({}) is used twice: {}; a device belongs to at most one group",
                          d, devices[d].type, where));
        }
      }
      // Tensor-parallel collectives run over one node's fabric and one vendor's library.
      const Device& first = devices[ids.front()];
      for (int d : ids) {
        if (devices[d].node != first.node) {
          return invalid_argument(
              fmt::format("{}, spans nodes: device {} is on node '{}' and device {} on node '{}'; "
                          "a tensor-parallel group must stay inside one node",
                          labels.group_with_stages(ri, gi), first.id,
                          cluster.nodes[first.node].name, d, cluster.nodes[devices[d].node].name));
        }
        if (devices[d].type != first.type) {
          return invalid_argument(fmt::format(
              "{}, mixes device types: device {} is {}, device {} is {}; a "
              "tensor-parallel group needs one device type",
              labels.group_with_stages(ri, gi), first.id, first.type, d, devices[d].type));
        }
      }
    }
  }
  return Status::ok();
}

// The replicas whose task graphs differ (same_task_graph): one of each kind, in plan order.
std::vector<int> distinct_orders(const Plan& plan) {
  auto fingerprint = [](const Replica& rep) {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](int64_t v) { h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull; };
    mix(rep.micro_batches);
    for (int g : rep.stage_group) mix(g);
    for (const DeviceGroupSchedule& group : rep.groups) {
      mix(static_cast<int64_t>(group.actions.size()));
      for (const Action& a : group.actions) {
        mix(static_cast<int64_t>(a.kind));
        mix(a.stage);
        mix(a.micro_batch);
      }
    }
    return h;
  };
  std::vector<int> out;
  std::map<uint64_t, std::vector<int>> seen;  // fingerprint -> replicas kept with it
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    // A run of equal replicas (thousands, in a large data-parallel plan) compares without hashing.
    if (r > 0 && same_task_graph(plan.replicas[r - 1], plan.replicas[r])) continue;
    std::vector<int>& kept = seen[fingerprint(plan.replicas[r])];
    const bool repeat = std::any_of(kept.begin(), kept.end(), [&](int k) {
      return same_task_graph(plan.replicas[k], plan.replicas[r]);
    });
    if (repeat) continue;
    kept.push_back(static_cast<int>(r));
    out.push_back(static_cast<int>(r));
  }
  return out;
}

// Kahn's algorithm over the plan's task graph (group orders, data, messages); on a cycle,
// names the groups that wait on each other. Replica r of the graph is replica replicas[r] of
// the plan `labels` names.
Status check_deadlock(const Labels& labels, const TaskGraph& graph,
                      const std::vector<int>& replicas) {
  const int32_t n = graph.size();
  std::vector<int32_t> indegree(n);
  std::vector<int32_t> ready;
  for (int32_t v = 0; v < n; ++v) {
    indegree[v] = graph.indegree(v);
    if (indegree[v] == 0) ready.push_back(v);
  }
  std::vector<bool> done(n, false);
  int32_t finished = 0;
  while (!ready.empty()) {
    const int32_t v = ready.back();
    ready.pop_back();
    done[v] = true;
    ++finished;
    for (int32_t w : graph.successors(v)) {
      if (--indegree[w] == 0) ready.push_back(w);
    }
  }
  if (finished == n) return Status::ok();

  // Each group stops at its first action that never became ready. That action's group
  // predecessor ran, so it waits on an input whose producer never ran (a message runs once
  // its producer has: the earlier messages of its channel come from earlier actions of the
  // producer's group). Follow those waits until a group repeats.
  auto blocked_at = [&](int r, int g) {
    const int32_t begin = graph.group_begin(r, g);
    for (int32_t v = begin; v < begin + graph.group_size(r, g); ++v) {
      if (!done[v]) return v;
    }
    return int32_t{-1};
  };
  int r = 0;
  int g = 0;
  while (blocked_at(r, g) < 0) {
    if (++g == graph.num_groups(r)) {
      ++r;
      g = 0;
    }
  }
  struct Wait {
    int group;
    int32_t node;  // where the group is blocked
    int32_t need;  // the unfinished action it needs
  };
  std::vector<Wait> chain;
  std::map<int, size_t> seen;  // group -> position in chain
  while (!seen.count(g)) {
    seen[g] = chain.size();
    const int32_t v = blocked_at(r, g);
    int32_t need = -1;
    for (const TaskInput& in : graph.inputs(v)) {
      if (!done[in.producer]) {
        need = in.producer;
        break;
      }
    }
    MOTLEY_CHECK(need >= 0, "a blocked action with all its inputs done");
    chain.push_back({g, v, need});
    g = graph.node(need).group;
  }
  auto action = [&](int32_t v) {
    const TaskNode& t = graph.node(v);
    return Action{action_kind(t.kind), t.stage, t.micro_batch};
  };
  std::string msg = "deadlock: ";
  const size_t start = seen[g];
  for (size_t k = start; k < chain.size(); ++k) {
    const Wait& w = chain[k];
    const int need_group = graph.node(w.need).group;
    const std::string waiter = k == start
                                   ? fmt::format("{} waits at", labels.group(replicas[r], w.group))
                                   : std::string("itself blocked at");
    msg += fmt::format("{} {}, which needs ", waiter, action_label(action(w.node)));
    if (need_group == w.group) {
      msg +=
          fmt::format("{}, listed later in the same group's order", action_label(action(w.need)));
      break;
    }
    msg += fmt::format("{} from {}", action_to_string(action(w.need)),
                       labels.group(replicas[r], need_group));
    msg += k + 1 < chain.size() ? ", " : ", which is where the cycle started";
  }
  return invalid_argument(msg);
}

Status check_memory(const Plan& plan, const ClusterSpec& cluster, const Labels& labels,
                    const ValidateOptions& options) {
  const std::vector<StageFootprint>& memory = options.stage_memory;
  if (!options.footprint && memory.size() != plan.stages.size()) {
    return invalid_argument(
        fmt::format("memory footprints are given for {} stages but the plan has {}", memory.size(),
                    plan.stages.size()));
  }
  const std::vector<Device> devices = cluster_devices(cluster);
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    const Replica& rep = plan.replicas[r];
    for (size_t g = 0; g < rep.groups.size(); ++g) {
      const DeviceGroupSchedule& group = rep.groups[g];
      // Every device of a group has the same type (check_devices) and the same share.
      const Device& device = devices[group.devices.front()];
      MOTLEY_ASSIGN_OR_RETURN(const DeviceType* type, find_device_type(device.type));
      const std::string who = fmt::format("device {} ({})", device.id, type->name);
      auto footprint = [&](int stage) {
        return options.footprint
                   ? options.footprint(static_cast<int>(r), static_cast<int>(g), stage)
                   : memory[stage];
      };
      // The group's own stages, each priced once rather than at every action.
      std::vector<StageFootprint> own(rep.stage_group.size());
      Bytes fixed;
      for (size_t s = 0; s < rep.stage_group.size(); ++s) {
        if (rep.stage_group[s] == static_cast<int>(g)) {
          own[s] = footprint(static_cast<int>(s));
          fixed += own[s].fixed;
        }
      }
      auto stage_footprint = [&](int stage) {
        return rep.stage_group[stage] == static_cast<int>(g) ? own[stage] : footprint(stage);
      };
      const RecomputedMicroBatches recomputed(plan.stages, group.actions);
      auto over = [&](Bytes need, const std::string& when, const std::string& why) {
        const int decimals = gib(need, 1) == gib(type->memory, 1) ? 3 : 1;
        return infeasible(
            fmt::format("{} needs {}{} but has {}: {}, {}", who, gib(need, decimals), when,
                        gib(type->memory, decimals),
                        labels.group_with_stages(static_cast<int>(r), static_cast<int>(g)), why));
      };
      if (fixed > type->memory) {
        return over(fixed, "", "holds the weights, gradients and optimizer state of its stages");
      }
      Bytes in_use = fixed;
      int64_t in_flight = 0;
      for (const Action& a : group.actions) {
        const StageFootprint f = stage_footprint(a.stage);
        const Bytes change(recomputed.change(a, f.activation_per_micro_batch.value(),
                                             f.recomputed_activation_per_micro_batch.value()));
        in_use += change;
        if (allocates_activations(a.kind)) ++in_flight;
        if (frees_activations(a.kind)) --in_flight;
        if ((allocates_activations(a.kind) || change.value() > 0) && in_use > type->memory) {
          return over(in_use, fmt::format(" at action {}", action_label(a)),
                      fmt::format("then holds the activations of {} micro-batches on top of {} "
                                  "of fixed memory",
                                  in_flight, gib(fixed, 1)));
        }
      }
    }
  }
  return Status::ok();
}

// global_batch == micro_batch_size x the replicas' micro-batches (a context-parallel group's
// once), in exact arithmetic: with 2^62 + 1 sequences per micro-batch, four micro-batches wrap
// around to 4 in int64_t.
Status check_global_batch(const Plan& plan) {
  const int c = std::max(plan.context_parallel, 1);
  std::optional<int64_t> micro_batches = 0;
  for (size_t r = 0; r < plan.replicas.size(); r += static_cast<size_t>(c)) {
    const int64_t m = plan.replicas[r].micro_batches;
    micro_batches = micro_batches ? checked_add(*micro_batches, m) : std::nullopt;
  }
  const std::optional<int64_t> sequences =
      micro_batches ? checked_mul(*micro_batches, plan.micro_batch_size) : std::nullopt;
  if (sequences == plan.global_batch) return Status::ok();
  std::vector<int64_t> parts;
  for (size_t r = 0; r < plan.replicas.size(); r += static_cast<size_t>(c)) {
    parts.push_back(plan.replicas[r].micro_batches);
  }
  const std::string total =
      sequences ? std::to_string(*sequences) : std::string("more than 2^63 - 1");
  const std::string runners =
      c > 1 ? fmt::format("the context-parallel groups of {} replicas", c) : "the replicas";
  return invalid_argument(fmt::format(
      "global_batch is {} but {} run ({}) micro-batches of {} = {} "
      "sequences",
      plan.global_batch, runners, fmt::join(parts, " + "), plan.micro_batch_size, total));
}

// A degree (`field`: context_parallel, expert_parallel) that groups consecutive replicas: at
// least 1, and dividing the replica count.
Status check_replica_groups(const char* field, int degree, size_t replicas) {
  if (degree < 1) {
    return invalid_argument(fmt::format("{} must be at least 1, got {}", field, degree));
  }
  if (replicas % static_cast<size_t>(degree) != 0) {
    return invalid_argument(
        fmt::format("{} {} must divide the replica count ({}): its groups are consecutive replicas",
                    field, degree, replicas));
  }
  return Status::ok();
}

// Context parallelism splits every sequence over groups of `c` consecutive replicas that run
// the same micro-batches in lockstep, their attention layers passing keys and values around
// the group's ring, TP rank k with the other members' rank k.
Status check_context_parallel(const Plan& plan, const ModelSpec& model) {
  const int c = plan.context_parallel;
  if (c == 1) return Status::ok();
  const size_t replicas = plan.replicas.size();
  MOTLEY_RETURN_IF_ERROR(check_replica_groups("context_parallel", c, replicas));
  if (plan.seq_len % (2 * static_cast<int64_t>(c)) != 0) {
    return invalid_argument(
        fmt::format("context_parallel {} splits every sequence into {} equal chunks, so seq_len "
                    "must be a multiple of {}, got {}",
                    c, 2 * c, 2 * c, plan.seq_len));
  }
  if (plan.expert_parallel > 1) {
    return invalid_argument(fmt::format(
        "context_parallel {} and expert_parallel {} both group the replicas; motley prices one "
        "of them at a time",
        c, plan.expert_parallel));
  }
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const Layer& layer = model.layers[l];
    const char* why = nullptr;
    if (layer.kind == LayerKind::kMamba) {
      why = "a Mamba scan, which carries its state along the whole sequence";
    } else if (layer.kind == LayerKind::kMeasured) {
      why = "measured, without the attention shape its key and value exchange is priced from";
    }
    if (why != nullptr) {
      return invalid_argument(
          fmt::format("context_parallel {} needs attention as every layer's sequence mixing: "
                      "layer {} ('{}') is {}",
                      c, l, layer.name, why));
    }
  }
  for (size_t first = 0; first < replicas; first += static_cast<size_t>(c)) {
    const Replica& lead = plan.replicas[first];
    for (size_t r = first + 1; r < first + static_cast<size_t>(c); ++r) {
      const Replica& rep = plan.replicas[r];
      if (rep.micro_batches != lead.micro_batches) {
        return invalid_argument(fmt::format(
            "context_parallel {}: replicas {} and {} split the same sequences, so they must run "
            "as many micro-batches: {} and {}",
            c, first, r, lead.micro_batches, rep.micro_batches));
      }
      for (size_t s = 0; s < plan.stages.size(); ++s) {
        const size_t a = lead.groups[lead.stage_group[s]].devices.size();
        const size_t b = rep.groups[rep.stage_group[s]].devices.size();
        if (a != b) {
          return invalid_argument(fmt::format(
              "context_parallel {}: replicas {} and {} exchange stage {}'s keys and values TP "
              "rank by TP rank, so its groups must be as large: {} and {} devices",
              c, first, r, s, a, b));
        }
      }
    }
  }
  return Status::ok();
}

// Expert parallelism splits every MoE layer's experts over groups of `e` consecutive replicas,
// which exchange every micro-batch's tokens in lockstep.
Status check_expert_parallel(const Plan& plan, const ModelSpec& model) {
  const int e = plan.expert_parallel;
  if (e == 1) return Status::ok();
  const size_t replicas = plan.replicas.size();
  MOTLEY_RETURN_IF_ERROR(check_replica_groups("expert_parallel", e, replicas));
  int moe_layers = 0;
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const Layer& layer = model.layers[l];
    if (layer_routed_expert_params(layer) == 0) continue;
    ++moe_layers;
    if (layer.moe->num_experts % e != 0) {
      return invalid_argument(fmt::format(
          "expert_parallel {} must divide the experts of every MoE layer: layer {} ('{}') has {}",
          e, l, layer.name, layer.moe->num_experts));
    }
  }
  if (moe_layers == 0) {
    return invalid_argument(fmt::format(
        "expert_parallel is {} but model '{}' has no mixture-of-experts layer", e, model.name));
  }
  for (size_t r = 1; r < replicas; ++r) {
    if (plan.replicas[r].micro_batches != plan.replicas[0].micro_batches) {
      return invalid_argument(fmt::format(
          "expert_parallel {} exchanges every micro-batch's tokens across the replicas in "
          "lockstep, so every replica must run as many micro-batches: replica 0 runs {}, replica "
          "{} runs {}",
          e, plan.replicas[0].micro_batches, r, plan.replicas[r].micro_batches));
    }
  }
  return Status::ok();
}

// Vocabulary shards split the model's head, or its embedding, all of its rows (the structure
// check has the rest).
Status check_vocab_shards(const Plan& plan, const ModelSpec& model) {
  const size_t n = plan.stages.size();
  const int lead = embedding_shard_count(plan.stages);
  const int tail = vocab_shard_count(plan.stages);
  struct Run {
    size_t first, last;  // stages [first, last]
    int64_t vocab;
    const char* what;
  };
  std::vector<Run> runs;
  if (lead > 0)
    runs.push_back(Run{0, static_cast<size_t>(lead) - 1, embedding_vocab(model),
                       "an embedding (a measured one states its vocab)"});
  if (tail > 0)
    runs.push_back(Run{n - tail, n - 1, head_vocab(model),
                       "a head (output layer and loss; a measured one states its "
                       "vocab)"});
  for (const Run& run : runs) {
    const Stage& st = plan.stages[run.first];
    const Layer& layer = model.layers[st.layer_begin];
    if (run.vocab == 0) {
      return invalid_argument(fmt::format(
          "field 'stages[{}].vocab_rows': stages {}-{} split layer {} ('{}') by vocabulary rows, "
          "but only {} can be split so",
          run.first, run.first, run.last, st.layer_begin, layer.name, run.what));
    }
    const Stage& last = plan.stages[run.last];
    if (last.vocab_end != run.vocab) {
      return invalid_argument(fmt::format(
          "field 'stages[{}].vocab_rows': the last shard ends at row {} but {} '{}' has a "
          "vocabulary of {}; the shards must cover every row",
          run.last, last.vocab_end, lead > 0 && run.first == 0 ? "embedding" : "head", layer.name,
          run.vocab));
    }
  }
  return Status::ok();
}

// ZeRO-2 and -3 sum every micro-batch's gradients (and gather the weights before every pass)
// across the replicas in lockstep, so every replica runs as many micro-batches.
Status check_zero_stage(const Plan& plan) {
  if (plan.zero_stage < 0 || plan.zero_stage > 3) {
    return invalid_argument(
        fmt::format("zero_stage must be 0, 1, 2 or 3, got {}", plan.zero_stage));
  }
  if (plan.zero_stage < 2) return Status::ok();
  for (size_t r = 1; r < plan.replicas.size(); ++r) {
    if (plan.replicas[r].micro_batches != plan.replicas[0].micro_batches) {
      return invalid_argument(fmt::format(
          "zero_stage {} reduces every micro-batch's gradients across the replicas in lockstep, "
          "so every replica must run as many micro-batches: replica 0 runs {}, replica {} runs {}",
          plan.zero_stage, plan.replicas[0].micro_batches, r, plan.replicas[r].micro_batches));
    }
  }
  return Status::ok();
}

}  // namespace

Status validate_plan(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster,
                     const ValidateOptions& options) {
  if (options.check_spec_hashes) MOTLEY_RETURN_IF_ERROR(check_spec_hashes(plan, model, cluster));
  if (plan.micro_batch_size <= 0) {
    return invalid_argument(
        fmt::format("micro_batch_size must be positive, got {}", plan.micro_batch_size));
  }
  if (plan.seq_len <= 0) {
    return invalid_argument(fmt::format("seq_len must be positive, got {}", plan.seq_len));
  }
  PlanBounds bounds;
  bounds.num_layers = static_cast<int>(model.layers.size());
  bounds.num_devices = static_cast<int>(cluster_devices(cluster).size());
  bounds.model = fmt::format("model '{}'", model.name);
  bounds.cluster = fmt::format("cluster '{}'", cluster.name);
  MOTLEY_RETURN_IF_ERROR(check_plan_structure(plan, bounds));
  const Labels labels(plan);
  MOTLEY_RETURN_IF_ERROR(check_devices(plan, cluster, labels));
  MOTLEY_RETURN_IF_ERROR(check_context_parallel(plan, model));
  MOTLEY_RETURN_IF_ERROR(check_global_batch(plan));
  MOTLEY_RETURN_IF_ERROR(check_zero_stage(plan));
  MOTLEY_RETURN_IF_ERROR(check_expert_parallel(plan, model));
  MOTLEY_RETURN_IF_ERROR(check_vocab_shards(plan, model));
  // Replicas share no task: the graph of one of each kind decides for all of that kind.
  const std::vector<int> distinct = distinct_orders(plan);
  Plan checked;
  const Plan* of = &plan;
  if (distinct.size() < plan.replicas.size()) {
    checked.stages = plan.stages;
    for (int r : distinct) checked.replicas.push_back(plan.replicas[r]);
    of = &checked;
  }
  TaskGraph graph;
  build_task_graph(*of, lower_plan(*of), graph);
  MOTLEY_RETURN_IF_ERROR(check_deadlock(labels, graph, distinct));
  if (!options.stage_memory.empty() || options.footprint) {
    MOTLEY_RETURN_IF_ERROR(check_memory(plan, cluster, labels, options));
  }
  return Status::ok();
}

std::vector<std::vector<std::vector<int64_t>>> peak_in_flight(const Plan& plan) {
  const size_t stages = plan.stages.size();
  std::vector<std::vector<std::vector<int64_t>>> out;
  for (const Replica& rep : plan.replicas) {
    std::vector<std::vector<int64_t>> per_group;
    for (const DeviceGroupSchedule& group : rep.groups) {
      std::vector<int64_t> now(stages, 0);
      std::vector<int64_t> peak(stages, 0);
      for (const Action& a : group.actions) {
        if (a.stage < 0 || static_cast<size_t>(a.stage) >= stages) continue;
        if (allocates_activations(a.kind)) {
          peak[a.stage] = std::max(peak[a.stage], ++now[a.stage]);
        } else if (frees_activations(a.kind)) {
          --now[a.stage];
        }
      }
      per_group.push_back(std::move(peak));
    }
    out.push_back(std::move(per_group));
  }
  return out;
}

}  // namespace motley
