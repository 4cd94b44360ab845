// sim: result assembly — what a run of the event loop means: iteration time and throughput,
// per-device busy, idle and exposed communication, memory under each group's order, the
// critical path and, on request, the timeline (docs/simulator.md, "Metrics"). It reads a
// finished SimGraph and changes nothing. Thread-safe free function.
#pragma once

#include "motley/cluster/cluster.h"
#include "motley/plan/plan.h"
#include "motley/sim/simulator.h"
#include "sim_graph.h"

namespace motley::sim_internal {

// Lists every replica of `plan`, the one the graph was built for (build_sim_graph), each with
// the figures of the replica simulated for it. REQUIRES: EventLoop::run on `graph` succeeded.
SimResult assemble_results(const SimOptions& options, const Plan& plan, const Topology& topology,
                           const SimGraph& graph);

}  // namespace motley::sim_internal
