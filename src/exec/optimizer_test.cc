// AdamWStep, the update every rank and the sequential reference apply: its state is per tensor,
// so any split of the parameters over optimizers (pipeline stages, ZeRO-1 owners) takes the
// same steps, and a state set from a checkpoint continues them exactly.
#include "optimizer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace motley::internal {
namespace {

at::Tensor leaf(std::vector<float> values) {
  return at::tensor(values, at::kFloat).requires_grad_(true);
}

void set_gradient(at::Tensor& p, float scale) {
  p.mutable_grad() = at::arange(p.numel(), at::kFloat).mul_(scale).sub_(1.0);
}

TEST(AdamWStep, SplittingTheParametersOverOptimizersChangesNoBitAndAStateResumes) {
  const OptimizerOptions options;
  at::Tensor a = leaf({0.5f, -1.0f, 2.0f}), b = leaf({3.0f, 0.25f});
  at::Tensor a2 = a.detach().clone().requires_grad_(true);
  at::Tensor b2 = b.detach().clone().requires_grad_(true);
  AdamWStep together({a, b}, options);
  AdamWStep first({a2}, options), second({b2}, options);
  for (int step = 0; step < 3; ++step) {
    together.zero_gradients();
    first.zero_gradients();
    second.zero_gradients();
    for (at::Tensor* p : {&a, &a2}) set_gradient(*p, 0.3f * static_cast<float>(step + 1));
    for (at::Tensor* p : {&b, &b2}) set_gradient(*p, -0.7f);
    together.step();
    first.step();
    second.step();
  }
  EXPECT_TRUE(at::equal(a, a2));
  EXPECT_TRUE(at::equal(b, b2));
  EXPECT_EQ(together.state(a)->step, 3);
  EXPECT_TRUE(at::equal(together.state(b)->exp_avg_sq, second.state(b2)->exp_avg_sq));

  // And a state set from another optimizer (a checkpoint's) continues its steps exactly.
  at::Tensor q = a.detach().clone().requires_grad_(true);
  AdamWStep resumed({q}, options);
  resumed.set_state(q, *together.state(a));
  for (at::Tensor* t : {&a, &q}) set_gradient(*t, -0.2f);
  together.step();
  resumed.step();
  EXPECT_TRUE(at::equal(a, q));
  EXPECT_EQ(resumed.state(q)->step, 4);
}

TEST(AdamWStep, AParameterWithoutAGradientStillDecaysAndTheSeedIsOneOverTheMicroBatches) {
  OptimizerOptions options;
  options.learning_rate = 0.5;
  options.weight_decay = 0.25;
  at::Tensor p = leaf({2.0f, -4.0f});
  AdamWStep adamw({p}, options);
  EXPECT_FALSE(adamw.state(p).has_value());  // nothing before the first step
  adamw.step();  // a zero gradient: the moments stay 0, only the decay p *= 1 - lr * wd moves p
  EXPECT_TRUE(at::equal(p, at::tensor({1.75f, -3.5f})));
  ASSERT_TRUE(adamw.state(p).has_value());
  EXPECT_TRUE(at::equal(adamw.state(p)->exp_avg, at::zeros({2})));

  // The loss seed: 1 / (micro-batches of the global batch), in the loss's dtype.
  const at::Tensor seed = loss_seed(8, at::zeros({}, at::kFloat));
  EXPECT_EQ(seed.scalar_type(), at::kFloat);
  EXPECT_EQ(seed.item<float>(), 0.125f);
}

}  // namespace
}  // namespace motley::internal
