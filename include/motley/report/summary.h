// Terminal summary of a simulated iteration: headline metrics, a per-device table (utilization,
// idle, exposed communication, peak memory against capacity), the devices over capacity and
// what dominates the critical path. Plain text with units; fields are documented in
// docs/report-formats.md. Writes nothing itself. Pure functions; thread-safe.
#pragma once

#include <string>

#include "motley/cluster/cluster.h"
#include "motley/plan/plan.h"
#include "motley/sim/sim_result.h"

namespace motley {

struct SummaryOptions {
  bool device_table = true;
  // How many devices (and task kinds) the critical-path summary names, largest share first.
  int critical_path_top = 3;
};

// A multi-line summary ending in a newline. Devices appear in SimResult::devices order (by
// replica, group, then position); a tensor-parallel group lists each of its devices.
std::string simulation_summary(const Plan& plan, const SimResult& result, const Topology& topology,
                               const SummaryOptions& options = {});

}  // namespace motley
