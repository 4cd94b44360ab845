#include "motley/plan/plan.h"

#include <algorithm>

#include "motley/core/enum_names.h"

namespace motley {

char action_letter(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return 'F';
    case ActionKind::kBackwardInput:
      return 'I';
    case ActionKind::kBackwardWeight:
      return 'W';
    case ActionKind::kBackward:
      return 'B';
    case ActionKind::kRecompute:
      return 'R';
  }
  return '?';
}

// Indexed by ActionKind, in declaration order.
constexpr const char* kActionKindNames[] = {"forward", "backward_input", "backward_weight",
                                            "backward", "recompute"};
static_assert(std::size(kActionKindNames) == static_cast<size_t>(ActionKind::kRecompute) + 1);

const char* action_kind_name(ActionKind kind) { return name_in(kActionKindNames, kind); }

RecomputePolicy Stage::policy_of(int layer) const {
  return std::binary_search(recompute_layers.begin(), recompute_layers.end(), layer)
             ? RecomputePolicy::kFull
             : recompute;
}

int vocab_shard_count(const std::vector<Stage>& stages) {
  int count = 0;
  for (auto it = stages.rbegin(); it != stages.rend() && it->is_vocab_shard(); ++it) ++count;
  // A plan of shards alone has no head run: the shards at its start are the embedding's.
  return count == static_cast<int>(stages.size()) ? 0 : count;
}

int embedding_shard_count(const std::vector<Stage>& stages) {
  int count = 0;
  for (const Stage& st : stages) {
    if (!st.is_vocab_shard() || st.layer_begin != 0) break;
    ++count;
  }
  return count;
}

bool has_vocab_shards(const std::vector<Stage>& stages) {
  return std::any_of(stages.begin(), stages.end(),
                     [](const Stage& st) { return st.is_vocab_shard(); });
}

int first_vocab_shard(const std::vector<Stage>& stages) {
  for (size_t s = 0; s < stages.size(); ++s) {
    if (stages[s].is_vocab_shard()) return static_cast<int>(s);
  }
  return -1;
}

Plan without_vocab_shards(const Plan& plan) {
  const int tail = vocab_shard_count(plan.stages);
  const int lead = embedding_shard_count(plan.stages);
  if (tail == 0 && lead == 0) return plan;
  Plan whole = plan;
  const int n = static_cast<int>(plan.stages.size());
  const int end = n - tail;  // stages [lead, end) stay, renumbered from 0
  whole.stages.assign(plan.stages.begin() + lead, plan.stages.begin() + end);
  whole.stages.back().layer_end = plan.stages.back().layer_end;
  whole.stages.front().layer_begin = 0;
  for (Replica& rep : whole.replicas) {
    rep.stage_group.assign(rep.stage_group.begin() + lead, rep.stage_group.begin() + end);
    for (DeviceGroupSchedule& g : rep.groups) {
      std::erase_if(g.actions, [&](const Action& a) { return a.stage < lead || a.stage >= end; });
      for (Action& a : g.actions) a.stage -= lead;
    }
  }
  return whole;
}

double vocab_share(const std::vector<Stage>& stages, size_t s) {
  const Stage& st = stages[s];
  if (!st.is_vocab_shard()) return 1.0;
  // The run's last shard ends at the vocabulary: the embedding's, or the head's.
  const int lead = embedding_shard_count(stages);
  const int64_t vocab = static_cast<int>(s) < lead ? stages[static_cast<size_t>(lead) - 1].vocab_end
                                                   : stages.back().vocab_end;
  return static_cast<double>(st.vocab_end - st.vocab_begin) / static_cast<double>(vocab);
}

}  // namespace motley
