// The dependency rule between a plan's compute actions — which action's result each one
// consumes — written once for every reader of plans: validation, lowering, the simulator, the
// executor and the schedule generators' timing estimates (docs/plan-format.md,
// "Dependencies"). Data only: it knows nothing of groups, orders or time. Thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "motley/core/check.h"
#include "motley/plan/plan.h"

namespace motley {

// What a consumed result is, by the action that produces it.
enum class Producer {
  kForward,        // F(stage, mb): an activation (stage below) or the stored one (own stage)
  kInputBackward,  // the backward that yields stage's input gradient: I, or B when fused
  kRecompute,      // R(stage, mb), when the plan lists one (optional)
  kBackwardInput,  // I(stage, mb) itself (what W needs)
};

// One input of a compute action.
struct Dependency {
  Producer producer = Producer::kForward;
  int stage = 0;
  int micro_batch = 0;
  // Only when the plan has such an action (R): a plan without one has no edge.
  bool optional = false;
  // The input is another stage's output (an activation from stage - 1, a gradient from
  // stage + 1): it travels as a message when the two stages run on different groups.
  bool crosses_stages = false;
  // The producers are the same action of stages [stage, stage + count): every vocabulary
  // shard of the head (plan.h), which run side by side.
  int count = 1;
  friend bool operator==(const Dependency&, const Dependency&) = default;
};

// The shape of a pipeline as the rule reads it: its stage count, how many of its last stages
// are vocabulary shards of the head and how many of its first are shards of the embedding
// (each 0: none; else at least 2, with a stage of other layers between the two runs).
struct PipelineShape {
  int stages = 0;
  int vocab_shards = 0;
  int embedding_shards = 0;
  int first_shard() const { return stages - vocab_shards; }  // == stages when none
  bool is_shard(int stage) const { return stage >= first_shard(); }
  // The first stage after the embedding's shards (0 when none).
  int first_after_embedding() const { return embedding_shards; }
  bool is_embedding_shard(int stage) const { return stage < embedding_shards; }
};
inline PipelineShape pipeline_shape(const Plan& plan) {
  return PipelineShape{static_cast<int>(plan.stages.size()), vocab_shard_count(plan.stages),
                       embedding_shard_count(plan.stages)};
}

// At most N items, without allocating: what an action consumes is asked for every task of
// every plan a tuner simulates. REQUIRES: no more than N push_backs.
template <typename T, int N>
class ShortList {
 public:
  const T* begin() const { return items_.data(); }
  const T* end() const { return items_.data() + size_; }
  int size() const { return size_; }
  const T& operator[](int i) const { return items_[i]; }
  void push_back(const T& item) { items_[size_++] = item; }

 private:
  std::array<T, N> items_{};
  int size_ = 0;
};

// An action has at most three inputs.
using Dependencies = ShortList<Dependency, 3>;

// The memory rule validation, the simulator and the tuner share: F allocates a micro-batch's
// activations of its stage, W (or a fused B) releases them; I changes nothing, and R only
// where it recomputes a single micro-batch (RecomputedMicroBatches below).
inline bool allocates_activations(ActionKind kind) { return kind == ActionKind::kForward; }
inline bool frees_activations(ActionKind kind) {
  return kind == ActionKind::kBackwardWeight || kind == ActionKind::kBackward;
}
// Whether `a` is an R that recomputes its micro-batch alone: on a stage that keeps its
// activations (no recompute policy, no recompute_layers; RecomputedMicroBatches below).
inline bool recomputes_alone(const std::vector<Stage>& stages, const Action& a) {
  return a.kind == ActionKind::kRecompute && a.stage >= 0 &&
         static_cast<size_t>(a.stage) < stages.size() && !stages[a.stage].recomputes();
}
// How many such R actions the orders of `replica` list.
inline int64_t micro_batches_recomputed_alone(const std::vector<Stage>& stages,
                                              const Replica& replica) {
  int64_t n = 0;
  for (const DeviceGroupSchedule& g : replica.groups) {
    for (const Action& a : g.actions) n += recomputes_alone(stages, a);
  }
  return n;
}

// Micro-batches recomputed one at a time: an R action on a stage that keeps its activations
// (no recompute policy, no recompute_layers) marks a micro-batch whose F kept only what a full
// recompute keeps, each layer's input; its R runs the forward again and holds the rest until
// the W or fused B that frees them (docs/plan-format.md, "Actions"). Built from one group's
// order; empty, and free to ask, for a plan without such actions.
class RecomputedMicroBatches {
 public:
  RecomputedMicroBatches(const std::vector<Stage>& stages, const std::vector<Action>& actions) {
    for (const Action& a : actions) {
      if (recomputes_alone(stages, a)) keys_.push_back(key(a.stage, a.micro_batch));
    }
    std::sort(keys_.begin(), keys_.end());
  }
  bool empty() const { return keys_.empty(); }
  bool contains(int stage, int micro_batch) const {
    return !keys_.empty() &&
           std::binary_search(keys_.begin(), keys_.end(), key(stage, micro_batch));
  }
  // The activation bytes `a` adds to its group (negative: frees), its stage keeping `kept` per
  // micro-batch and `recomputed` when a micro-batch is recomputed in full.
  double change(const Action& a, double kept, double recomputed) const {
    const bool dropped = contains(a.stage, a.micro_batch);
    const double first = dropped ? std::min(kept, recomputed) : kept;
    switch (a.kind) {
      case ActionKind::kForward:
        return first;
      case ActionKind::kRecompute:
        return kept - first;
      case ActionKind::kBackward:
      case ActionKind::kBackwardWeight:
        return -kept;
      case ActionKind::kBackwardInput:
        return 0;
    }
    return 0;
  }

 private:
  static int64_t key(int stage, int micro_batch) {
    return (static_cast<int64_t>(stage) << 32) | static_cast<uint32_t>(micro_batch);
  }
  std::vector<int64_t> keys_;
};

// I or fused B: the actions that produce a stage input's gradient.
inline bool is_input_backward(ActionKind kind) {
  return kind == ActionKind::kBackwardInput || kind == ActionKind::kBackward;
}

// The inputs of `action` in a pipeline of `shape.stages` stages, the same-stage one first:
//   F(s)      <- F(s-1)                      (s > 0; crosses stages)
//   R(s)      <- F(s)
//   I(s), B(s) <- F(s), input backward of s+1 (s < last; crosses stages), R(s) (optional)
//   W(s)      <- I(s)
// With vocabulary shards of the head [b, n) the shards run side by side after stage b-1:
//   F(shard)  <- F(b-1)                            (crosses stages)
//   I(shard), B(shard) <- F(shard), F of every shard (the loss's statistics; crosses stages)
//   I(b-1), B(b-1) <- F(b-1), input backward of every shard (their partial gradients summed)
// With vocabulary shards of the embedding [0, a) they run side by side before stage a:
//   F(shard)  <- nothing (the tokens)
//   F(a)      <- F of every shard (their partial embeddings summed; crosses stages)
//   I(shard), B(shard) <- F(shard), input backward of a (crosses stages), R (optional)
// REQUIRES: 0 <= action.stage < shape.stages. Inline: lowering, the task graph and the
// simulator ask it for every action of every plan.
inline Dependencies data_dependencies(const Action& a, const PipelineShape& shape) {
  MOTLEY_CHECK(a.stage >= 0 && a.stage < shape.stages, "data_dependencies: stage out of range");
  const int s = a.stage;
  const int j = a.micro_batch;
  const int b = shape.first_shard();
  const int e = shape.embedding_shards;
  const bool shard = shape.is_shard(s);
  const bool embedding = shape.is_embedding_shard(s);
  Dependencies deps;
  switch (a.kind) {
    case ActionKind::kForward:
      if (embedding) {
        break;
      } else if (e > 0 && s == e) {
        deps.push_back({Producer::kForward, 0, j, false, true, e});
      } else if (shard) {
        deps.push_back({Producer::kForward, b - 1, j, false, true, 1});
      } else if (s > 0) {
        deps.push_back({Producer::kForward, s - 1, j, false, true, 1});
      }
      break;
    case ActionKind::kRecompute:
      deps.push_back({Producer::kForward, s, j, false, false, 1});
      break;
    case ActionKind::kBackwardInput:
    case ActionKind::kBackward: {
      deps.push_back({Producer::kForward, s, j, false, false, 1});
      const int next = embedding ? e : s + 1;
      if (shard) {
        deps.push_back({Producer::kForward, b, j, false, true, shape.vocab_shards});
      } else if (shape.vocab_shards > 0 && next == b) {
        deps.push_back({Producer::kInputBackward, b, j, false, true, shape.vocab_shards});
      } else if (next < shape.stages) {
        deps.push_back({Producer::kInputBackward, next, j, false, true, 1});
      }
      deps.push_back({Producer::kRecompute, s, j, true, false, 1});
      break;
    }
    case ActionKind::kBackwardWeight:
      deps.push_back({Producer::kBackwardInput, s, j, false, false, 1});
      break;
  }
  return deps;
}

// The actions of other stages that consume `action`'s output — the activation of F(s) goes to
// F(s+1) (to every head shard's F after stage b-1; a head shard's statistics to every head
// shard's input backward; an embedding shard's partial embedding to F(a)), the input gradient
// of I(s) or B(s) to the input backward of s-1 (of b-1 from every head shard; of every
// embedding shard from stage a) — or nullopt (the last stage's F without shards, the first
// stage's backward and every embedding shard's, W and R). The inverse of the crossing inputs of
// data_dependencies: its `stage`, `count` and `micro_batch` name the consumers, `producer` the
// kind of the consumers' own action (kForward or kInputBackward).
inline std::optional<Dependency> downstream_consumer(const Action& a, const PipelineShape& shape) {
  MOTLEY_CHECK(a.stage >= 0 && a.stage < shape.stages, "downstream_consumer: stage out of range");
  const int s = a.stage;
  const int b = shape.first_shard();
  const int e = shape.embedding_shards;
  if (a.kind == ActionKind::kForward) {
    if (shape.is_embedding_shard(s)) {
      return Dependency{Producer::kForward, e, a.micro_batch, false, true, 1};
    }
    if (shape.is_shard(s) || (shape.vocab_shards > 0 && s + 1 == b)) {
      const Producer consumer = shape.is_shard(s) ? Producer::kInputBackward : Producer::kForward;
      return Dependency{consumer, b, a.micro_batch, false, true, shape.vocab_shards};
    }
    if (s + 1 < shape.stages) {
      return Dependency{Producer::kForward, s + 1, a.micro_batch, false, true, 1};
    }
  }
  if (is_input_backward(a.kind) && s > 0 && !shape.is_embedding_shard(s)) {
    if (e > 0 && s == e) {
      return Dependency{Producer::kInputBackward, 0, a.micro_batch, false, true, e};
    }
    const int to = shape.is_shard(s) ? b - 1 : s - 1;
    return Dependency{Producer::kInputBackward, to, a.micro_batch, false, true, 1};
  }
  return std::nullopt;
}

// A pipeline without vocabulary shards.
inline Dependencies data_dependencies(const Action& a, int num_stages) {
  return data_dependencies(a, PipelineShape{num_stages, 0});
}
inline std::optional<Dependency> downstream_consumer(const Action& a, int num_stages) {
  return downstream_consumer(a, PipelineShape{num_stages, 0});
}

}  // namespace motley
