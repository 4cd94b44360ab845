#include "motley/plan/plan.h"

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

const char* action_kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "forward";
    case ActionKind::kBackwardInput:
      return "backward_input";
    case ActionKind::kBackwardWeight:
      return "backward_weight";
    case ActionKind::kBackward:
      return "backward";
    case ActionKind::kRecompute:
      return "recompute";
  }
  return "?";
}

}  // namespace motley
