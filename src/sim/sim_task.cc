// The names of the simulator's tasks; a library of their own with sim_result.h (see there).
#include <fmt/format.h>

#include <string>

#include "motley/core/enum_names.h"
#include "motley/sim/sim_result.h"

namespace motley {

// Indexed by SimTaskKind, in declaration order.
constexpr const char* kSimTaskKindNames[] = {
    "forward",           "backward_input",  "backward_weight", "backward",
    "recompute",         "send_activation", "send_gradient",   "gradient_all_reduce",
    "tied_gradient_sum", "optimizer_step"};
static_assert(std::size(kSimTaskKindNames) == static_cast<size_t>(SimTaskKind::kOptimizerStep) + 1);

const char* sim_task_kind_name(SimTaskKind kind) { return name_in(kSimTaskKindNames, kind); }

bool is_communication(SimTaskKind kind) {
  return kind == SimTaskKind::kSendActivation || kind == SimTaskKind::kSendGradient ||
         kind == SimTaskKind::kGradientAllReduce || kind == SimTaskKind::kTiedGradientSum;
}
bool is_compute(SimTaskKind kind) { return !is_communication(kind); }

std::string sim_task_name(const SimTask& t) {
  // "F s0 mb3": what the task is, its stage and its micro-batch.
  auto on = [&t](const char* what) {
    return fmt::format("{} s{} mb{}", what, t.stage, t.micro_batch);
  };
  switch (t.kind) {
    case SimTaskKind::kForward:
      return on("F");
    case SimTaskKind::kBackwardInput:
      return on("I");
    case SimTaskKind::kBackwardWeight:
      return on("W");
    case SimTaskKind::kBackward:
      return on("B");
    case SimTaskKind::kRecompute:
      return on("R");
    case SimTaskKind::kSendActivation:
    case SimTaskKind::kSendGradient:
      return fmt::format("{} g{}->g{}", on(t.kind == SimTaskKind::kSendActivation ? "act" : "grad"),
                         t.group, t.peer_group);
    case SimTaskKind::kGradientAllReduce:
      return fmt::format("allreduce s{}", t.stage);
    case SimTaskKind::kTiedGradientSum:
      return fmt::format("tied sum g{}<->g{}", t.group, t.peer_group);
    case SimTaskKind::kOptimizerStep:
      return fmt::format("optimizer g{}", t.group);
  }
  return "?";
}

}  // namespace motley
