// Where a plan's ranks live, node by node, for the launchers that start them on a cluster
// (export slurm, export k8s): the executor's rank of every device (RankLayout's order: replicas,
// then device groups, then a group's devices), grouped by the node holding it, and the nodes
// grouped by the devices they use. Pure; thread-safe.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/plan/plan.h"

namespace motley::cli {

struct NodeRanks {
  int node = 0;                                 // cluster node index
  std::vector<std::pair<int, int>> local_rank;  // (device index in the node, rank), increasing
  std::map<std::string, int> types;             // device type -> devices the plan uses there
};

// Nodes whose used devices are the same: one Slurm component, one JobSet replicated job.
struct NodeKind {
  std::map<std::string, int> types;
  std::vector<int> nodes;  // indices into PlanRanks::nodes, in cluster order
};

struct PlanRanks {
  int world = 0;
  std::vector<NodeRanks> nodes;  // the nodes holding a device of the plan, in cluster order
  std::vector<NodeKind> kinds;   // in order of first appearance
};

PlanRanks plan_ranks(const Plan& plan, const ClusterSpec& cluster);

// 'text' with every ' escaped, for a POSIX shell.
std::string shell_quote(const std::string& text);

}  // namespace motley::cli
