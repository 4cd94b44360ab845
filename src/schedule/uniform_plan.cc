#include "motley/schedule/uniform_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "motley/plan/spec_hash.h"
#include "motley/schedule/assemble.h"

namespace motley {
namespace {

constexpr const char* kUniformPlan = "uniform plan: ";

Status positive(const char* field, int64_t value) {
  if (value > 0) return Status::ok();
  return invalid_argument(
      fmt::format("{}'{}' must be positive, got {}", kUniformPlan, field, value));
}

Status non_negative(const char* field, int64_t value, const char* zero_means) {
  if (value >= 0) return Status::ok();
  return invalid_argument(fmt::format("{}'{}' must be 0 ({}) or positive, got {}", kUniformPlan,
                                      field, zero_means, value));
}

// Chunks per group after reading virtual_stages for the kind.
Result<int> chunks_per_group(const UniformPlanOptions& o) {
  const std::string name = schedule_kind_name(o.kind);
  switch (o.kind) {
    case ScheduleKind::kInterleaved:
      if (o.virtual_stages < 2) {
        return invalid_argument(
            fmt::format("{}'virtual_stages' is {} but the interleaved schedule needs at least 2 "
                        "chunks per group; use 1f1b for one",
                        kUniformPlan, o.virtual_stages));
      }
      return o.virtual_stages;
    case ScheduleKind::kZbV:
    case ScheduleKind::kDualPipeV:
      if (o.virtual_stages != 1 && o.virtual_stages != 2) {
        return invalid_argument(
            fmt::format("{}'virtual_stages' is {} but {} runs exactly 2 stages per group (give 2, "
                        "or leave 1)",
                        kUniformPlan, o.virtual_stages, name));
      }
      return 2;
    default:
      if (o.virtual_stages != 1) {
        return invalid_argument(
            fmt::format("{}'virtual_stages' is {} but {} runs one stage per group; only "
                        "interleaved, zb-v and dualpipev take more",
                        kUniformPlan, o.virtual_stages, name));
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
  const std::string cluster_name = fmt::format("cluster '{}' ({} devices)", cluster.name, n);
  int p = o.stages;
  if (p == 0) {
    // Every device in use: data_parallel (or one) pipelines of groups of t devices.
    const int pipelines = std::max(o.data_parallel, 1);
    if (n == 0 || n % (pipelines * t) != 0) {
      return invalid_argument(
          fmt::format("{}'stages' is 0 (use the whole cluster) but {} does not split into {} "
                      "pipeline(s) of groups of {} device(s); give 'stages'",
                      kUniformPlan, cluster_name, pipelines, t));
    }
    p = n / (pipelines * t);
  }
  const int per_replica = p * t;
  int replicas = o.data_parallel;
  if (replicas == 0) {
    if (n % per_replica != 0) {
      return invalid_argument(
          fmt::format("{}'stages' ({}) x 'tensor_parallel' ({}) = {} devices per replica does not "
                      "divide {}; choose a divisor or set 'data_parallel' to use part of the "
                      "cluster",
                      kUniformPlan, p, t, per_replica, cluster_name));
    }
    replicas = n / per_replica;
  } else if (static_cast<int64_t>(replicas) * per_replica > n) {
    return invalid_argument(fmt::format(
        "{}'data_parallel' ({}) x 'stages' ({}) x 'tensor_parallel' ({}) needs {} "
        "devices but {} has fewer",
        kUniformPlan, replicas, p, t, static_cast<int64_t>(replicas) * per_replica, cluster_name));
  }

  const int num_stages = p * chunks;
  const int layers = static_cast<int>(model.layers.size());
  if (!o.layer_counts.empty()) {
    int64_t sum = 0;
    for (int count : o.layer_counts) {
      if (count < 1) {
        return invalid_argument(fmt::format(
            "{}'layer_counts': every stage needs at least 1 layer, got {}", kUniformPlan, count));
      }
      sum += count;
    }
    if (static_cast<int>(o.layer_counts.size()) != num_stages || sum != layers) {
      return invalid_argument(fmt::format(
          "{}'layer_counts': {} counts summing to {}; the plan has {} stages ({} groups x {} "
          "chunks) and model '{}' {} layers",
          kUniformPlan, o.layer_counts.size(), sum, num_stages, p, chunks, model.name, layers));
    }
  } else if (max_stages(o.partition, model) < num_stages) {
    const bool megatron = o.partition == LayerSplit::kMegatron;
    return invalid_argument(
        fmt::format("{}model '{}' has {} {}, fewer than the {} stages of {} groups x {} chunks{}",
                    kUniformPlan, model.name, max_stages(o.partition, model),
                    megatron ? "decoder layers" : "layers", num_stages, p, chunks,
                    megatron ? " (the megatron partition splits the decoder layers)" : ""));
  }

  // A uniform plan is a candidate: every replica the same bounds, groups in cluster order.
  Candidate c;
  c.micro_batch_size = o.micro_batch_size;
  c.schedule = ScheduleSpec::named(o.kind, chunks);
  if (o.vocab_parallel) {
    c.schedule = ScheduleSpec::adaptive_on(c.schedule.shape, c.schedule.chunks,
                                           AdaptivePriority::kBackwardFirst, WeightFill::kIfItFits);
    c.vocab_parallel = true;
    c.vocab_embedding = true;
  }
  std::vector<int> bounds{0};
  if (o.layer_counts.empty()) {
    bounds = split_bounds(o.partition, model, num_stages);
  } else {
    for (int count : o.layer_counts) bounds.push_back(bounds.back() + count);
  }
  if (o.recompute_layers < 0 || (o.recompute_layers > 0 && o.recompute != RecomputePolicy::kNone)) {
    return invalid_argument(fmt::format(
        "{}'recompute_layers' {} recomputes the first layers of every stage on their own; it "
        "needs a positive count and 'recompute' none, not {}",
        kUniformPlan, o.recompute_layers, recompute_policy_name(o.recompute)));
  }
  for (size_t s = 0; s + 1 < bounds.size() && o.recompute_layers > 0; ++s) {
    int taken = 0;
    for (int l = bounds[s]; l < bounds[s + 1] && taken < o.recompute_layers; ++l) {
      const LayerKind kind = model.layers[l].kind;
      if (kind == LayerKind::kEmbedding || kind == LayerKind::kHead) continue;
      c.recompute_layers.push_back(l);
      ++taken;
    }
  }
  for (int k = 0; k < replicas; ++k) {
    PipelineSpec replica;
    replica.bounds = bounds;
    replica.recompute.assign(num_stages, o.recompute);
    replica.micro_batches = o.micro_batches;
    for (int r = 0; r < p; ++r) {
      const int first = (o.megatron_rank_order ? r * replicas + k : k * p + r) * t;
      for (int d = first; d < first + t; ++d) {
        if (devices[d].node != devices[first].node || devices[d].type != devices[first].type) {
          return invalid_argument(fmt::format(
              "{0}devices {1}-{2} would form a tensor-parallel group, but device {3} ({4}, node "
              "'{5}') differs from device {1} ({6}, node '{7}'); a group needs one node and one "
              "device type, choose another 'tensor_parallel'",
              kUniformPlan, first, first + t - 1, d, devices[d].type,
              cluster.nodes[devices[d].node].name, devices[first].type,
              cluster.nodes[devices[first].node].name));
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
  assemble.zero_stage = o.zero_stage;
  assemble.expert_parallel = o.expert_parallel;
  assemble.context_parallel = o.context_parallel;
  assemble.sequence_parallel = o.sequence_parallel;
  assemble.head_vocab = head_vocab(model);
  assemble.embedding_vocab = embedding_vocab(model);
  // Memory is the validator's to check (simulate validates every plan it runs).
  assemble.check_memory = false;
  MOTLEY_ASSIGN_OR_RETURN(Plan plan, assemble_plan(assemble, c, cost));
  // The schedule is named by its kind alone, as plan files written by `motley simulate` are
  // (the adaptive scheduler's name when it ordered the vocabulary shards).
  if (!o.vocab_parallel) plan.schedule = schedule_kind_name(o.kind);
  return plan;
}

}  // namespace motley
