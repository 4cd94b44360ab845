#include "motley/schedule/uniform_plan.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "motley/plan/spec_hash.h"
#include "motley/schedule/assemble.h"

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
  if (max_stages(o.partition, model) < num_stages) {
    const bool megatron = o.partition == LayerSplit::kMegatron;
    return invalid_argument(
        std::string(kWhat) + "model '" + model.name + "' has " +
        std::to_string(max_stages(o.partition, model)) +
        (megatron ? " decoder layers" : " layers") + ", fewer than the " +
        std::to_string(num_stages) + " stages of " + std::to_string(p) + " groups x " +
        std::to_string(chunks) + " chunks" +
        (megatron ? " (the megatron partition splits the decoder layers)" : ""));
  }

  // A uniform plan is a candidate: every replica the same bounds, groups in cluster order.
  Candidate c;
  c.micro_batch_size = o.micro_batch_size;
  c.schedule = ScheduleSpec::named(o.kind, chunks);
  const std::vector<int> bounds = split_bounds(o.partition, model, num_stages);
  for (int k = 0; k < replicas; ++k) {
    PipelineSpec replica;
    replica.bounds = bounds;
    replica.recompute.assign(num_stages, o.recompute);
    replica.micro_batches = o.micro_batches;
    for (int r = 0; r < p; ++r) {
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
      }
      std::vector<int> group(t);
      for (int i = 0; i < t; ++i) group[i] = first + i;
      replica.groups.push_back(std::move(group));
    }
    c.replicas.push_back(std::move(replica));
  }

  AssembleOptions assemble;
  assemble.model = model_ref(model);
  assemble.cluster = cluster_ref(cluster);
  assemble.num_layers = layers;
  assemble.seq_len = o.seq_len > 0 ? o.seq_len : model.default_seq_len;
  assemble.zero1 = o.zero1;
  // Memory is the validator's to check (simulate validates every plan it runs).
  assemble.check_memory = false;
  MOTLEY_ASSIGN_OR_RETURN(Plan plan, assemble_plan(assemble, c, cost));
  // The schedule is named by its kind alone, as plan files written by `motley simulate` are.
  plan.schedule = schedule_kind_name(o.kind);
  return plan;
}

}  // namespace motley
