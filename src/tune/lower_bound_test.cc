// The iteration-time lower bound in closed-form cases.
#include <gtest/gtest.h>

#include "context.h"
#include "tune_test_util.h"

namespace motley::tune_internal::tune_testing {
namespace {

TEST(LowerBoundTest, OneLayerKindOnIdenticalDevicesIsTheWorkOverTheDevices) {
  // Six layers of F + B + W = 3 ms, nothing to update, 8 micro-batches on 4 H100s:
  // 8 x 6 x 3 ms / 4 = 36 ms. Tensor parallelism does not help (t devices for the same time).
  FixedCostSpec spec;
  for (int i = 0; i < 6; ++i) spec.layers.push_back(layer_ms(1, 1, 1));
  Fixture fx(6, {"H100-SXM"}, 4, 8, spec);
  EXPECT_NEAR(lower_bound(*fx.ctx).value(), 36e-3, 1e-15);
  // Eight devices in two nodes halve it.
  Fixture two(6, {"H100-SXM", "H100-SXM"}, 4, 8, spec);
  EXPECT_NEAR(lower_bound(*two.ctx).value(), 18e-3, 1e-15);
}

TEST(LowerBoundTest, AddsOneOptimizerPassPerLayer) {
  // Each layer also updates 2 GB of weights, 1 GB of gradients and 3 GB of optimizer state at
  // the H100's memory bandwidth: (1 + 2 x 3 + 2) GB per layer, once per iteration.
  FixedCostSpec spec;
  for (int i = 0; i < 6; ++i) {
    FixedLayer l = layer_ms(1, 1, 1, 2);
    l.gradients = Bytes(1e9);
    l.optimizer_state = Bytes(3e9);
    spec.layers.push_back(l);
  }
  Fixture fx(6, {"H100-SXM"}, 4, 8, spec);
  const double bandwidth = fx.ctx->types()[0].type->memory_bandwidth.value();
  EXPECT_NEAR(lower_bound(*fx.ctx).value(), (8 * 6 * 3e-3 + 6 * 9e9 / bandwidth) / 4, 1e-15);
}

TEST(LowerBoundTest, TheBestMicroBatchSizeCounts) {
  // A cost that does not grow with the micro-batch: with sizes 1, 2 and 4 allowed, 8 sequences
  // are 2 micro-batches of 4, a quarter of the work of 8 of 1 (9 ms over the 4 devices) — but
  // one micro-batch's critical path is F through the 6 layers and B back through 5 (the first
  // layer's input needs no gradient): 11 ms. Micro-batches of 2: 18 ms of work per device.
  FixedCostSpec spec;
  for (int i = 0; i < 6; ++i) spec.layers.push_back(layer_ms(1, 1, 1));
  TuneOptions options = fixed_options(8, spec);
  options.micro_batch_size = 0;  // 1, 2 or 4
  Fixture fx(tiny_model(6), fixed_cluster({"H100-SXM"}, 4), options);
  EXPECT_NEAR(lower_bound(*fx.ctx).value(), 11e-3, 1e-15);
}

TEST(LowerBoundTest, OneMicroBatchTakesAtLeastItsCriticalPath) {
  // One sequence on eight devices: its work spread over them would be 6 x 3 ms / 8 = 2.25 ms,
  // but its forward through the six layers and its input gradient back through five take
  // 1 + 5 x (1 + 2) = 16 ms on any group (the weight gradients can wait).
  FixedCostSpec spec;
  for (int i = 0; i < 6; ++i) spec.layers.push_back(layer_ms(1, 2, 1));
  Fixture fx(6, {"H100-SXM", "H100-SXM"}, 4, 1, spec);
  EXPECT_NEAR(lower_bound(*fx.ctx).value(), 16e-3, 1e-15);
  // With a batch large enough, the work is the bound again: 64 x 6 x 4 ms / 8 = 192 ms.
  Fixture large(6, {"H100-SXM", "H100-SXM"}, 4, 64, spec);
  EXPECT_NEAR(lower_bound(*large.ctx).value(), 192e-3, 1e-15);
}

}  // namespace
}  // namespace motley::tune_internal::tune_testing
