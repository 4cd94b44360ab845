// The dependency rule between a plan's compute actions — which action's result each one
// consumes — written once for every reader of plans: validation, lowering, the simulator, the
// executor and the schedule generators' timing estimates (docs/plan-format.md,
// "Dependencies"). Data only: it knows nothing of groups, orders or time. Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

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
  friend bool operator==(const Dependency&, const Dependency&) = default;
};

// At most three inputs, without allocating (the simulator asks this for every task).
class Dependencies {
 public:
  const Dependency* begin() const { return items_.data(); }
  const Dependency* end() const { return items_.data() + size_; }
  int size() const { return size_; }
  const Dependency& operator[](int i) const { return items_[i]; }
  void push_back(const Dependency& d) { items_[size_++] = d; }

 private:
  std::array<Dependency, 3> items_{};
  int size_ = 0;
};

// The inputs of `action` in a pipeline of `num_stages` stages, the same-stage one first:
//   F(s)      <- F(s-1)                      (s > 0; crosses stages)
//   R(s)      <- F(s)
//   I(s), B(s) <- F(s), input backward of s+1 (s < last; crosses stages), R(s) (optional)
//   W(s)      <- I(s)
// REQUIRES: 0 <= action.stage < num_stages.
Dependencies data_dependencies(const Action& action, int num_stages);

// The action of another stage that consumes `action`'s output — the activation of F(s) goes to
// F(s+1), the input gradient of I(s) or B(s) to the input backward of s-1 — or nullopt (the
// last stage's F, the first stage's backward, W and R). The inverse of the crossing inputs of
// data_dependencies: its `stage` and `micro_batch` name the consumer, `producer` the kind of
// the consumer's own action (kForward or kInputBackward).
std::optional<Dependency> downstream_consumer(const Action& action, int num_stages);

// The memory rule validation, the simulator and the tuner share: F allocates a micro-batch's
// activations of its stage, W (or a fused B) releases them; I and R change nothing.
inline bool allocates_activations(ActionKind kind) { return kind == ActionKind::kForward; }
inline bool frees_activations(ActionKind kind) {
  return kind == ActionKind::kBackwardWeight || kind == ActionKind::kBackward;
}
// I or fused B: the actions that produce a stage input's gradient.
inline bool is_input_backward(ActionKind kind) {
  return kind == ActionKind::kBackwardInput || kind == ActionKind::kBackward;
}

}  // namespace motley
