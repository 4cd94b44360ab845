#include "motley/calibrate/stack_fit.h"

#include <gtest/gtest.h>

#include <cmath>

namespace motley {
namespace {

TEST(StackFitTest, SolvesALinearSystemExactly) {
  // 2x + y = 5, x + 3y = 10: x = 1, y = 3.
  std::vector<double> x;
  ASSERT_TRUE(solve_linear_system({2, 1, 1, 3}, {5, 10}, &x));
  EXPECT_NEAR(x[0], 1.0, 1e-12);
  EXPECT_NEAR(x[1], 3.0, 1e-12);
  EXPECT_FALSE(solve_linear_system({1, 2, 2, 4}, {1, 2}, &x));  // singular
}

// Residuals whose exact zero lies at known parameter values: the fit finds them.
TEST(StackFitTest, RecoversParametersOfAnExactModel) {
  const double true_memory = 0.7;
  const double true_collective = 0.55;
  auto residuals = [&](const SoftwareStack& s) -> Result<std::vector<double>> {
    // Two "runs" whose times scale as 1/efficiency, and one depending on both.
    return std::vector<double>{std::log(true_memory / s.memory_efficiency),
                               std::log(true_collective / s.collective_efficiency),
                               std::log((1 / s.memory_efficiency + 1 / s.collective_efficiency) /
                                        (1 / true_memory + 1 / true_collective))};
  };
  StackFitOptions options;
  options.parameters = {"memory_efficiency", "collective_efficiency"};
  Result<StackFitResult> fit = fit_stack(SoftwareStack{}, options, residuals);
  ASSERT_TRUE(fit.is_ok()) << fit.status().message();
  EXPECT_NEAR(fit.value().stack.memory_efficiency, true_memory, 1e-4);
  EXPECT_NEAR(fit.value().stack.collective_efficiency, true_collective, 1e-4);
  EXPECT_LT(fit.value().sum_of_squares, 1e-8);
  EXPECT_TRUE(fit.value().at_bound.empty());
}

TEST(StackFitTest, KeepsParametersInsideTheirBounds) {
  // The unconstrained optimum (memory_efficiency = 2) lies beyond the upper bound of 1.
  auto residuals = [](const SoftwareStack& s) -> Result<std::vector<double>> {
    return std::vector<double>{std::log(2.0 / s.memory_efficiency)};
  };
  StackFitOptions options;
  options.parameters = {"memory_efficiency"};
  Result<StackFitResult> fit = fit_stack(SoftwareStack{}, options, residuals);
  ASSERT_TRUE(fit.is_ok());
  EXPECT_DOUBLE_EQ(fit.value().stack.memory_efficiency, 1.0);
  ASSERT_EQ(fit.value().at_bound.size(), 1u);
  EXPECT_EQ(fit.value().at_bound[0], "memory_efficiency");
}

TEST(StackFitTest, RefusesUnknownParameters) {
  StackFitOptions options;
  options.parameters = {"warp_speed"};
  Result<StackFitResult> fit = fit_stack(
      SoftwareStack{}, options,
      [](const SoftwareStack&) -> Result<std::vector<double>> { return std::vector<double>{0}; });
  ASSERT_FALSE(fit.is_ok());
  EXPECT_NE(fit.status().message().find("unknown stack parameter 'warp_speed'"), std::string::npos);
}

TEST(StackFitTest, KernelOverheadIsFittedInMicroseconds) {
  auto residuals = [](const SoftwareStack& s) -> Result<std::vector<double>> {
    return std::vector<double>{s.kernel_overhead.value() * 1e6 - 7.0};
  };
  StackFitOptions options;
  options.parameters = {"kernel_overhead_us"};
  Result<StackFitResult> fit = fit_stack(SoftwareStack{}, options, residuals);
  ASSERT_TRUE(fit.is_ok());
  EXPECT_NEAR(fit.value().stack.kernel_overhead.value(), 7e-6, 1e-10);
}

}  // namespace
}  // namespace motley
