#include "optimizer.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <tuple>

namespace motley::internal {

struct AdamWStep::Impl {
  std::vector<at::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> optimizer;
};

AdamWStep::AdamWStep(std::vector<at::Tensor> params, const OptimizerOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->params = params;
  torch::optim::AdamWOptions adamw(options.learning_rate);
  adamw.betas(std::make_tuple(options.beta1, options.beta2));
  adamw.eps(options.epsilon);
  adamw.weight_decay(options.weight_decay);
  impl_->optimizer = std::make_unique<torch::optim::AdamW>(std::move(params), adamw);
}

AdamWStep::~AdamWStep() = default;

void AdamWStep::materialize_gradients() {
  for (at::Tensor& p : impl_->params) {
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
  }
}

void AdamWStep::step() {
  materialize_gradients();
  impl_->optimizer->step();
}

void AdamWStep::zero_gradients() { impl_->optimizer->zero_grad(); }

// torch::optim keys its per-parameter state by the address of the parameter's TensorImpl,
// printed as c10::guts::to_string prints it (torch/csrc/api/src/optim/adamw.cpp).
std::optional<AdamWStep::State> AdamWStep::state(const at::Tensor& param) const {
  auto& states = impl_->optimizer->state();
  auto it = states.find(c10::guts::to_string(param.unsafeGetTensorImpl()));
  if (it == states.end()) return std::nullopt;
  const auto& adamw = static_cast<const torch::optim::AdamWParamState&>(*it->second);
  return State{adamw.step(), adamw.exp_avg(), adamw.exp_avg_sq()};
}

void AdamWStep::set_state(const at::Tensor& param, const State& state) {
  auto adamw = std::make_unique<torch::optim::AdamWParamState>();
  adamw->step(state.step);
  adamw->exp_avg(state.exp_avg.clone());
  adamw->exp_avg_sq(state.exp_avg_sq.clone());
  impl_->optimizer->state()[c10::guts::to_string(param.unsafeGetTensorImpl())] = std::move(adamw);
}

at::Tensor loss_seed(int64_t total_micro_batches, const at::Tensor& loss) {
  return at::full({}, 1.0 / static_cast<double>(total_micro_batches), loss.options());
}

}  // namespace motley::internal
