// The dependency rule between a plan's compute actions — which action's result each one
// consumes — written once for every reader of plans: validation, lowering, the simulator, the
// executor and the schedule generators' timing estimates (docs/plan-format.md,
// "Dependencies"). Data only: it knows nothing of groups, orders or time. Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

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
  friend bool operator==(const Dependency&, const Dependency&) = default;
};

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
// activations of its stage, W (or a fused B) releases them; I and R change nothing.
inline bool allocates_activations(ActionKind kind) { return kind == ActionKind::kForward; }
inline bool frees_activations(ActionKind kind) {
  return kind == ActionKind::kBackwardWeight || kind == ActionKind::kBackward;
}
// I or fused B: the actions that produce a stage input's gradient.
inline bool is_input_backward(ActionKind kind) {
  return kind == ActionKind::kBackwardInput || kind == ActionKind::kBackward;
}

// The inputs of `action` in a pipeline of `num_stages` stages, the same-stage one first:
//   F(s)      <- F(s-1)                      (s > 0; crosses stages)
//   R(s)      <- F(s)
//   I(s), B(s) <- F(s), input backward of s+1 (s < last; crosses stages), R(s) (optional)
//   W(s)      <- I(s)
// REQUIRES: 0 <= action.stage < num_stages. Inline: lowering, the task graph and the simulator
// ask it for every action of every plan.
inline Dependencies data_dependencies(const Action& a, int num_stages) {
  MOTLEY_CHECK(a.stage >= 0 && a.stage < num_stages, "data_dependencies: stage out of range");
  const int s = a.stage;
  const int j = a.micro_batch;
  Dependencies deps;
  switch (a.kind) {
    case ActionKind::kForward:
      if (s > 0) deps.push_back({Producer::kForward, s - 1, j, false, true});
      break;
    case ActionKind::kRecompute:
      deps.push_back({Producer::kForward, s, j, false, false});
      break;
    case ActionKind::kBackwardInput:
    case ActionKind::kBackward:
      deps.push_back({Producer::kForward, s, j, false, false});
      if (s + 1 < num_stages) deps.push_back({Producer::kInputBackward, s + 1, j, false, true});
      deps.push_back({Producer::kRecompute, s, j, true, false});
      break;
    case ActionKind::kBackwardWeight:
      deps.push_back({Producer::kBackwardInput, s, j, false, false});
      break;
  }
  return deps;
}

// The action of another stage that consumes `action`'s output — the activation of F(s) goes to
// F(s+1), the input gradient of I(s) or B(s) to the input backward of s-1 — or nullopt (the
// last stage's F, the first stage's backward, W and R). The inverse of the crossing inputs of
// data_dependencies: its `stage` and `micro_batch` name the consumer, `producer` the kind of
// the consumer's own action (kForward or kInputBackward).
inline std::optional<Dependency> downstream_consumer(const Action& a, int num_stages) {
  MOTLEY_CHECK(a.stage >= 0 && a.stage < num_stages, "downstream_consumer: stage out of range");
  if (a.kind == ActionKind::kForward && a.stage + 1 < num_stages) {
    return Dependency{Producer::kForward, a.stage + 1, a.micro_batch, false, true};
  }
  if (is_input_backward(a.kind) && a.stage > 0) {
    return Dependency{Producer::kInputBackward, a.stage - 1, a.micro_batch, false, true};
  }
  return std::nullopt;
}

}  // namespace motley
