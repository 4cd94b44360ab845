// The simulator's entry points and the names of its tasks. A run goes through four rooms, each
// in its own file: graph building (sim_graph.h: the plan's task graph, the simulator's own
// tasks, durations), the link-sharing model (link_model.h), the event loop (event_loop.h) and
// result assembly (sim_results.h). docs/simulator.md gives the model and why each choice was
// made.
#include "motley/sim/simulator.h"

#include <fmt/format.h>

#include <string>

#include "event_loop.h"
#include "sim_graph.h"
#include "sim_results.h"

namespace motley {

const char* sim_task_kind_name(SimTaskKind kind) {
  switch (kind) {
    case SimTaskKind::kForward:
      return "forward";
    case SimTaskKind::kBackwardInput:
      return "backward_input";
    case SimTaskKind::kBackwardWeight:
      return "backward_weight";
    case SimTaskKind::kBackward:
      return "backward";
    case SimTaskKind::kRecompute:
      return "recompute";
    case SimTaskKind::kSendActivation:
      return "send_activation";
    case SimTaskKind::kSendGradient:
      return "send_gradient";
    case SimTaskKind::kGradientAllReduce:
      return "gradient_all_reduce";
    case SimTaskKind::kOptimizerStep:
      return "optimizer_step";
  }
  return "?";
}

bool is_communication(SimTaskKind kind) {
  return kind == SimTaskKind::kSendActivation || kind == SimTaskKind::kSendGradient ||
         kind == SimTaskKind::kGradientAllReduce;
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
    case SimTaskKind::kOptimizerStep:
      return fmt::format("optimizer g{}", t.group);
  }
  return "?";
}

namespace sim_internal {

// What a Simulator keeps between runs, so that a run allocates only for a plan larger than any
// before.
struct Workspace {
  SimGraph graph;
  EventLoop loop;
};

}  // namespace sim_internal

Simulator::Simulator() : workspace_(std::make_unique<sim_internal::Workspace>()) {}
Simulator::~Simulator() = default;

Result<SimResult> Simulator::run(const SimOptions& options, const Plan& plan,
                                 const CostModel& cost) {
  sim_internal::Workspace& ws = *workspace_;
  MOTLEY_RETURN_IF_ERROR(sim_internal::build_sim_graph(options, plan, cost, ws.graph));
  MOTLEY_RETURN_IF_ERROR(ws.loop.run(options, plan, cost.topology(), ws.graph));
  return sim_internal::assemble_results(options, plan, cost.topology(), ws.graph);
}

Result<SimResult> simulate(const SimOptions& options, const Plan& plan, const CostModel& cost) {
  Simulator simulator;
  return simulator.run(options, plan, cost);
}

}  // namespace motley
