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

}  // namespace motley
