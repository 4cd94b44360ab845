// Plan: the contract between planner, simulator and executor — partition (stages of contiguous
// layers with a recompute policy), placement (device groups per stage, data-parallel replicas
// with their own micro-batch counts) and schedule (an ordered action list per device group),
// plus the predicted metrics a tool filled in. Pure data with a versioned JSON form
// (plan_json.h, which also carries the model and cluster specs beside it); validation and
// lowering live in validate.h and lower.h. Thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "motley/core/json.h"
#include "motley/core/units.h"
#include "motley/model/model.h"

namespace motley {

// What every tool writes: the plan with the model and cluster it was made for, each group's
// actions as one string, a replica that repeats the one before naming the first of its run
// (same_actions_as). Files of the earlier formats are still read: /3 (every replica listing its
// actions), /2 (also actions as arrays of strings) and /1 (also without the model and cluster,
// references only).
inline constexpr const char* kPlanFormat = "motley.plan/4";
inline constexpr const char* kPlanFormatV3 = "motley.plan/3";
inline constexpr const char* kPlanFormatV2 = "motley.plan/2";
inline constexpr const char* kPlanFormatV1 = "motley.plan/1";

enum class ActionKind {
  kForward,         // F: forward of one stage for one micro-batch
  kBackwardInput,   // B: gradient with respect to the stage input
  kBackwardWeight,  // W: gradient with respect to the stage weights (after B)
  kBackward,        // B and W fused (a full backward)
  kRecompute,       // R: redo the stage's forward under its recompute policy, before its B
};
// Single letters as PyTorch pipelining writes them: F, I (input grad), W, B (full), R.
char action_letter(ActionKind kind);
const char* action_kind_name(ActionKind kind);

struct Action {
  ActionKind kind = ActionKind::kForward;
  int stage = 0;        // index into Plan::stages
  int micro_batch = 0;  // 0 .. Replica::micro_batches - 1
  friend bool operator==(const Action&, const Action&) = default;
};

// One pipeline stage: layers [layer_begin, layer_end) of the model.
//
// Vocabulary parallelism (Yeung et al., "Balancing Pipeline Parallelism with Vocabulary
// Parallelism", 2024): the model's head (its output layer and loss) may be split by vocabulary
// rows into shards, each a stage of its own on its own device group, and so may its embedding
// (its first layer). Head shards are the plan's last stages, embedding shards its first, each
// run over its layer alone with rows [vocab_begin, vocab_end) contiguous from 0 to the
// vocabulary; a run's shards run side by side, not one after another (plan/dependencies.h).
struct Stage {
  int layer_begin = 0;
  int layer_end = 0;
  RecomputePolicy recompute = RecomputePolicy::kNone;
  int64_t vocab_begin = 0;  // both 0: not a shard, the whole layer range
  int64_t vocab_end = 0;
  // Per-layer recompute: these layers of the stage (ascending, within [layer_begin, layer_end))
  // recompute in full, keeping only their input; the others follow `recompute`, which is then
  // none or selective. Megatron-LM's --recompute-method block recomputes a stage's first N.
  std::vector<int> recompute_layers{};
  bool is_vocab_shard() const { return vocab_end > vocab_begin; }
  // Whether the stage recomputes anything (an R action may run it).
  bool recomputes() const {
    return recompute != RecomputePolicy::kNone || !recompute_layers.empty();
  }
  // The policy layer `layer` of the stage runs under.
  RecomputePolicy policy_of(int layer) const;
  friend bool operator==(const Stage&, const Stage&) = default;
};

// The most vocabulary shards a plan may have (each sends its loss statistics to every other).
inline constexpr int kMaxVocabShards = 64;

// How many of the plan's last stages are vocabulary shards of the head (0: none).
int vocab_shard_count(const std::vector<Stage>& stages);
// How many of its first stages are vocabulary shards of the embedding (0: none).
int embedding_shard_count(const std::vector<Stage>& stages);
// Whether any stage is a vocabulary shard, and the first that is (-1: none).
bool has_vocab_shards(const std::vector<Stage>& stages);
int first_vocab_shard(const std::vector<Stage>& stages);
// `plan` with its head and embedding whole again: the vocabulary shards and their actions
// removed, the head's layer given back to the stage before its shards, the embedding's to the
// stage after its shards (stages renumbered). The same plan when it has none.
struct Plan;
Plan without_vocab_shards(const Plan& plan);
// Stage s's share of its layer's vocabulary rows: 1 for a stage that is no shard. Each run's
// last shard ends at the vocabulary (validated).
double vocab_share(const std::vector<Stage>& stages, size_t s);

// A tensor-parallel group of devices (global cluster ids; one device when t = 1) and the
// ordered compute actions it runs. A group may run several stages (interleaved, V-shaped).
struct DeviceGroupSchedule {
  std::vector<int> devices;
  std::vector<Action> actions;
  friend bool operator==(const DeviceGroupSchedule&, const DeviceGroupSchedule&) = default;
};

// One data-parallel replica of the whole pipeline.
struct Replica {
  int64_t micro_batches = 0;
  std::vector<int> stage_group;             // stage index -> index into `groups`
  std::vector<DeviceGroupSchedule> groups;  // each group's devices and action order
  friend bool operator==(const Replica&, const Replica&) = default;
};

// Identifies what a plan was made for, so it is never run against something else.
struct SpecRef {
  std::string name;
  std::string hash;  // hex content hash (spec_hash.h)
  friend bool operator==(const SpecRef&, const SpecRef&) = default;
};

struct PredictedMetrics {
  Seconds iteration_time;
  double throughput_tokens_per_s = 0;
  double bubble_fraction = 0;
  std::string cost_model;  // which model predicted them, e.g. "analytic"
  // Whether the times include the optimizer step; false where they were predicted without it
  // (motley plan --no-optimizer-step), which later pricings of the plan then follow.
  bool optimizer_step = true;
  friend bool operator==(const PredictedMetrics&, const PredictedMetrics&) = default;
};

struct Plan {
  SpecRef model;
  SpecRef cluster;
  int64_t micro_batch_size = 1;
  int64_t seq_len = 0;
  int64_t global_batch = 0;  // sequences per step == sum of replicas' micro_batches * size / cp
  std::vector<Stage> stages;
  std::vector<Replica> replicas;
  std::string schedule;  // the generator's name, informational only ("1f1b", "adaptive", ...)
  // ZeRO (Rajbhandari et al. 2020) across the replicas, each stage's state sharded over the
  // replicas' groups that hold it: 0 none; 1 the optimizer state (Megatron-LM's distributed
  // optimizer); 2 also the gradients, reduce-scattered after every micro-batch's backward;
  // 3 also the weights, all-gathered before every forward and backward (FSDP's full shard).
  int zero_stage = 0;
  // Expert parallelism (Megatron-LM's EP, GShard): each MoE layer's routed experts split over
  // this many consecutive replicas (replicas [k e, (k + 1) e) form group k), the tokens sent to
  // their experts and back by an all-to-all in every forward and backward. 1: every replica
  // holds every expert.
  int expert_parallel = 1;
  // Context parallelism (Megatron-LM's CP, ring attention): replicas [k c, (k + 1) c) form
  // group k and run the same micro-batches, each member 1/c of every sequence (Megatron's
  // load-balanced split into 2c chunks, member i holding chunks i and 2c - 1 - i); attention
  // passes every member's keys and values around the group's ring. A group counts its
  // micro-batches once: global_batch = micro_batch_size x the replicas' micro-batches / c.
  // 1: every replica runs whole sequences.
  int context_parallel = 1;
  // Megatron-LM's sequence parallelism inside every TP group: the residual-stream work is split
  // across the group, its all-reduces become reduce-scatter + all-gather.
  bool sequence_parallel = false;
  std::optional<PredictedMetrics> predicted;
  // The software stack the plan was priced with, as the cost module writes it
  // (software_stack_to_json; the plan module keeps it as given, an object). Absent: the
  // cluster's `software_stack`, else the default stack.
  std::optional<Json> software_stack;
  friend bool operator==(const Plan&, const Plan&) = default;
};

}  // namespace motley
