// The price of interruptions: how often a job on a set of nodes is interrupted (spot
// preemptions, or failures a cluster states), what a checkpoint costs to write and to come back
// from, the checkpoint interval that wastes the least (Young 1974; Daly 2006) and the expected
// goodput, the fraction of wall-clock time that ends up as training progress. Model and defaults:
// docs/preemption.md. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/cost/cost_model.h"
#include "motley/plan/plan.h"

namespace motley {

// Young's first-order optimum, sqrt(2 delta M). REQUIRES: delta >= 0, M > 0.
Seconds young_checkpoint_interval(Seconds checkpoint, Seconds mtbf);
// Daly's higher-order optimum of the compute time between checkpoints:
// sqrt(2 delta M) (1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9) - delta for delta < 2M, else M.
Seconds daly_checkpoint_interval(Seconds checkpoint, Seconds mtbf);
// Useful time over wall time when `interval` of computing alternates with a checkpoint of
// `checkpoint`, interruptions arrive at rate 1/M (Poisson) and each costs `restart` plus the
// work since the last checkpoint (Daly's complete model):
// interval / (M e^(R/M) (e^((interval + delta)/M) - 1)). 1 when `mtbf` is infinite.
double checkpoint_goodput(Seconds interval, Seconds checkpoint, Seconds restart, Seconds mtbf);

// Layers whose training state a set of devices holds: every device of every holder holds its
// share of the range (a tensor-parallel group, or the same layers in several replicas).
struct StateHolder {
  LayerRange layers;
  std::vector<int> devices;
};

struct PreemptionEstimate {
  int interruptible_nodes = 0;  // nodes used that can be interrupted
  // Of the whole job: any interruptible node's interruption stops every rank. Infinite (and
  // everything below 0, goodput 1) when no node used can be interrupted.
  Seconds mean_time_between_interruptions = Seconds(std::numeric_limits<double>::infinity());
  Bytes checkpoint_bytes;           // the whole training state: weights and optimizer state
  Seconds checkpoint_time;          // delta: the node with the largest share, at its write rate
  Seconds restart_time;             // R: the restart, then reading the checkpoint back
  int64_t interval_iterations = 0;  // between checkpoints: Daly's optimum in whole iterations
  Seconds interval;                 // interval_iterations x the iteration time
  double goodput = 1;               // checkpoint_goodput of that interval
  bool interruptible() const { return interruptible_nodes > 0; }
};

// Each layer's training state, the checkpoint's content: weights + optimizer state of
// cost.stage_memory for the layer alone on `device` (no tensor parallelism, no sharding).
std::vector<Bytes> layer_state_bytes(const CostModel& cost, int num_layers, int device);

// The bytes each device writes (index: device id) when every layer's state (`layer_bytes`) is
// split evenly over the devices holding it, as a sharded checkpoint writer does.
std::vector<Bytes> checkpoint_shares(const std::vector<StateHolder>& holders,
                                     const std::vector<Bytes>& layer_bytes, int num_devices);

// The estimate for a job whose devices hold `shares` (checkpoint_shares) on `cluster`, with
// iterations of `iteration_time`; `on_demand`: spot nodes priced as bought on demand (only the
// interruptions a node states for itself while not spot count, i.e. none of the spot ones).
// REQUIRES: shares.size() is the cluster's device count, iteration_time > 0.
PreemptionEstimate estimate_preemption(const ClusterSpec& cluster, const std::vector<Bytes>& shares,
                                       Seconds iteration_time, bool on_demand = false);

// The holders of a plan's stages: each (replica, stage) group holds the stage's layers.
std::vector<StateHolder> plan_state_holders(const Plan& plan);

// What a plan costs: its estimate on the cluster as it is and with its spot nodes bought on
// demand, and the expected USD per million tokens of each (node prices shared evenly by a
// node's devices; iterations of `iteration_time`).
struct PlanPricing {
  PreemptionEstimate preemption;
  // USD per hour of the devices the plan uses: at the cluster's prices, and bought on demand.
  double dollars_per_hour = 0;
  double on_demand_dollars_per_hour = 0;
  double dollars_per_million_tokens = 0;
  double on_demand_dollars_per_million_tokens = 0;
};
PlanPricing price_plan(const Plan& plan, const CostModel& cost, const ClusterSpec& cluster,
                       Seconds iteration_time);

// Whether any node of the cluster can be interrupted.
bool cluster_interruptible(const ClusterSpec& cluster);

}  // namespace motley
