#include "motley/plan/dependencies.h"

#include "motley/core/check.h"

namespace motley {

Dependencies data_dependencies(const Action& a, int num_stages) {
  MOTLEY_CHECK(a.stage >= 0 && a.stage < num_stages, "data_dependencies: stage out of range");
  const int s = a.stage;
  const int j = a.micro_batch;
  Dependencies deps;
  switch (a.kind) {
    case ActionKind::kForward:
      if (s > 0) deps.push_back({Producer::kForward, s - 1, j, false, true});
      break;
    case ActionKind::kRecompute:
      deps.push_back({Producer::kForward, s, j, false, false});
      break;
    case ActionKind::kBackwardInput:
    case ActionKind::kBackward:
      deps.push_back({Producer::kForward, s, j, false, false});
      if (s + 1 < num_stages) deps.push_back({Producer::kInputBackward, s + 1, j, false, true});
      deps.push_back({Producer::kRecompute, s, j, true, false});
      break;
    case ActionKind::kBackwardWeight:
      deps.push_back({Producer::kBackwardInput, s, j, false, false});
      break;
  }
  return deps;
}

std::optional<Dependency> downstream_consumer(const Action& a, int num_stages) {
  MOTLEY_CHECK(a.stage >= 0 && a.stage < num_stages, "downstream_consumer: stage out of range");
  if (a.kind == ActionKind::kForward && a.stage + 1 < num_stages) {
    return Dependency{Producer::kForward, a.stage + 1, a.micro_batch, false, true};
  }
  if (is_input_backward(a.kind) && a.stage > 0) {
    return Dependency{Producer::kInputBackward, a.stage - 1, a.micro_batch, false, true};
  }
  return std::nullopt;
}

}  // namespace motley
