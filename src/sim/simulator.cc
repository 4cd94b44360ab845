// The simulator's entry points (task names: sim_task.cc). A run goes through five rooms, each in
// its own file: graph building (sim_graph.h: the plan's task graph, the simulator's own
// tasks, durations), which folds identical replicas (replica_folding.h), the link-sharing
// model (link_model.h), the event loop (event_loop.h) and result assembly (sim_results.h).
// docs/simulator.md gives the model and why each choice was made.
#include "motley/sim/simulator.h"

#include "event_loop.h"
#include "sim_graph.h"
#include "sim_results.h"

namespace motley {

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
  MOTLEY_RETURN_IF_ERROR(ws.loop.run(options, cost.topology(), ws.graph));
  return sim_internal::assemble_results(options, plan, cost.topology(), ws.graph);
}

Result<SimResult> simulate(const SimOptions& options, const Plan& plan, const CostModel& cost) {
  Simulator simulator;
  return simulator.run(options, plan, cost);
}

}  // namespace motley
