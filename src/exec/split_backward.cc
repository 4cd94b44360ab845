#include "motley/exec/split_backward.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <map>

namespace motley {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local SplitBackward* current_recording = nullptr;

// The product's operand as autocast would hand it to at::linear: cast to the autocast dtype when
// autocast is on for its device and it is a floating tensor of another (non-double) type, as
// libtorch 1.13's cached_cast does with the cache off (AutocastGuard keeps it off).
at::Tensor autocast_operand(const at::Tensor& t) {
  if (!t.defined() || !t.is_floating_point() || t.scalar_type() == at::kDouble) return t;
  const bool cpu = t.device().is_cpu();
  const bool on = cpu ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
  if (!on) return t;
  const at::ScalarType to =
      cpu ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
  return t.scalar_type() == to ? t : t.to(to);
}

// dW = dYᵀ·X over every row of the batch: one formula for a fused backward and for W, so both
// give the same bits.
at::Tensor product_weight_grad(const at::Tensor& x, const at::Tensor& dy) {
  return dy.reshape({-1, dy.size(-1)}).t().mm(x.reshape({-1, x.size(-1)}));
}

// The parameter a deferred product's weight gradient goes to. Not a tensor of the product's
// graph: passed as a value, so that libtorch does not make it an input of the function.
struct DeferralTarget {
  at::Tensor weight;
  int64_t first_row = 0;
};

// x·wᵀ, whose weight gradient may wait for W. Saved beside X and W: the SplitBackward recorded
// at the forward (0 for none) and, for a deferral, the parameter and the first row. The
// arguments are, by index: x, w, split, target (the backward returns one gradient for each,
// undefined for the last two).
struct WeightProductFn : torch::autograd::Function<WeightProductFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            SplitBackward* split, const DeferralTarget& target) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["split"] = reinterpret_cast<int64_t>(split);
    if (split != nullptr) {
      ctx->saved_data["weight"] = target.weight;
      ctx->saved_data["first_row"] = target.first_row;
    }
    return at::matmul(x, w.t());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const at::Tensor& dy = grads[0];
    variable_list out(4);
    if (ctx->needs_input_grad(0)) out[0] = dy.matmul(w);
    auto* split = reinterpret_cast<SplitBackward*>(ctx->saved_data["split"].toInt());
    if (split != nullptr) {
      DeferredWeightGradients::Product p{x, dy, ctx->saved_data["weight"].toTensor(),
                                         ctx->saved_data["first_row"].toInt()};
      if (split->take(p)) return out;
    }
    if (ctx->needs_input_grad(1)) out[1] = product_weight_grad(x, dy);
    return out;
  }
};

// A contribution to a parameter's gradient: the whole tensor, zeros outside rows
// [first_row, first_row + rows) for a product of some of its rows, in the parameter's dtype (what
// the engine's slice and cast backward functions pass on).
at::Tensor gradient_contribution(const at::Tensor& grad, const at::Tensor& param,
                                 int64_t first_row) {
  at::Tensor g = grad.scalar_type() == param.scalar_type() ? grad : grad.to(param.scalar_type());
  if (g.size(0) == param.size(0)) return g;
  at::Tensor whole = at::zeros_like(param);
  whole.narrow(0, first_row, g.size(0)).copy_(g);
  return whole;
}

}  // namespace

void DeferredWeightGradients::apply() {
  at::NoGradGuard no_grad;
  // Per parameter, its contributions summed in the order B reached them (the engine's input
  // buffer), then accumulated once.
  std::vector<at::Tensor> params;
  std::map<const at::TensorImpl*, at::Tensor> sums;
  auto add = [&](const at::Tensor& param, const at::Tensor& c) {
    auto [it, fresh] = sums.try_emplace(param.unsafeGetTensorImpl(), c);
    if (fresh) {
      params.push_back(param);
    } else {
      it->second = it->second + c;
    }
  };
  for (const Product& p : products_) {
    add(p.weight,
        gradient_contribution(product_weight_grad(p.input, p.grad_output), p.weight, p.first_row));
  }
  // Through the parameter's own accumulator, as the engine calls it: the same accumulation,
  // and its hooks (a gradient bucket learns that the gradient is final) run.
  for (at::Tensor& param : params) {
    const std::shared_ptr<torch::autograd::Node> node =
        torch::autograd::impl::grad_accumulator(param);
    const variable_list in{sums.at(param.unsafeGetTensorImpl())};
    variable_list out = (*node)(variable_list(in));
    for (const auto& hook : node->post_hooks()) out = (*hook)(out, in);
  }
  products_.clear();
}

SplitBackward::Recording::Recording(SplitBackward& owner) : previous_(current_recording) {
  current_recording = &owner;
}

SplitBackward::Recording::~Recording() { current_recording = previous_; }

at::Tensor SplitBackward::input_pass(const at::Tensor& output, const at::Tensor& grad_output,
                                     const at::Tensor& input, const std::vector<at::Tensor>& params,
                                     DeferredWeightGradients& deferred) {
  std::vector<at::Tensor> inputs = params;
  if (input.defined()) inputs.push_back(input);
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    sink_ = &deferred;
  }
  struct Reset {
    SplitBackward& s;
    ~Reset() {
      const std::lock_guard<std::mutex> lock(s.mutex_);
      s.sink_ = nullptr;
    }
  } reset{*this};
  torch::autograd::backward({output}, {grad_output}, /*retain_graph=*/false,
                            /*create_graph=*/false, inputs);
  return input.defined() ? input.grad() : at::Tensor();
}

bool SplitBackward::defers(const at::TensorImpl* param) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return deferring_params_.count(param) != 0;
}

void SplitBackward::note(const at::Tensor& param) {
  const std::lock_guard<std::mutex> lock(mutex_);
  deferring_params_.insert(param.unsafeGetTensorImpl());
}

bool SplitBackward::take(DeferredWeightGradients::Product& product) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (sink_ == nullptr) return false;
  sink_->add(std::move(product));
  return true;
}

at::Tensor weight_product(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                          int64_t first_row, int64_t rows) {
  const at::Tensor w = rows >= 0 ? weight.narrow(0, first_row, rows) : weight;
  // Deferred only with a graph, and only for a parameter (a leaf).
  SplitBackward* split = current_recording;
  if (split != nullptr &&
      (!at::GradMode::is_enabled() || !weight.requires_grad() || !weight.is_leaf())) {
    split = nullptr;
  }
  if (split != nullptr) split->note(weight);
  const at::Tensor y = WeightProductFn::apply(autocast_operand(x), autocast_operand(w), split,
                                              DeferralTarget{weight, rows >= 0 ? first_row : 0});
  // The bias is added after the product, as at::linear adds it to a batch of matrices; its
  // gradient (a sum over rows) comes in B.
  return bias.defined() ? y + autocast_operand(bias) : y;
}

}  // namespace motley
