#include "motley/exec/split_backward.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <functional>
#include <memory>
#include <vector>

#include "motley/exec/precision.h"

namespace motley {
namespace {

// A small block with every kind of use a stage makes of its parameters: a norm-like scale (no
// weight product), a product with a bias, rows of a matrix (a vocabulary-parallel head's), and
// one matrix read by two products in the same forward (an expert run on two members' rows).
struct Block {
  Block() {
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(7);
    auto draw = [&g](at::IntArrayRef shape) {
      at::Tensor t = at::empty(shape, at::kFloat);
      t.normal_(0.0, 0.5, g);
      return t.requires_grad_(true);
    };
    scale = draw({8});
    w1 = draw({12, 8});
    b1 = draw({12});
    shared = draw({12, 12});
    head = draw({10, 12});
    input = draw({2, 5, 8});
  }
  std::vector<at::Tensor> params() const { return {scale, w1, b1, shared, head}; }

  at::Tensor forward() const {
    const at::Tensor h = at::gelu(weight_product(input * scale, w1, b1));
    const at::Tensor a = weight_product(h.narrow(1, 0, 3), shared);
    const at::Tensor b = weight_product(h.narrow(1, 3, 2), shared);
    const at::Tensor y = at::cat({a, b}, 1).tanh();
    return weight_product(y, head, at::Tensor(), 4, 6);  // rows 4..9 of the head
  }

  void clear() {
    for (at::Tensor p : params()) p.mutable_grad() = at::Tensor();
    input.mutable_grad() = at::Tensor();
  }

  at::Tensor scale, w1, b1, shared, head, input;
};

at::Tensor seed_for(const at::Tensor& output, int k) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(100 + k);
  at::Tensor t = at::empty(output.sizes(), output.options().dtype(at::kFloat));
  t.normal_(0.0, 1.0, g);
  return t.to(output.scalar_type());
}

// Two micro-batches with fused backwards, then the same split as zero-bubble schedules run it
// (F1 F2 B1 B2 W1 W2): every gradient must come out with the same bits.
void expect_split_matches_fused(Precision precision) {
  Block block;
  std::vector<at::Tensor> fused_grads;
  at::Tensor fused_input_grad;
  {
    const AutocastGuard autocast(precision);
    for (int k = 0; k < 2; ++k) {
      const at::Tensor out = block.forward();
      std::vector<at::Tensor> inputs = block.params();
      inputs.push_back(block.input);
      torch::autograd::backward({out}, {seed_for(out, k)}, false, false, inputs);
    }
  }
  for (const at::Tensor& p : block.params()) fused_grads.push_back(p.grad().clone());
  fused_input_grad = block.input.grad().clone();
  block.clear();

  SplitBackward split;
  DeferredWeightGradients deferred[2];
  at::Tensor input_grads[2];
  {
    const AutocastGuard autocast(precision);
    const SplitBackward::Recording recording(split);
    at::Tensor outs[2] = {block.forward(), block.forward()};
    for (int k = 0; k < 2; ++k) {
      input_grads[k] =
          split.input_pass(outs[k], seed_for(outs[k], k), block.input, block.params(), deferred[k])
              .clone();
    }
    // B computed the norm-like scale's and the bias's gradients and left every product's
    // weight for W: the first product, the two reads of the shared matrix, the head's rows.
    EXPECT_TRUE(block.scale.grad().defined());
    EXPECT_TRUE(block.b1.grad().defined());
    for (const at::Tensor& p : {block.w1, block.shared, block.head}) {
      EXPECT_FALSE(p.grad().defined());
    }
    EXPECT_EQ(deferred[0].size(), 4u);
    EXPECT_EQ(deferred[1].size(), 4u);
    deferred[0].apply();
    EXPECT_TRUE(deferred[0].empty());
    deferred[1].apply();
  }
  // B returned the input's gradient so far: after both, the fused run's.
  EXPECT_TRUE(at::equal(input_grads[1], fused_input_grad));
  EXPECT_TRUE(at::equal(block.input.grad(), fused_input_grad));
  const std::vector<at::Tensor> params = block.params();
  const char* names[] = {"scale", "w1", "b1", "shared", "head"};
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(params[i].grad().defined()) << names[i];
    EXPECT_TRUE(at::equal(params[i].grad(), fused_grads[i])) << names[i];
  }
  // Rows of the head no product read get no gradient.
  EXPECT_TRUE(at::equal(block.head.grad().narrow(0, 0, 4), at::zeros({4, 12})));
}

TEST(SplitBackward, WeightGradientsLeftForWMatchAFusedBackwardBitForBit) {
  expect_split_matches_fused(Precision::kFp32);
}

TEST(SplitBackward, UnderBf16AutocastTooTheBitsMatch) {
  if (!cpu_bf16_autocast_available()) GTEST_SKIP() << "no CPU bf16 autocast in this libtorch";
  expect_split_matches_fused(Precision::kBf16Autocast);
}

TEST(SplitBackward, WithoutARecordingAProductComputesItsWeightGradientAtOnce) {
  Block block;
  SplitBackward split;
  DeferredWeightGradients deferred;
  const at::Tensor out = block.forward();  // no Recording: nothing to defer to
  split.input_pass(out, seed_for(out, 0), block.input, block.params(), deferred);
  EXPECT_TRUE(deferred.empty());
  for (const at::Tensor& p : block.params()) EXPECT_TRUE(p.grad().defined());
}

TEST(SplitBackward, AFusedBackwardOfARecordedForwardDefersNothing) {
  Block block;
  SplitBackward split;
  const SplitBackward::Recording recording(split);
  const at::Tensor out = block.forward();
  torch::autograd::backward({out}, {seed_for(out, 0)}, false, false, block.params());
  for (const at::Tensor& p : block.params()) EXPECT_TRUE(p.grad().defined());
}

TEST(SplitBackward, WRunsTheParametersAccumulatorHooksOnceWithTheGradient) {
  // Gradient buckets learn that a gradient is final from a post hook of its accumulator. Each
  // call records whether the parameter had a gradient by then.
  struct Seen final : torch::autograd::FunctionPostHook {
    Seen(const at::Tensor& param, std::vector<bool>* calls) : param(param), calls(calls) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list&) override {
      calls->push_back(param.grad().defined());
      return outputs;
    }
    at::Tensor param;
    std::vector<bool>* calls;
  };
  Block block;
  std::vector<bool> calls;
  // Held, as GradientBuckets holds it: a parameter keeps only a weak reference to it.
  const std::shared_ptr<torch::autograd::Node> accumulator =
      torch::autograd::impl::grad_accumulator(block.shared);
  accumulator->add_post_hook(std::make_unique<Seen>(block.shared, &calls));
  SplitBackward split;
  DeferredWeightGradients deferred;
  {
    const SplitBackward::Recording recording(split);
    const at::Tensor out = block.forward();
    split.input_pass(out, seed_for(out, 0), block.input, block.params(), deferred);
  }
  // B may reach the accumulator (libtorch runs it with no gradient), never with one.
  const size_t in_b = calls.size();
  for (bool had : calls) EXPECT_FALSE(had);
  EXPECT_TRUE(split.defers(block.shared.unsafeGetTensorImpl()));
  EXPECT_FALSE(split.defers(block.scale.unsafeGetTensorImpl()));
  deferred.apply();
  // Once more, for both reads of the matrix together, as the engine would.
  ASSERT_EQ(calls.size(), in_b + 1);
  EXPECT_TRUE(calls.back());
}

TEST(SplitBackward, IFreesTheGraph) {
  // W needs only what I left it, so I keeps no graph: a second backward through it fails, as
  // after any backward that does not retain the graph.
  Block block;
  SplitBackward split;
  DeferredWeightGradients deferred;
  const SplitBackward::Recording recording(split);
  const at::Tensor out = block.forward();
  const at::Tensor seed = seed_for(out, 0);
  split.input_pass(out, seed, block.input, block.params(), deferred);
  EXPECT_THROW(torch::autograd::backward({out}, {seed}), c10::Error);
  deferred.apply();
  EXPECT_TRUE(block.w1.grad().defined());
}

TEST(SplitBackward, AStageWhoseInputIsDataStillLeavesItsProductsForW) {
  Block block;
  block.input = block.input.detach();  // data: no gradient wanted
  SplitBackward split;
  DeferredWeightGradients deferred;
  {
    const SplitBackward::Recording recording(split);
    const at::Tensor out = block.forward();
    EXPECT_FALSE(
        split.input_pass(out, seed_for(out, 0), at::Tensor(), block.params(), deferred).defined());
  }
  EXPECT_EQ(deferred.size(), 4u);
  EXPECT_TRUE(block.scale.grad().defined());
  deferred.apply();
  EXPECT_TRUE(block.head.grad().defined());
}

}  // namespace
}  // namespace motley
