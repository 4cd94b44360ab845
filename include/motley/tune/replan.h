// Replanning when the cluster changes (nodes preempted, lost or added): the cluster that
// remains, which of the old plan's replicas survive whole (their structure warm-starts the
// search), a new plan for the same model and global batch, and what each surviving device
// holds before and after. The checkpoint of the old plan loads under the new one (per-layer
// files, exec/), so nothing but the layers a device newly holds has to be read. Thread-safe
// free functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"
#include "motley/tune/tune.h"

namespace motley {

// `cluster` without the nodes named in `lost`. Errors: invalid_argument naming a node the
// cluster does not have (and listing those it has), a node named twice, or every node lost.
Result<ClusterSpec> cluster_without(const ClusterSpec& cluster,
                                    const std::vector<std::string>& lost);
// `cluster` with the nodes of `gained` after its own (its network, stack and measured links
// kept; the measured links name device ids, and the new devices come last, so they stay
// right). Errors: invalid_argument naming a node both have.
Result<ClusterSpec> cluster_with(const ClusterSpec& cluster, const ClusterSpec& gained);

// For each device of `from`, its id in `to`: the device of the node of the same name, at the
// same index in the node, of the same type; -1 when `to` has no such device.
std::vector<int> device_map(const ClusterSpec& from, const ClusterSpec& to);

// The replicas of `plan` whose every device `map` keeps, with their devices renumbered: the
// structure a warm start keeps. Actions are left out (tune generates them again); micro-batch
// counts are the old ones (tune scales them to the global batch). nullopt when no replica
// survives whole.
std::optional<Plan> surviving_structure(const Plan& plan, const std::vector<int>& map);

// The layers device `device` holds under `plan` (the stages of the groups it is in), in
// increasing order.
std::vector<int> device_layers(const Plan& plan, int device);
// "0-3, 8, 10-11"; "-" for none.
std::string layer_ranges(const std::vector<int>& layers);

// One device of either cluster and what it holds under each plan.
struct DeviceChange {
  std::string node;
  int index_in_node = 0;
  std::string type;
  int old_device = -1;  // -1: arrived
  int new_device = -1;  // -1: gone
  std::vector<int> old_layers;
  std::vector<int> new_layers;
  // Layers it holds now and did not before: what it reads from the checkpoint beyond its own.
  std::vector<int> arriving_layers() const;
};

struct ReplanOptions {
  TuneOptions tune;  // global batch and sequence length are the old plan's whatever is set here
};

struct ReplanResult {
  TuneResult tuned;  // the new plan; tuned.warm_starts[0]: the survivors as they are, if any
  bool warm_started = false;
  int surviving_replicas = 0;
  int old_replicas = 0;
  // The old plan on the old cluster, priced by the same cost model as the new one.
  Seconds old_iteration_time;
  double old_tokens_per_s = 0;
  std::vector<DeviceChange> devices;  // the old cluster's devices in order, then arrivals
  Seconds replan_time;                // the whole replan, search included
};

// A new plan on `new_cluster` for `old_plan`'s model, global batch and sequence length,
// warm-started from the replicas that survive. Errors: tune's (infeasible when nothing fits).
Result<ReplanResult> replan(const Plan& old_plan, const ModelSpec& model,
                            const ClusterSpec& old_cluster, const ClusterSpec& new_cluster,
                            const ReplanOptions& options);

}  // namespace motley
