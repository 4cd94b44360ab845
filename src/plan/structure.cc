// The structure check; docs/plan-format.md, "Validation", lists the rules in the order they
// are checked. The cheapest come first, and nothing is sized by a count before that count has
// been checked against what the plan lists.
#include "motley/plan/structure.h"

#include <algorithm>

#include "labels.h"
#include "motley/plan/plan_json.h"

namespace motley {
namespace {

using plan_labels::action_label;
using plan_labels::action_path;
using plan_labels::field;
using plan_labels::group_path;
using plan_labels::ids;
using plan_labels::Labels;
using plan_labels::replica_path;
using plan_labels::stage_mb;

// Task ids downstream (task_graph.h) are 32-bit.
constexpr size_t kMaxActions = size_t{1} << 30;

std::string stage_path(size_t s) { return "stages[" + std::to_string(s) + "]"; }

Status check_stages(const Plan& plan, const PlanBounds& bounds) {
  if (plan.stages.empty()) return invalid_argument(field("stages", "the plan has no stages"));
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const Stage& st = plan.stages[s];
    const std::string name = "stage " + std::to_string(s) + " (layers [" +
                             std::to_string(st.layer_begin) + ", " + std::to_string(st.layer_end) +
                             "))";
    const int expected_begin = s == 0 ? 0 : plan.stages[s - 1].layer_end;
    if (st.layer_begin != expected_begin) {
      return invalid_argument(field(
          stage_path(s) + ".layer_begin",
          name + " starts at layer " + std::to_string(st.layer_begin) + " but " +
              (s == 0 ? std::string("the first stage must start at layer 0")
                      : "stage " + std::to_string(s - 1) + " ends at layer " +
                            std::to_string(expected_begin) +
                            "; stages must cover the model's layers contiguously, in order")));
    }
    if (st.layer_end <= st.layer_begin) {
      return invalid_argument(
          field(stage_path(s), name + " is empty; a stage needs at least one layer"));
    }
    if (bounds.num_layers >= 0 && st.layer_end > bounds.num_layers) {
      return invalid_argument(field(stage_path(s) + ".layer_end",
                                    name + " ends past the last layer: " + bounds.model + " has " +
                                        std::to_string(bounds.num_layers) + " layers"));
    }
  }
  if (bounds.num_layers >= 0 && plan.stages.back().layer_end != bounds.num_layers) {
    return invalid_argument(field(stage_path(plan.stages.size() - 1) + ".layer_end",
                                  "the last stage ends at layer " +
                                      std::to_string(plan.stages.back().layer_end) + " but " +
                                      bounds.model + " has " + std::to_string(bounds.num_layers) +
                                      " layers; the stages must cover them all"));
  }
  return Status::ok();
}

Status check_replica_shape(const Plan& plan, const PlanBounds& bounds, const Labels& labels,
                           int r) {
  const Replica& rep = plan.replicas[r];
  const std::string name = "replica " + std::to_string(r);
  const std::string path = replica_path(r);
  if (rep.micro_batches <= 0) {
    return invalid_argument(
        field(path + ".micro_batches", name + " has " + std::to_string(rep.micro_batches) +
                                           " micro-batches; expected at least one"));
  }
  if (rep.groups.empty()) {
    return invalid_argument(field(path + ".groups", name + " has no device groups"));
  }
  size_t listed = 0;
  for (const DeviceGroupSchedule& group : rep.groups) listed += group.actions.size();
  if (static_cast<uint64_t>(rep.micro_batches) > listed) {
    return invalid_argument(
        field(path + ".micro_batches",
              name + " runs " + std::to_string(rep.micro_batches) +
                  " micro-batches but its groups list only " + std::to_string(listed) +
                  " actions; every micro-batch needs a forward and a backward on each stage"));
  }
  if (rep.stage_group.size() != plan.stages.size()) {
    return invalid_argument(field(path + ".stage_group",
                                  name + " maps " + std::to_string(rep.stage_group.size()) +
                                      " stages to device groups (stage_group) but the plan has " +
                                      std::to_string(plan.stages.size()) + " stages"));
  }
  std::vector<bool> used(rep.groups.size(), false);
  for (size_t s = 0; s < rep.stage_group.size(); ++s) {
    const int g = rep.stage_group[s];
    if (g < 0 || g >= static_cast<int>(rep.groups.size())) {
      return invalid_argument(field(
          path + ".stage_group[" + std::to_string(s) + "]",
          name + " places stage " + std::to_string(s) + " on device group " + std::to_string(g) +
              " but it has " + ids("group", "groups", static_cast<int64_t>(rep.groups.size()))));
    }
    used[g] = true;
  }
  for (size_t gi = 0; gi < rep.groups.size(); ++gi) {
    const int g = static_cast<int>(gi);
    const std::vector<int>& devices = rep.groups[g].devices;
    if (devices.empty()) {
      return invalid_argument(
          field(group_path(r, g) + ".devices", labels.group(r, g) + " has no devices"));
    }
    if (!used[g]) {
      return invalid_argument(
          field(group_path(r, g),
                labels.group(r, g) + " runs no stage; remove it or place a stage on it"));
    }
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i] < 0 || devices[i] >= bounds.num_devices) {
        return invalid_argument(field(group_path(r, g) + ".devices[" + std::to_string(i) + "]",
                                      labels.group_with_stages(r, g) + ", uses device " +
                                          std::to_string(devices[i]) + ", but " + bounds.cluster +
                                          " has " + ids("device", "devices", bounds.num_devices)));
      }
    }
  }
  return Status::ok();
}

constexpr uint8_t bit(ActionKind kind) {
  return static_cast<uint8_t>(1u << static_cast<int>(kind));
}

// Why action `i` of group `g` names something that is not there. Messages are built only
// here, once a fault is known: the check itself runs on every action of every plan a tuner
// simulates.
Status action_fault(const Plan& plan, const Labels& labels, int r, int g, size_t i) {
  const Replica& rep = plan.replicas[r];
  const int stages = static_cast<int>(plan.stages.size());
  const Action& a = rep.groups[g].actions[i];
  const std::string path = action_path(r, g, static_cast<int>(i));
  const std::string where = action_to_string(a) + " on " + labels.group(r, g) + ": ";
  if (a.stage < 0 || a.stage >= stages) {
    return invalid_argument(field(path + ".stage", where + "stage " + std::to_string(a.stage) +
                                                       " does not exist; the plan has " +
                                                       ids("stage", "stages", stages)));
  }
  if (a.micro_batch < 0 || a.micro_batch >= rep.micro_batches) {
    return invalid_argument(
        field(path + ".micro_batch", where + "micro-batch " + std::to_string(a.micro_batch) +
                                         " does not exist; " + labels.replica(r) + " has " +
                                         ids("micro-batch", "micro-batches", rep.micro_batches)));
  }
  if (rep.stage_group[a.stage] != g) {
    return invalid_argument(
        field(path + ".stage", where + "stage " + std::to_string(a.stage) + " runs on " +
                                   labels.group(r, rep.stage_group[a.stage]) +
                                   ", so its actions belong in that group's list"));
  }
  return invalid_argument(field(path, where + "recompute of " + stage_mb(a.stage, a.micro_batch) +
                                          ", but stage " + std::to_string(a.stage) +
                                          " keeps its activations (recompute \"none\")"));
}

// Each action's references, then per (stage, micro-batch) the kinds listed.
Status check_actions(const Plan& plan, const Labels& labels, int r, std::vector<uint8_t>& seen) {
  const Replica& rep = plan.replicas[r];
  const int stages = static_cast<int>(plan.stages.size());
  const int64_t micro_batches = rep.micro_batches;
  seen.assign(static_cast<size_t>(stages) * micro_batches, 0);
  for (size_t gi = 0; gi < rep.groups.size(); ++gi) {
    const int g = static_cast<int>(gi);
    const std::vector<Action>& actions = rep.groups[g].actions;
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      if (a.stage < 0 || a.stage >= stages || a.micro_batch < 0 || a.micro_batch >= micro_batches ||
          rep.stage_group[a.stage] != g ||
          (a.kind == ActionKind::kRecompute &&
           plan.stages[a.stage].recompute == RecomputePolicy::kNone)) {
        return action_fault(plan, labels, r, g, i);
      }
      uint8_t& kinds = seen[static_cast<size_t>(a.stage) * micro_batches + a.micro_batch];
      if (kinds & bit(a.kind)) {
        // The earlier copy is on this group too: the stage runs nowhere else.
        const size_t first =
            static_cast<size_t>(std::find(actions.begin(), actions.end(), a) - actions.begin());
        return invalid_argument(field(action_path(r, g, static_cast<int>(i)),
                                      labels.group(r, g) + " lists " + action_label(a) +
                                          " twice (actions " + std::to_string(first) + " and " +
                                          std::to_string(i) + "); each runs exactly once"));
      }
      kinds |= bit(a.kind);
    }
  }
  for (int s = 0; s < stages; ++s) {
    for (int j = 0; j < micro_batches; ++j) {
      const uint8_t kinds = seen[static_cast<size_t>(s) * micro_batches + j];
      const bool f = kinds & bit(ActionKind::kForward);
      const bool in = kinds & bit(ActionKind::kBackwardInput);
      const bool w = kinds & bit(ActionKind::kBackwardWeight);
      const bool fused = kinds & bit(ActionKind::kBackward);
      if (f && (fused ? !in && !w : in && w)) continue;
      const int g = rep.stage_group[s];
      const std::string path = group_path(r, g) + ".actions";
      const std::string group = labels.group(r, g);
      const std::string sj = std::to_string(s);
      const std::string jj = std::to_string(j);
      const std::string head = stage_mb(s, j) + " ";
      if (!f) {
        return invalid_argument(
            field(path, head + "has no forward: " + group + " must list " + sj + "F" + jj));
      }
      if (fused) {
        return invalid_argument(field(path, head + "has both a full backward (" + sj + "B" + jj +
                                                ") and a split one (" + sj + (in ? "I" : "W") + jj +
                                                ") in " + group + "; list either " + sj + "B" + jj +
                                                " or " + sj + "I" + jj + " and " + sj + "W" + jj));
      }
      if (!in && !w) {
        return invalid_argument(field(path, head + "has no backward: " + group + " must list " +
                                                sj + "B" + jj + ", or " + sj + "I" + jj + " and " +
                                                sj + "W" + jj));
      }
      if (in) {
        return invalid_argument(field(path, head + "has an input-gradient backward (" + sj + "I" +
                                                jj + ") but no weight-gradient backward: " + group +
                                                " must list " + sj + "W" + jj));
      }
      return invalid_argument(field(path, head + "has a weight-gradient backward (" + sj + "W" +
                                              jj + ") but no input-gradient backward: " + group +
                                              " must list " + sj + "I" + jj + " before it"));
    }
  }
  return Status::ok();
}

}  // namespace

Status StructureChecker::check(const Plan& plan, const PlanBounds& bounds) {
  MOTLEY_RETURN_IF_ERROR(check_stages(plan, bounds));
  if (plan.replicas.empty()) {
    return invalid_argument(field("replicas", "the plan has no replicas"));
  }
  const Labels labels(plan);
  size_t listed = 0;
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    MOTLEY_RETURN_IF_ERROR(check_replica_shape(plan, bounds, labels, static_cast<int>(r)));
    for (const DeviceGroupSchedule& group : plan.replicas[r].groups) {
      listed += group.actions.size();
    }
  }
  if (listed > kMaxActions) {
    return invalid_argument(field("replicas", "the plan lists " + std::to_string(listed) +
                                                  " actions; at most " +
                                                  std::to_string(kMaxActions) + " are supported"));
  }
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    MOTLEY_RETURN_IF_ERROR(check_actions(plan, labels, static_cast<int>(r), seen_));
  }
  return Status::ok();
}

Status check_plan_structure(const Plan& plan, const PlanBounds& bounds) {
  StructureChecker checker;
  return checker.check(plan, bounds);
}

}  // namespace motley
