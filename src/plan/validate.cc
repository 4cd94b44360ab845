// Plan validation; the rules and the dependency graph are documented in docs/plan-format.md,
// "Validation". Checks run from the cheapest (references, partition, placement) to the most
// expensive (the dependency graph, memory), and the first failure is reported.
#include "motley/plan/validate.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include "motley/plan/plan_json.h"
#include "motley/plan/spec_hash.h"

namespace motley {
namespace {

std::string join_ints(const std::vector<int>& values, const char* separator) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += separator;
    out += std::to_string(values[i]);
  }
  return out;
}

std::string action_label(const Action& a) {
  return action_to_string(a) + " (stage " + std::to_string(a.stage) + ", micro-batch " +
         std::to_string(a.micro_batch) + ")";
}

std::string stage_mb(int stage, int micro_batch) {
  return "stage " + std::to_string(stage) + ", micro-batch " + std::to_string(micro_batch);
}

// Sizes in GiB with one decimal, or three when one would make the two sides look equal.
std::string gib(Bytes b, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, b.value() / kGiB);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s + " GiB";
}

// Names groups in messages; the replica is named only when there are several.
class Labels {
 public:
  explicit Labels(const Plan& plan) : plan_(plan) {}

  std::string group(int r, int g) const {
    const Replica& rep = plan_.replicas[r];
    std::string out = plan_.replicas.size() > 1 ? "replica " + std::to_string(r) + " " : "";
    out += "device group " + std::to_string(g);
    if (g >= 0 && g < static_cast<int>(rep.groups.size())) {
      const std::vector<int>& d = rep.groups[g].devices;
      out += (d.size() == 1 ? " (device " : " (devices ") + join_ints(d, ",") + ")";
    }
    return out;
  }

  // "device group 1 (devices 2,3), which runs stage 1"
  std::string group_with_stages(int r, int g) const {
    std::vector<int> stages;
    const Replica& rep = plan_.replicas[r];
    for (size_t s = 0; s < rep.stage_group.size(); ++s) {
      if (rep.stage_group[s] == g) stages.push_back(static_cast<int>(s));
    }
    std::string out = group(r, g);
    if (!stages.empty()) {
      out += std::string(", which runs stage") + (stages.size() > 1 ? "s " : " ") +
             join_ints(stages, ", ");
    }
    return out;
  }

 private:
  const Plan& plan_;
};

Status check_spec_hashes(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster) {
  SpecRef m = model_ref(model);
  if (plan.model.hash != m.hash) {
    return invalid_argument("the plan was made for model '" + plan.model.name + "' (hash " +
                            plan.model.hash + ") but the model given is '" + m.name + "' (hash " +
                            m.hash +
                            "); make a new plan for this model, or pass the model it was made for");
  }
  SpecRef c = cluster_ref(cluster);
  if (plan.cluster.hash != c.hash) {
    return invalid_argument("the plan was made for cluster '" + plan.cluster.name + "' (hash " +
                            plan.cluster.hash + ") but the cluster given is '" + c.name +
                            "' (hash " + c.hash +
                            "); make a new plan for this cluster, or pass the cluster it was "
                            "made for");
  }
  return Status::ok();
}

Status check_stages(const Plan& plan, const ModelSpec& model) {
  if (plan.stages.empty()) return invalid_argument("the plan has no stages");
  const int layers = static_cast<int>(model.layers.size());
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const Stage& st = plan.stages[s];
    const std::string name = "stage " + std::to_string(s) + " (layers [" +
                             std::to_string(st.layer_begin) + ", " + std::to_string(st.layer_end) +
                             "))";
    const int expected_begin = s == 0 ? 0 : plan.stages[s - 1].layer_end;
    if (st.layer_begin != expected_begin) {
      return invalid_argument(
          name + " starts at layer " + std::to_string(st.layer_begin) + " but " +
          (s == 0 ? std::string("the first stage must start at layer 0")
                  : "stage " + std::to_string(s - 1) + " ends at layer " +
                        std::to_string(expected_begin) +
                        "; stages must cover the model's layers contiguously, in order"));
    }
    if (st.layer_end <= st.layer_begin) {
      return invalid_argument(name + " is empty; a stage needs at least one layer");
    }
    if (st.layer_end > layers) {
      return invalid_argument(name + " ends past the last layer: model '" + model.name + "' has " +
                              std::to_string(layers) + " layers");
    }
  }
  if (plan.stages.back().layer_end != layers) {
    return invalid_argument("the last stage ends at layer " +
                            std::to_string(plan.stages.back().layer_end) + " but model '" +
                            model.name + "' has " + std::to_string(layers) +
                            " layers; the stages must cover them all");
  }
  return Status::ok();
}

Status check_replica_shape(const Plan& plan, const Labels& labels, int r) {
  const Replica& rep = plan.replicas[r];
  const std::string name = "replica " + std::to_string(r);
  if (rep.micro_batches <= 0) {
    return invalid_argument(name + " has " + std::to_string(rep.micro_batches) +
                            " micro-batches; expected at least one");
  }
  if (rep.groups.empty()) return invalid_argument(name + " has no device groups");
  // Checked before anything is sized by the micro-batch count.
  size_t listed = 0;
  for (const DeviceGroupSchedule& group : rep.groups) listed += group.actions.size();
  if (static_cast<uint64_t>(rep.micro_batches) > listed) {
    return invalid_argument(name + " runs " + std::to_string(rep.micro_batches) +
                            " micro-batches but its groups list only " + std::to_string(listed) +
                            " actions; every micro-batch needs a forward and a backward on each "
                            "stage");
  }
  if (rep.stage_group.size() != plan.stages.size()) {
    return invalid_argument(name + " maps " + std::to_string(rep.stage_group.size()) +
                            " stages to device groups (stage_group) but the plan has " +
                            std::to_string(plan.stages.size()) + " stages");
  }
  std::vector<bool> used(rep.groups.size(), false);
  for (size_t s = 0; s < rep.stage_group.size(); ++s) {
    const int g = rep.stage_group[s];
    if (g < 0 || g >= static_cast<int>(rep.groups.size())) {
      return invalid_argument(name + " places stage " + std::to_string(s) + " on device group " +
                              std::to_string(g) + " but it has groups 0-" +
                              std::to_string(rep.groups.size() - 1));
    }
    used[g] = true;
  }
  for (size_t g = 0; g < rep.groups.size(); ++g) {
    if (rep.groups[g].devices.empty()) {
      return invalid_argument(labels.group(r, static_cast<int>(g)) + " has no devices");
    }
    if (!used[g]) {
      return invalid_argument(labels.group(r, static_cast<int>(g)) +
                              " runs no stage; remove it or place a stage on it");
    }
  }
  return Status::ok();
}

Status check_devices(const Plan& plan, const ClusterSpec& cluster, const Labels& labels) {
  const std::vector<Device> devices = cluster_devices(cluster);
  const int n = static_cast<int>(devices.size());
  std::map<int, std::pair<int, int>> owner;  // device -> (replica, group)
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    const Replica& rep = plan.replicas[r];
    for (size_t g = 0; g < rep.groups.size(); ++g) {
      const int ri = static_cast<int>(r);
      const int gi = static_cast<int>(g);
      const std::vector<int>& ids = rep.groups[g].devices;
      for (int d : ids) {
        if (d < 0 || d >= n) {
          return invalid_argument(labels.group_with_stages(ri, gi) + ", uses device " +
                                  std::to_string(d) + ", but cluster '" + cluster.name +
                                  "' has devices 0-" + std::to_string(n - 1));
        }
        auto [it, inserted] = owner.emplace(d, std::make_pair(ri, gi));
        if (!inserted) {
          const auto [r0, g0] = it->second;
          const bool same = r0 == ri && g0 == gi;
          return invalid_argument("device " + std::to_string(d) + " (" + devices[d].type +
                                  ") is used twice: " +
                                  (same ? "listed twice in " + labels.group_with_stages(ri, gi)
                                        : "in " + labels.group_with_stages(r0, g0) + ", and in " +
                                              labels.group_with_stages(ri, gi)) +
                                  "; a device belongs to at most one group");
        }
      }
      // Tensor-parallel collectives run over one node's fabric and one vendor's library.
      const Device& first = devices[ids.front()];
      for (int d : ids) {
        if (devices[d].node != first.node) {
          return invalid_argument(labels.group_with_stages(ri, gi) + ", spans nodes: device " +
                                  std::to_string(first.id) + " is on node '" +
                                  cluster.nodes[first.node].name + "' and device " +
                                  std::to_string(d) + " on node '" +
                                  cluster.nodes[devices[d].node].name +
                                  "'; a tensor-parallel group must stay inside one node");
        }
        if (devices[d].type != first.type) {
          return invalid_argument(
              labels.group_with_stages(ri, gi) + ", mixes device types: device " +
              std::to_string(first.id) + " is " + first.type + ", device " + std::to_string(d) +
              " is " + devices[d].type + "; a tensor-parallel group needs one device type");
        }
      }
    }
  }
  return Status::ok();
}

// The compute actions of one replica as graph nodes, and per (kind, stage, micro-batch) the
// node that runs it.
struct ReplicaGraph {
  struct Node {
    int group = 0;
    int index = 0;  // position in the group's action list
    Action action;
  };
  std::vector<Node> nodes;
  std::vector<int> group_offset;  // first node of each group
  int stages = 0;
  int micro_batches = 0;
  // [kind][stage * micro_batches + mb] -> node, or -1.
  std::vector<std::vector<int>> by_kind;

  int find(ActionKind kind, int stage, int mb) const {
    return by_kind[static_cast<int>(kind)][static_cast<size_t>(stage) * micro_batches + mb];
  }
  // The backward that produces the stage input's gradient: I when split, B when fused.
  int backward(int stage, int mb) const {
    int i = find(ActionKind::kBackwardInput, stage, mb);
    return i >= 0 ? i : find(ActionKind::kBackward, stage, mb);
  }
};

constexpr int kKinds = 5;

// Checks every action's references and the per-(stage, micro-batch) counts, and indexes them.
Result<ReplicaGraph> index_actions(const Plan& plan, const Labels& labels, int r) {
  const Replica& rep = plan.replicas[r];
  ReplicaGraph graph;
  graph.stages = static_cast<int>(plan.stages.size());
  graph.micro_batches = static_cast<int>(rep.micro_batches);
  const size_t cells = static_cast<size_t>(graph.stages) * graph.micro_batches;
  graph.by_kind.assign(kKinds, std::vector<int>(cells, -1));
  for (size_t g = 0; g < rep.groups.size(); ++g) {
    const int gi = static_cast<int>(g);
    graph.group_offset.push_back(static_cast<int>(graph.nodes.size()));
    const std::vector<Action>& actions = rep.groups[g].actions;
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      const std::string where =
          labels.group(r, gi) + ", action " + std::to_string(i) + " (" + action_to_string(a) + ")";
      if (a.stage < 0 || a.stage >= graph.stages) {
        return invalid_argument(where + ": stage " + std::to_string(a.stage) +
                                " does not exist; the plan has stages 0-" +
                                std::to_string(graph.stages - 1));
      }
      if (a.micro_batch < 0 || a.micro_batch >= graph.micro_batches) {
        return invalid_argument(where + ": micro-batch " + std::to_string(a.micro_batch) +
                                " does not exist; " +
                                (plan.replicas.size() > 1 ? "replica " + std::to_string(r)
                                                          : std::string("the replica")) +
                                " has micro-batches 0-" + std::to_string(graph.micro_batches - 1));
      }
      if (rep.stage_group[a.stage] != gi) {
        return invalid_argument(where + ": stage " + std::to_string(a.stage) + " runs on " +
                                labels.group(r, rep.stage_group[a.stage]) +
                                ", so its actions belong in that group's list");
      }
      if (a.kind == ActionKind::kRecompute &&
          plan.stages[a.stage].recompute == RecomputePolicy::kNone) {
        return invalid_argument(where + ": recompute of " + stage_mb(a.stage, a.micro_batch) +
                                ", but stage " + std::to_string(a.stage) +
                                " keeps its activations (recompute \"none\")");
      }
      int& slot = graph.by_kind[static_cast<int>(a.kind)]
                               [static_cast<size_t>(a.stage) * graph.micro_batches + a.micro_batch];
      if (slot >= 0) {
        return invalid_argument(labels.group(r, gi) + " lists " + action_label(a) +
                                " twice (actions " + std::to_string(graph.nodes[slot].index) +
                                " and " + std::to_string(i) + "); each runs exactly once");
      }
      slot = static_cast<int>(graph.nodes.size());
      graph.nodes.push_back({gi, static_cast<int>(i), a});
    }
  }
  // Every (stage, micro-batch) needs F and a complete backward.
  for (int s = 0; s < graph.stages; ++s) {
    for (int j = 0; j < graph.micro_batches; ++j) {
      const std::string g = labels.group(r, rep.stage_group[s]);
      const std::string sj = std::to_string(s);
      const std::string jj = std::to_string(j);
      const bool f = graph.find(ActionKind::kForward, s, j) >= 0;
      const bool in = graph.find(ActionKind::kBackwardInput, s, j) >= 0;
      const bool w = graph.find(ActionKind::kBackwardWeight, s, j) >= 0;
      const bool fused = graph.find(ActionKind::kBackward, s, j) >= 0;
      const std::string head = stage_mb(s, j) + " ";
      if (!f) {
        return invalid_argument(head + "has no forward: " + g + " must list " + sj + "F" + jj);
      }
      if (fused && (in || w)) {
        return invalid_argument(head + "has both a full backward (" + sj + "B" + jj +
                                ") and a split one (" + sj + (in ? "I" : "W") + jj + ") in " + g +
                                "; list either " + sj + "B" + jj + " or " + sj + "I" + jj +
                                " and " + sj + "W" + jj);
      }
      if (!fused && !in && !w) {
        return invalid_argument(head + "has no backward: " + g + " must list " + sj + "B" + jj +
                                ", or " + sj + "I" + jj + " and " + sj + "W" + jj);
      }
      if (in && !w) {
        return invalid_argument(head + "has an input-gradient backward (" + sj + "I" + jj +
                                ") but no weight-gradient backward: " + g + " must list " + sj +
                                "W" + jj);
      }
      if (w && !in) {
        return invalid_argument(head + "has a weight-gradient backward (" + sj + "W" + jj +
                                ") but no input-gradient backward: " + g + " must list " + sj +
                                "I" + jj + " before it");
      }
    }
  }
  return graph;
}

// The data dependencies of a node (docs/plan-format.md, "Dependencies"): the actions whose
// results it consumes. The same-stage forward comes first, so that an order that runs a
// backward before its own forward is explained by that pair.
std::vector<int> data_dependencies(const ReplicaGraph& graph, int node) {
  const Action& a = graph.nodes[node].action;
  const int s = a.stage;
  const int j = a.micro_batch;
  const int last = graph.stages - 1;
  std::vector<int> deps;
  switch (a.kind) {
    case ActionKind::kForward:
      if (s > 0) deps.push_back(graph.find(ActionKind::kForward, s - 1, j));
      break;
    case ActionKind::kRecompute:
      deps.push_back(graph.find(ActionKind::kForward, s, j));
      break;
    case ActionKind::kBackwardInput:
    case ActionKind::kBackward: {
      deps.push_back(graph.find(ActionKind::kForward, s, j));
      if (s < last) deps.push_back(graph.backward(s + 1, j));
      const int recompute = graph.find(ActionKind::kRecompute, s, j);
      if (recompute >= 0) deps.push_back(recompute);
      break;
    }
    case ActionKind::kBackwardWeight:
      deps.push_back(graph.find(ActionKind::kBackwardInput, s, j));
      break;
  }
  return deps;
}

// Kahn's algorithm over group order + data dependencies; on a cycle, names the groups that
// wait on each other.
Status check_deadlock(const Plan& plan, const Labels& labels, int r, const ReplicaGraph& graph) {
  const size_t n = graph.nodes.size();
  std::vector<std::vector<int>> successors(n);
  std::vector<int> indegree(n, 0);
  auto add_edge = [&](int from, int to) {
    MOTLEY_CHECK(from >= 0, "a dependency is missing after the count check");
    successors[from].push_back(to);
    ++indegree[to];
  };
  for (size_t v = 0; v < n; ++v) {
    if (graph.nodes[v].index > 0) add_edge(static_cast<int>(v) - 1, static_cast<int>(v));
    for (int d : data_dependencies(graph, static_cast<int>(v))) add_edge(d, static_cast<int>(v));
  }
  std::vector<int> ready;
  for (size_t v = 0; v < n; ++v) {
    if (indegree[v] == 0) ready.push_back(static_cast<int>(v));
  }
  std::vector<bool> done(n, false);
  size_t finished = 0;
  while (!ready.empty()) {
    const int v = ready.back();
    ready.pop_back();
    done[v] = true;
    ++finished;
    for (int w : successors[v]) {
      if (--indegree[w] == 0) ready.push_back(w);
    }
  }
  if (finished == n) return Status::ok();

  // Each group stops at its first action that never became ready. That action's group
  // predecessor ran, so it waits on a data dependency; follow those until a group repeats.
  const Replica& rep = plan.replicas[r];
  auto blocked_at = [&](int g) {
    const int begin = graph.group_offset[g];
    const int end = begin + static_cast<int>(rep.groups[g].actions.size());
    for (int v = begin; v < end; ++v) {
      if (!done[v]) return v;
    }
    return -1;
  };
  struct Wait {
    int group;
    int node;  // where the group is blocked
    int need;  // the unfinished action it needs
  };
  std::vector<Wait> chain;
  std::map<int, size_t> seen;  // group -> position in chain
  int g = 0;
  while (blocked_at(g) < 0) ++g;
  while (!seen.count(g)) {
    seen[g] = chain.size();
    const int v = blocked_at(g);
    int need = -1;
    for (int d : data_dependencies(graph, v)) {
      if (!done[d]) {
        need = d;
        break;
      }
    }
    MOTLEY_CHECK(need >= 0, "a blocked action with all its dependencies done");
    chain.push_back({g, v, need});
    g = graph.nodes[need].group;
  }
  std::string msg = "deadlock: ";
  const size_t start = seen[g];
  for (size_t k = start; k < chain.size(); ++k) {
    const Wait& w = chain[k];
    const Action& need = graph.nodes[w.need].action;
    msg += (k == start ? labels.group(r, w.group) + " waits at " : "itself blocked at ") +
           action_label(graph.nodes[w.node].action) + ", which needs ";
    if (graph.nodes[w.need].group == w.group) {
      msg += action_label(need) + ", listed later in the same group's order";
      break;
    }
    msg += action_to_string(need) + " from " + labels.group(r, graph.nodes[w.need].group);
    msg += k + 1 < chain.size() ? ", " : ", which is where the cycle started";
  }
  return invalid_argument(msg);
}

Status check_memory(const Plan& plan, const ClusterSpec& cluster, const Labels& labels,
                    const ValidateOptions& options) {
  const std::vector<StageFootprint>& memory = options.stage_memory;
  if (!options.footprint && memory.size() != plan.stages.size()) {
    return invalid_argument("memory footprints are given for " + std::to_string(memory.size()) +
                            " stages but the plan has " + std::to_string(plan.stages.size()));
  }
  const std::vector<Device> devices = cluster_devices(cluster);
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    const Replica& rep = plan.replicas[r];
    for (size_t g = 0; g < rep.groups.size(); ++g) {
      const DeviceGroupSchedule& group = rep.groups[g];
      // Every device of a group has the same type (check_devices) and the same share.
      const Device& device = devices[group.devices.front()];
      MOTLEY_ASSIGN_OR_RETURN(const DeviceType* type, find_device_type(device.type));
      const std::string who = "device " + std::to_string(device.id) + " (" + type->name + ")";
      auto footprint = [&](int stage) {
        return options.footprint
                   ? options.footprint(static_cast<int>(r), static_cast<int>(g), stage)
                   : memory[stage];
      };
      Bytes fixed;
      for (size_t s = 0; s < rep.stage_group.size(); ++s) {
        if (rep.stage_group[s] == static_cast<int>(g))
          fixed += footprint(static_cast<int>(s)).fixed;
      }
      auto over = [&](Bytes need, const std::string& when, const std::string& why) {
        const int decimals = gib(need, 1) == gib(type->memory, 1) ? 3 : 1;
        return infeasible(who + " needs " + gib(need, decimals) + when + " but has " +
                          gib(type->memory, decimals) + ": " +
                          labels.group_with_stages(static_cast<int>(r), static_cast<int>(g)) +
                          ", " + why);
      };
      if (fixed > type->memory) {
        return over(fixed, "", "holds the weights, gradients and optimizer state of its stages");
      }
      Bytes in_use = fixed;
      int64_t in_flight = 0;
      for (const Action& a : group.actions) {
        if (a.kind == ActionKind::kForward) {
          in_use += footprint(a.stage).activation_per_micro_batch;
          ++in_flight;
          if (in_use > type->memory) {
            return over(in_use, " at action " + action_label(a),
                        "then holds the activations of " + std::to_string(in_flight) +
                            " micro-batches on top of " + gib(fixed, 1) + " of fixed memory");
          }
        } else if (a.kind == ActionKind::kBackwardWeight || a.kind == ActionKind::kBackward) {
          in_use -= footprint(a.stage).activation_per_micro_batch;
          --in_flight;
        }
      }
    }
  }
  return Status::ok();
}

}  // namespace

Status validate_plan(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster,
                     const ValidateOptions& options) {
  if (options.check_spec_hashes) MOTLEY_RETURN_IF_ERROR(check_spec_hashes(plan, model, cluster));
  if (plan.micro_batch_size <= 0) {
    return invalid_argument("micro_batch_size must be positive, got " +
                            std::to_string(plan.micro_batch_size));
  }
  if (plan.seq_len <= 0) {
    return invalid_argument("seq_len must be positive, got " + std::to_string(plan.seq_len));
  }
  MOTLEY_RETURN_IF_ERROR(check_stages(plan, model));
  if (plan.replicas.empty()) return invalid_argument("the plan has no replicas");
  const Labels labels(plan);
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    MOTLEY_RETURN_IF_ERROR(check_replica_shape(plan, labels, static_cast<int>(r)));
  }
  MOTLEY_RETURN_IF_ERROR(check_devices(plan, cluster, labels));
  int64_t micro_batches = 0;
  for (const Replica& rep : plan.replicas) micro_batches += rep.micro_batches;
  if (plan.global_batch != micro_batches * plan.micro_batch_size) {
    std::string parts;
    for (size_t r = 0; r < plan.replicas.size(); ++r) {
      parts += (r > 0 ? " + " : "") + std::to_string(plan.replicas[r].micro_batches);
    }
    return invalid_argument("global_batch is " + std::to_string(plan.global_batch) +
                            " but the replicas run (" + parts + ") micro-batches of " +
                            std::to_string(plan.micro_batch_size) + " = " +
                            std::to_string(micro_batches * plan.micro_batch_size) + " sequences");
  }
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    const int ri = static_cast<int>(r);
    MOTLEY_ASSIGN_OR_RETURN(ReplicaGraph graph, index_actions(plan, labels, ri));
    MOTLEY_RETURN_IF_ERROR(check_deadlock(plan, labels, ri, graph));
  }
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
        if (a.kind == ActionKind::kForward) {
          peak[a.stage] = std::max(peak[a.stage], ++now[a.stage]);
        } else if (a.kind == ActionKind::kBackwardWeight || a.kind == ActionKind::kBackward) {
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
