// The structure check; docs/plan-format.md, "Validation", lists the rules in the order they
// are checked. The cheapest come first, and nothing is sized by a count before that count has
// been checked against what the plan lists.
#include "motley/plan/structure.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include "labels.h"
#include "motley/core/checked_math.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/task_graph.h"

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

std::string stage_path(size_t s) { return fmt::format("stages[{}]", s); }

// A vocabulary shard's own rules (plan.h, Stage): a run of shards over the embedding at the
// plan's start, or over the head at its end. Whether their layers are an embedding and a head
// and their rows end at the vocabularies needs the model (validate_plan).
Status check_vocab_shard(const Plan& plan, size_t s, const std::string& name) {
  const Stage& st = plan.stages[s];
  const bool leading = s == 0 || (plan.stages[s - 1].is_vocab_shard() &&
                                  plan.stages[s - 1].layer_begin == 0 && st.layer_begin == 0);
  if (!st.is_vocab_shard()) {
    if (s > 0 && plan.stages[s - 1].is_vocab_shard() && plan.stages[s - 1].layer_begin != 0) {
      return invalid_argument(
          field(stage_path(s), fmt::format("{} follows vocabulary shard {} of the head; the head's "
                                           "shards must be the plan's last stages",
                                           name, s - 1)));
    }
    return Status::ok();
  }
  const std::string path = fmt::format("{}.vocab_rows", stage_path(s));
  if (st.layer_end != st.layer_begin + 1) {
    return invalid_argument(field(
        path, fmt::format("{} is a vocabulary shard of {} layers; a shard holds one layer (the "
                          "embedding or the head)",
                          name, st.layer_end - st.layer_begin)));
  }
  if (st.recompute != RecomputePolicy::kNone) {
    return invalid_argument(
        field(fmt::format("{}.recompute", stage_path(s)),
              fmt::format("{} is a vocabulary shard; shards keep their activations (recompute "
                          "\"none\")",
                          name)));
  }
  const bool continues = s > 0 && plan.stages[s - 1].is_vocab_shard() &&
                         plan.stages[s - 1].layer_begin == st.layer_begin;
  if (!leading && !continues && plan.stages[s - 1].is_vocab_shard()) {
    return invalid_argument(field(
        path, fmt::format("{} is a shard of the head right after the embedding's shards; a stage "
                          "of the model's other layers must come between them",
                          name)));
  }
  const int64_t expected = continues ? plan.stages[s - 1].vocab_end : 0;
  if (st.vocab_begin != expected) {
    return invalid_argument(field(
        path, fmt::format("{} starts at vocabulary row {} but {}", name, st.vocab_begin,
                          continues ? fmt::format("shard {} ends at row {}; the shards must cover "
                                                  "the vocabulary contiguously, in order",
                                                  s - 1, expected)
                                    : std::string("the first shard must start at row 0"))));
  }
  return Status::ok();
}

// Per-layer recompute (plan.h, Stage::recompute_layers): the stage's own layers, ascending,
// each once, with the stage's policy for the others not already full.
Status check_recompute_layers(const Stage& st, size_t s, const std::string& name) {
  if (st.recompute_layers.empty()) return Status::ok();
  const std::string path = fmt::format("{}.recompute_layers", stage_path(s));
  if (st.recompute == RecomputePolicy::kFull) {
    return invalid_argument(
        field(path, fmt::format("{} recomputes all its layers (recompute \"full\"); list "
                                "recompute_layers only with \"none\" or \"selective\"",
                                name)));
  }
  if (st.is_vocab_shard()) {
    return invalid_argument(
        field(path, fmt::format("{} is a vocabulary shard; shards keep their activations", name)));
  }
  for (size_t i = 0; i < st.recompute_layers.size(); ++i) {
    const int l = st.recompute_layers[i];
    if (l < st.layer_begin || l >= st.layer_end) {
      return invalid_argument(field(fmt::format("{}[{}]", path, i),
                                    fmt::format("layer {} is not one of {}'s layers", l, name)));
    }
    if (i > 0 && l <= st.recompute_layers[i - 1]) {
      return invalid_argument(
          field(fmt::format("{}[{}]", path, i),
                fmt::format("layer {} after layer {}; list each layer once, in ascending order", l,
                            st.recompute_layers[i - 1])));
    }
  }
  return Status::ok();
}

Status check_stages(const Plan& plan, const PlanBounds& bounds) {
  if (plan.stages.empty()) return invalid_argument(field("stages", "the plan has no stages"));
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const Stage& st = plan.stages[s];
    const std::string name =
        fmt::format("stage {} (layers [{}, {}))", s, st.layer_begin, st.layer_end);
    // Vocabulary shards run side by side, each over its run's one layer: a shard may start
    // where the shard before it starts.
    const bool shard_after_shard = s > 0 && st.is_vocab_shard() &&
                                   plan.stages[s - 1].is_vocab_shard() &&
                                   st.layer_begin == plan.stages[s - 1].layer_begin;
    const int expected_begin = s == 0              ? 0
                               : shard_after_shard ? plan.stages[s - 1].layer_begin
                                                   : plan.stages[s - 1].layer_end;
    if (st.layer_begin != expected_begin) {
      const std::string why =
          s == 0 ? std::string("the first stage must start at layer 0")
                 : fmt::format(
                       "stage {} ends at layer {}; stages must cover the model's layers "
                       "contiguously, in order",
                       s - 1, expected_begin);
      return invalid_argument(
          field(fmt::format("{}.layer_begin", stage_path(s)),
                fmt::format("{} starts at layer {} but {}", name, st.layer_begin, why)));
    }
    if (st.layer_end <= st.layer_begin) {
      return invalid_argument(
          field(stage_path(s), fmt::format("{} is empty; a stage needs at least one layer", name)));
    }
    if (bounds.num_layers >= 0 && st.layer_end > bounds.num_layers) {
      return invalid_argument(field(fmt::format("{}.layer_end", stage_path(s)),
                                    fmt::format("{} ends past the last layer: {} has {} layers",
                                                name, bounds.model, bounds.num_layers)));
    }
    MOTLEY_RETURN_IF_ERROR(check_vocab_shard(plan, s, name));
    MOTLEY_RETURN_IF_ERROR(check_recompute_layers(st, s, name));
  }
  const int lead = embedding_shard_count(plan.stages);
  const int tail = vocab_shard_count(plan.stages);
  for (const auto& [shards, what, at] : {std::tuple{lead, "embedding", size_t{0}},
                                         std::tuple{tail, "head", plan.stages.size() - 1}}) {
    if (shards == 1) {
      return invalid_argument(field(
          fmt::format("{}.vocab_rows", stage_path(at)),
          fmt::format("the {} is split into one vocabulary shard; list at least two shards or "
                      "drop vocab_rows",
                      what)));
    }
    if (shards > kMaxVocabShards) {
      return invalid_argument(
          field(fmt::format("{}.vocab_rows", stage_path(at)),
                fmt::format("the {} is split into {} vocabulary shards; at most {} are supported",
                            what, shards, kMaxVocabShards)));
    }
  }
  if (lead > 0 && lead == static_cast<int>(plan.stages.size())) {
    return invalid_argument(
        field("stages",
              "every stage is a vocabulary shard of the embedding; the model's other layers "
              "need stages of their own"));
  }
  if (bounds.num_layers >= 0 && plan.stages.back().layer_end != bounds.num_layers) {
    return invalid_argument(
        field(fmt::format("{}.layer_end", stage_path(plan.stages.size() - 1)),
              fmt::format("the last stage ends at layer {} but {} has {} layers; the stages must "
                          "cover them all",
                          plan.stages.back().layer_end, bounds.model, bounds.num_layers)));
  }
  return Status::ok();
}

Status check_replica_shape(const Plan& plan, const PlanBounds& bounds, const Labels& labels,
                           int r) {
  const Replica& rep = plan.replicas[r];
  const std::string name = fmt::format("replica {}", r);
  const std::string path = replica_path(r);
  if (rep.micro_batches <= 0) {
    return invalid_argument(field(
        fmt::format("{}.micro_batches", path),
        fmt::format("{} has {} micro-batches; expected at least one", name, rep.micro_batches)));
  }
  if (rep.groups.empty()) {
    return invalid_argument(
        field(fmt::format("{}.groups", path), fmt::format("{} has no device groups", name)));
  }
  size_t listed = 0;
  for (const DeviceGroupSchedule& group : rep.groups) listed += group.actions.size();
  // Every (stage, micro-batch) needs a forward and a backward, and check_actions sizes a table
  // by their number: a count that the listed actions cannot cover is refused before that.
  const std::optional<int64_t> pairs =
      checked_mul(rep.micro_batches, static_cast<int64_t>(plan.stages.size()));
  if (!pairs || static_cast<uint64_t>(*pairs) > listed) {
    return invalid_argument(
        field(fmt::format("{}.micro_batches", path),
              fmt::format("{} runs {} micro-batches but its groups list only {} actions; every "
                          "micro-batch needs a forward and a backward on each stage",
                          name, rep.micro_batches, listed)));
  }
  if (rep.stage_group.size() != plan.stages.size()) {
    return invalid_argument(field(fmt::format("{}.stage_group", path),
                                  fmt::format("{} maps {} stages to device groups (stage_group) "
                                              "but the plan has {} stages",
                                              name, rep.stage_group.size(), plan.stages.size())));
  }
  std::vector<bool> used(rep.groups.size(), false);
  for (size_t s = 0; s < rep.stage_group.size(); ++s) {
    const int g = rep.stage_group[s];
    if (g < 0 || g >= static_cast<int>(rep.groups.size())) {
      return invalid_argument(
          field(fmt::format("{}.stage_group[{}]", path, s),
                fmt::format("{} places stage {} on device group {} but it has {}", name, s, g,
                            ids("group", "groups", static_cast<int64_t>(rep.groups.size())))));
    }
    used[g] = true;
  }
  // Each run's shards on groups of their own (a group may hold a shard of each run).
  const size_t n = plan.stages.size();
  const size_t lead = static_cast<size_t>(embedding_shard_count(plan.stages));
  const size_t tail = static_cast<size_t>(vocab_shard_count(plan.stages));
  for (const auto& [first, last] : {std::pair{size_t{0}, lead}, std::pair{n - tail, n}}) {
    for (size_t s = first; s < last; ++s) {
      for (size_t t = first; t < s; ++t) {
        if (rep.stage_group[t] == rep.stage_group[s]) {
          return invalid_argument(field(
              fmt::format("{}.stage_group[{}]", path, s),
              fmt::format("{} places vocabulary shards {} and {} both on device group {}; each "
                          "shard needs a group of its own",
                          name, t, s, rep.stage_group[s])));
        }
      }
    }
  }
  for (size_t gi = 0; gi < rep.groups.size(); ++gi) {
    const int g = static_cast<int>(gi);
    const std::vector<int>& devices = rep.groups[g].devices;
    if (devices.empty()) {
      return invalid_argument(field(fmt::format("{}.devices", group_path(r, g)),
                                    fmt::format("{} has no devices", labels.group(r, g))));
    }
    if (!used[g]) {
      return invalid_argument(field(
          group_path(r, g),
          fmt::format("{} runs no stage; remove it or place a stage on it", labels.group(r, g))));
    }
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i] < 0 || devices[i] >= bounds.num_devices) {
        return invalid_argument(field(
            fmt::format("{}.devices[{}]", group_path(r, g), i),
            fmt::format("{}, uses device {}, but {} has {}", labels.group_with_stages(r, g),
                        devices[i], bounds.cluster, ids("device", "devices", bounds.num_devices))));
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
  const std::string where = fmt::format("{} on {}", action_to_string(a), labels.group(r, g));
  if (a.stage < 0 || a.stage >= stages) {
    return invalid_argument(field(fmt::format("{}.stage", path),
                                  fmt::format("{}: stage {} does not exist; the plan has {}", where,
                                              a.stage, ids("stage", "stages", stages))));
  }
  if (a.micro_batch < 0 || a.micro_batch >= rep.micro_batches) {
    return invalid_argument(field(
        fmt::format("{}.micro_batch", path),
        fmt::format("{}: micro-batch {} does not exist; {} has {}", where, a.micro_batch,
                    labels.replica(r), ids("micro-batch", "micro-batches", rep.micro_batches))));
  }
  if (rep.stage_group[a.stage] != g) {
    return invalid_argument(
        field(fmt::format("{}.stage", path),
              fmt::format("{}: stage {} runs on {}, so its actions belong in that group's list",
                          where, a.stage, labels.group(r, rep.stage_group[a.stage]))));
  }
  return invalid_argument(
      field(path, fmt::format("{}: recompute of {}, but stage {} is a vocabulary shard, which "
                              "keeps its activations",
                              where, stage_mb(a.stage, a.micro_batch), a.stage)));
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
          (a.kind == ActionKind::kRecompute && plan.stages[a.stage].is_vocab_shard())) {
        return action_fault(plan, labels, r, g, i);
      }
      uint8_t& kinds = seen[static_cast<size_t>(a.stage) * micro_batches + a.micro_batch];
      if (kinds & bit(a.kind)) {
        // The earlier copy is on this group too: the stage runs nowhere else.
        const size_t first =
            static_cast<size_t>(std::find(actions.begin(), actions.end(), a) - actions.begin());
        return invalid_argument(field(action_path(r, g, static_cast<int>(i)),
                                      fmt::format("{} lists {} twice (actions {} and {}); each "
                                                  "runs exactly once",
                                                  labels.group(r, g), action_label(a), first, i)));
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
      // In the messages below {0} names the stage and micro-batch, {1}{letter}{2} an action
      // ("0F3"), {3} the device group.
      const std::string path = fmt::format("{}.actions", group_path(r, g));
      const std::string group = labels.group(r, g);
      const std::string what = stage_mb(s, j);
      if (!f) {
        return invalid_argument(field(
            path, fmt::format("{0} has no forward: {3} must list {1}F{2}", what, s, j, group)));
      }
      if (fused) {
        return invalid_argument(field(
            path, fmt::format("{0} has both a full backward ({1}B{2}) and a split one "
                              "({1}{4}{2}) in {3}; list either {1}B{2} or {1}I{2} and {1}W{2}",
                              what, s, j, group, in ? "I" : "W")));
      }
      if (!in && !w) {
        return invalid_argument(field(
            path, fmt::format("{0} has no backward: {3} must list {1}B{2}, or {1}I{2} and {1}W{2}",
                              what, s, j, group)));
      }
      if (in) {
        return invalid_argument(
            field(path, fmt::format("{0} has an input-gradient backward ({1}I{2}) but no "
                                    "weight-gradient backward: {3} must list {1}W{2}",
                                    what, s, j, group)));
      }
      return invalid_argument(
          field(path, fmt::format("{0} has a weight-gradient backward ({1}W{2}) but no "
                                  "input-gradient backward: {3} must list {1}I{2} before it",
                                  what, s, j, group)));
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
  if (listed > static_cast<size_t>(kMaxPlanActions)) {
    return invalid_argument(field("replicas", fmt::format("the plan lists {} actions; at most {} "
                                                          "are supported",
                                                          listed, kMaxPlanActions)));
  }
  // check_actions reads only the replica's stage map, micro-batch count and orders besides the
  // plan's stages: a replica that repeats the last one checked in all three (same_task_graph;
  // thousands do, in a large data-parallel plan) passes as it did.
  const Replica* checked = nullptr;
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    const Replica& rep = plan.replicas[r];
    if (checked != nullptr && same_task_graph(*checked, rep)) continue;
    MOTLEY_RETURN_IF_ERROR(check_actions(plan, labels, static_cast<int>(r), seen_));
    checked = &rep;
  }
  return Status::ok();
}

Status check_plan_structure(const Plan& plan, const PlanBounds& bounds) {
  StructureChecker checker;
  return checker.check(plan, bounds);
}

}  // namespace motley
