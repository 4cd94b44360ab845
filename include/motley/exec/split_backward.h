// A backward pass split as zero-bubble schedules split it (Qi et al., ICLR 2024): B computes the
// input gradients through a stage and the gradients of every parameter outside the weight
// products, and hands W the operands of each weight product's gradient, dW = dYᵀ·X, which W
// computes without walking the graph again. The weight products are the layers' matrix products
// with a parameter, `weight_product` below; everything else (norms, the embedding's lookup,
// convolutions, the scan's parameters) gets its gradient in B, as in the zero-bubble authors'
// Megatron-LM implementation, where only linear layers defer their weight gradients.
//
// `weight_product` computes the same gradient by the same formula whether it is deferred or not,
// so a split backward accumulates the same bits as a fused one. Thread-compatible: one
// SplitBackward per thread that runs forwards (a rank's).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

namespace motley {

// The weight-gradient products one micro-batch's B left for its W, in the order B reached them.
class DeferredWeightGradients {
 public:
  struct Product {
    at::Tensor input;        // X, as the product read it (after any autocast cast)
    at::Tensor grad_output;  // dY
    at::Tensor weight;       // the parameter that receives dW (a leaf)
    int64_t first_row = 0;   // dW covers rows [first_row, first_row + dY's width) of `weight`
  };

  bool empty() const { return products_.empty(); }
  size_t size() const { return products_.size(); }
  void add(Product p) { products_.push_back(std::move(p)); }

  // W: computes every dW and accumulates it into its parameter's gradient as libtorch's engine
  // would have at the end of a fused backward: a parameter's contributions summed in the order B
  // reached them, each cast to the parameter's dtype first, then added to its gradient (or made
  // its gradient). Empties this object.
  void apply();

 private:
  std::vector<Product> products_;
};

// Where the weight products of the forwards run while a SplitBackward::Recording lives send
// their gradient work when a split B runs.
class SplitBackward {
 public:
  SplitBackward() = default;
  SplitBackward(const SplitBackward&) = delete;
  SplitBackward& operator=(const SplitBackward&) = delete;

  // While alive, the weight products this thread computes (with a graph) record `owner` as the
  // place to defer their weight gradients to. Scopes nest; the innermost wins.
  class Recording {
   public:
    explicit Recording(SplitBackward& owner);
    ~Recording();
    Recording(const Recording&) = delete;
    Recording& operator=(const Recording&) = delete;

   private:
    SplitBackward* previous_;
  };

  // B: backpropagates `grad_output` from `output`, accumulating into `params` (the stage's
  // parameters) the gradients of everything but the weight products recorded here, and returns
  // the gradient of `input` (undefined when `input` is undefined: a stage whose input is data).
  // The weight products' work goes into `deferred`. Frees the graph. Throws what libtorch throws.
  at::Tensor input_pass(const at::Tensor& output, const at::Tensor& grad_output,
                        const at::Tensor& input, const std::vector<at::Tensor>& params,
                        DeferredWeightGradients& deferred);

  // Whether a weight product recorded here reads `param`: the parameters whose gradients a split
  // backward accumulates in W rather than in B (gradient buckets wait for those in W).
  bool defers(const at::TensorImpl* param) const;

  // Called from a weight product's forward: it reads `param` and records here.
  void note(const at::Tensor& param);
  // Called from a weight product's backward (possibly on the autograd engine's thread): whether
  // a split B is running, and if so takes the product's work.
  bool take(DeferredWeightGradients::Product& product);

 private:
  mutable std::mutex mutex_;
  DeferredWeightGradients* sink_ = nullptr;  // set while input_pass runs
  std::set<const at::TensorImpl*> deferring_params_;
};

// x·wᵀ (+ b), the product of a layer's input with a weight matrix (a parameter, or rows
// [first_row, first_row + rows) of one when `rows` >= 0), under autocast as at::linear runs it
// (operands cast to the autocast type), the bias added after the product. Its backward computes
// the input's gradient, and the weight's now, or, during a split B of a SplitBackward recorded at
// its forward, in W; the bias's gradient always comes in B.
at::Tensor weight_product(const at::Tensor& x, const at::Tensor& weight,
                          const at::Tensor& bias = at::Tensor(), int64_t first_row = 0,
                          int64_t rows = -1);

}  // namespace motley
