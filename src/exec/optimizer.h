// The update the executor's ranks and the sequential reference share, so that both apply the
// same one: the AdamW step over a set of parameters and the loss seed of one micro-batch. It
// does not decide which rank steps which parameter (zero1.h) or sum gradients
// (gradient_buckets.h). Internal to exec/. Not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <vector>

#include "motley/exec/executor.h"

namespace motley::internal {

// torch::optim::AdamW over `params` (one state per tensor, so any split of the parameters over
// ranks takes the same per-parameter steps).
class AdamWStep {
 public:
  AdamWStep(std::vector<at::Tensor> params, const OptimizerOptions& options);
  ~AdamWStep();
  // Gives every parameter without a gradient (an expert no token chose) a zero one, so weight
  // decay and the moments advance alike everywhere, and steps. The gradients stay readable
  // until zero_gradients(), which the next training step calls first.
  void step();
  void zero_gradients();

  // The optimizer's per-parameter state, for checkpoints; nullopt before the parameter's first
  // step. set_state replaces it (the next step continues from it).
  struct State {
    int64_t step = 0;
    at::Tensor exp_avg;
    at::Tensor exp_avg_sq;
  };
  std::optional<State> state(const at::Tensor& param) const;
  void set_state(const at::Tensor& param, const State& state);
  // Fills missing gradients with zeros (before an all-reduce).
  void materialize_gradients();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The gradient seed of one micro-batch's mean loss: 1 / (micro-batches in the global batch), so
// the accumulated gradient is that of the mean loss over the global batch; in `loss`'s dtype.
at::Tensor loss_seed(int64_t total_micro_batches, const at::Tensor& loss);

}  // namespace motley::internal
