// The simulator's entry points and the names of its tasks. A run goes through four rooms, each
// in its own file: graph building (sim_graph.h: the plan's task graph, the simulator's own
// tasks, durations), the link-sharing model (link_model.h), the event loop (event_loop.h) and
// result assembly (sim_results.h). docs/simulator.md gives the model and why each choice was
// made.
#include "motley/sim/simulator.h"

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
  const std::string s = std::to_string(t.stage);
  const std::string sj = " s" + s + " mb" + std::to_string(t.micro_batch);
  switch (t.kind) {
    case SimTaskKind::kForward:
      return "F" + sj;
    case SimTaskKind::kBackwardInput:
      return "I" + sj;
    case SimTaskKind::kBackwardWeight:
      return "W" + sj;
    case SimTaskKind::kBackward:
      return "B" + sj;
    case SimTaskKind::kRecompute:
      return "R" + sj;
    case SimTaskKind::kSendActivation:
    case SimTaskKind::kSendGradient:
      return std::string(t.kind == SimTaskKind::kSendActivation ? "act" : "grad") + sj + " g" +
             std::to_string(t.group) + "->g" + std::to_string(t.peer_group);
    case SimTaskKind::kGradientAllReduce:
      return "allreduce s" + s;
    case SimTaskKind::kOptimizerStep:
      return "optimizer g" + std::to_string(t.group);
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
