#include "motley/schedule/uniform_plan.h"

#include <algorithm>
#include <string>

#include "motley/plan/spec_hash.h"

namespace motley {
namespace {

const char* kWhat = "uniform plan: ";

Status positive(const char* field, int64_t value) {
  if (value > 0) return Status::ok();
  return invalid_argument(std::string(kWhat) + "'" + field + "' must be positive, got " +
                          std::to_string(value));
}

Status non_negative(const char* field, int64_t value, const char* zero_means) {
  if (value >= 0) return Status::ok();
  return invalid_argument(std::string(kWhat) + "'" + field + "' must be 0 (" + zero_means +
                          ") or positive, got " + std::to_string(value));
}

// Chunks per group after reading virtual_stages for the kind.
Result<int> chunks_per_group(const UniformPlanOptions& o) {
  const std::string name = schedule_kind_name(o.kind);
  switch (o.kind) {
    case ScheduleKind::kInterleaved:
      if (o.virtual_stages < 2) {
        return invalid_argument(std::string(kWhat) + "'virtual_stages' is " +
                                std::to_string(o.virtual_stages) +
                                " but the interleaved schedule needs at least 2 chunks per "
                                "group; use 1f1b for one");
      }
      return o.virtual_stages;
    case ScheduleKind::kZbV:
    case ScheduleKind::kDualPipeV:
      if (o.virtual_stages != 1 && o.virtual_stages != 2) {
        return invalid_argument(std::string(kWhat) + "'virtual_stages' is " +
                                std::to_string(o.virtual_stages) + " but " + name +
                                " runs exactly 2 stages per group (give 2, or leave 1)");
      }
      return 2;
    default:
      if (o.virtual_stages != 1) {
        return invalid_argument(std::string(kWhat) + "'virtual_stages' is " +
                                std::to_string(o.virtual_stages) + " but " + name +
                                " runs one stage per group; only interleaved, zb-v and "
                                "dualpipev take more");
      }
      return 1;
  }
}

}  // namespace

Result<Plan> make_uniform_plan(const UniformPlanOptions& o, const ModelSpec& model,
                               const ClusterSpec& cluster, const CostModel& cost) {
  MOTLEY_RETURN_IF_ERROR(positive("micro_batches", o.micro_batches));
  MOTLEY_RETURN_IF_ERROR(positive("tensor_parallel", o.tensor_parallel));
  MOTLEY_RETURN_IF_ERROR(positive("micro_batch_size", o.micro_batch_size));
  MOTLEY_RETURN_IF_ERROR(non_negative("stages", o.stages, "the whole cluster"));
  MOTLEY_RETURN_IF_ERROR(non_negative("data_parallel", o.data_parallel, "as many as fit"));
  MOTLEY_RETURN_IF_ERROR(non_negative("seq_len", o.seq_len, "the model's default"));
  MOTLEY_ASSIGN_OR_RETURN(const int chunks, chunks_per_group(o));

  const std::vector<Device> devices = cluster_devices(cluster);
  const int n = static_cast<int>(devices.size());
  const int t = o.tensor_parallel;
  const std::string cluster_name =
      "cluster '" + cluster.name + "' (" + std::to_string(n) + " devices)";
  int p = o.stages;
  if (p == 0) {
    // Every device in use: data_parallel (or one) pipelines of groups of t devices.
    const int pipelines = std::max(o.data_parallel, 1);
    if (n == 0 || n % (pipelines * t) != 0) {
      return invalid_argument(std::string(kWhat) + "'stages' is 0 (use the whole cluster) but " +
                              cluster_name + " does not split into " + std::to_string(pipelines) +
                              " pipeline(s) of groups of " + std::to_string(t) +
                              " device(s); give 'stages'");
    }
    p = n / (pipelines * t);
  }
  const int per_replica = p * t;
  int replicas = o.data_parallel;
  if (replicas == 0) {
    if (n % per_replica != 0) {
      return invalid_argument(
          std::string(kWhat) + "'stages' (" + std::to_string(p) + ") x 'tensor_parallel' (" +
          std::to_string(t) + ") = " + std::to_string(per_replica) +
          " devices per replica does not divide " + cluster_name +
          "; choose a divisor or set 'data_parallel' to use part of the cluster");
    }
    replicas = n / per_replica;
  } else if (static_cast<int64_t>(replicas) * per_replica > n) {
    return invalid_argument(std::string(kWhat) + "'data_parallel' (" + std::to_string(replicas) +
                            ") x 'stages' (" + std::to_string(p) + ") x 'tensor_parallel' (" +
                            std::to_string(t) + ") needs " +
                            std::to_string(static_cast<int64_t>(replicas) * per_replica) +
                            " devices but " + cluster_name + " has fewer");
  }

  const int num_stages = p * chunks;
  const int layers = static_cast<int>(model.layers.size());
  if (layers < num_stages) {
    return invalid_argument(std::string(kWhat) + "model '" + model.name + "' has " +
                            std::to_string(layers) + " layers, fewer than the " +
                            std::to_string(num_stages) + " stages of " + std::to_string(p) +
                            " groups x " + std::to_string(chunks) + " chunks");
  }

  Plan plan;
  plan.model = model_ref(model);
  plan.cluster = cluster_ref(cluster);
  plan.micro_batch_size = o.micro_batch_size;
  plan.seq_len = o.seq_len > 0 ? o.seq_len : model.default_seq_len;
  plan.global_batch = static_cast<int64_t>(replicas) * o.micro_batches * o.micro_batch_size;
  plan.schedule = schedule_kind_name(o.kind);
  plan.zero1 = o.zero1;
  const int base = layers / num_stages;
  const int extra = layers % num_stages;
  int begin = 0;
  for (int s = 0; s < num_stages; ++s) {
    const int size = base + (s < extra ? 1 : 0);
    plan.stages.push_back(Stage{begin, begin + size, o.recompute});
    begin += size;
  }

  const std::vector<int> stage_group = default_stage_group(o.kind, p, chunks);
  for (int k = 0; k < replicas; ++k) {
    Replica replica;
    replica.micro_batches = o.micro_batches;
    replica.stage_group = stage_group;
    for (int r = 0; r < p; ++r) {
      DeviceGroupSchedule group;
      const int first = (k * p + r) * t;
      for (int d = first; d < first + t; ++d) {
        if (devices[d].node != devices[first].node || devices[d].type != devices[first].type) {
          return invalid_argument(std::string(kWhat) + "devices " + std::to_string(first) + "-" +
                                  std::to_string(first + t - 1) +
                                  " would form a tensor-parallel group, but device " +
                                  std::to_string(d) + " (" + devices[d].type + ", node '" +
                                  cluster.nodes[devices[d].node].name + "') differs from device " +
                                  std::to_string(first) + " (" + devices[first].type + ", node '" +
                                  cluster.nodes[devices[first].node].name +
                                  "'); a group needs one node and one device type, choose another "
                                  "'tensor_parallel'");
        }
        group.devices.push_back(d);
      }
      replica.groups.push_back(std::move(group));
    }

    ScheduleRequest request;
    request.num_groups = p;
    request.num_stages = num_stages;
    request.stage_group = stage_group;
    request.micro_batches = o.micro_batches;
    for (int s = 0; s < num_stages; ++s) {
      const Stage& st = plan.stages[s];
      const DeviceGroup group{replica.groups[stage_group[s]].devices};
      request.stage_times.push_back(
          cost.compute(LayerRange{st.layer_begin, st.layer_end}, group, st.recompute));
      if (s + 1 < num_stages && stage_group[s + 1] != stage_group[s]) {
        const Seconds hop =
            cost.p2p_time(group.devices.front(), replica.groups[stage_group[s + 1]].devices.front(),
                          cost.boundary_bytes(st.layer_end - 1));
        request.p2p_time = std::max(request.p2p_time, hop);
      }
    }
    MOTLEY_ASSIGN_OR_RETURN(GroupOrders orders, generate_schedule(o.kind, request));
    for (int r = 0; r < p; ++r) replica.groups[r].actions = std::move(orders[r]);
    plan.replicas.push_back(std::move(replica));
  }
  return plan;
}

}  // namespace motley
