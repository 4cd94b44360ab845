// Small models, clusters and fixed-cost specs shared by the schedule and tune modules' tests.
#pragma once

#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/cost/fixed_cost_model.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"

namespace motley::schedule_testing {

// `layers` tiny decoder blocks named "block.<i>" (shapes do not matter under FixedCostModel).
ModelSpec tiny_model(int layers, const std::string& name = "tiny");

// make_fixed_cluster with NVLink inside nodes and a network between them.
ClusterSpec fixed_cluster(const std::vector<std::string>& node_types, int devices_per_node,
                          Seconds hop = Seconds(0));

// A layer taking `f`, `b`, `w` ms, `weights_gb` GB of fixed memory (all in weights) and
// `act_gb` GB of activations per micro-batch under every recompute policy.
FixedLayer layer_ms(double f, double b, double w, double weights_gb = 0, double act_gb = 0);

// The actions as plan files write them, space-separated: "0F0 0F1 0I0 0W0".
std::string order_text(const std::vector<Action>& actions);

}  // namespace motley::schedule_testing
