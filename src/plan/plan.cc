#include "motley/plan/plan.h"

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

int vocab_shard_count(const std::vector<Stage>& stages) {
  int count = 0;
  for (auto it = stages.rbegin(); it != stages.rend() && it->is_vocab_shard(); ++it) ++count;
  return count;
}

Plan without_vocab_shards(const Plan& plan) {
  const int shards = vocab_shard_count(plan.stages);
  if (shards == 0) return plan;
  Plan whole = plan;
  const int first = static_cast<int>(plan.stages.size()) - shards;
  whole.stages.resize(first);
  whole.stages.back().layer_end = plan.stages.back().layer_end;
  for (Replica& rep : whole.replicas) {
    rep.stage_group.resize(first);
    for (DeviceGroupSchedule& g : rep.groups) {
      std::erase_if(g.actions, [&](const Action& a) { return a.stage >= first; });
    }
  }
  return whole;
}

double vocab_share(const std::vector<Stage>& stages, size_t s) {
  const Stage& st = stages[s];
  if (!st.is_vocab_shard()) return 1.0;
  return static_cast<double>(st.vocab_end - st.vocab_begin) /
         static_cast<double>(stages.back().vocab_end);
}

}  // namespace motley
