// Fitting a software stack's parameters to measurements: bounded nonlinear least squares
// (projected Levenberg-Marquardt on parameters scaled to their bounds) over residuals a caller
// computes for a candidate stack, typically ln(predicted / measured) per published run or
// measured layer. Knows nothing of models or plans: the caller prices a candidate. Thread-
// compatible; `residuals` is called sequentially.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "motley/core/status.h"
#include "motley/cost/software_stack.h"

namespace motley {

struct StackFitOptions {
  // Names from stack_parameter_names(); each is kept inside its StackParameter bounds.
  std::vector<std::string> parameters;
  int max_iterations = 60;
  // Stop when an accepted step improves the sum of squares by less than this fraction.
  double tolerance = 1e-7;
};

struct StackFitResult {
  SoftwareStack stack;            // the fitted stack
  std::vector<double> residuals;  // at the fitted stack
  double sum_of_squares = 0;
  int iterations = 0;
  int evaluations = 0;
  std::vector<std::string> at_bound;  // fitted parameters that ended on a bound
};

// One residual per measurement for a candidate stack; an error stops the fit.
using StackResiduals = std::function<Result<std::vector<double>>(const SoftwareStack&)>;

// Minimizes the sum of squared residuals over options.parameters, starting from `start`.
// Errors: an unknown parameter name, no residuals, or the caller's error.
Result<StackFitResult> fit_stack(const SoftwareStack& start, const StackFitOptions& options,
                                 const StackResiduals& residuals);

// Solves the n x n system a x = b (row-major) by Gaussian elimination with partial pivoting;
// false when a pivot vanishes. Exposed for tests.
bool solve_linear_system(std::vector<double> a, std::vector<double> b, std::vector<double>* x);

}  // namespace motley
