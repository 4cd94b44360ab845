#include "motley/calibrate/stack_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace motley {
namespace {

const StackParameter* find_parameter(const std::string& name) {
  for (const StackParameter& p : stack_parameters()) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

double sum_of_squares(const std::vector<double>& r) {
  double s = 0;
  for (double x : r) s += x * x;
  return s;
}

}  // namespace

bool solve_linear_system(std::vector<double> a, std::vector<double> b, std::vector<double>* x) {
  const size_t n = b.size();
  for (size_t col = 0; col < n; ++col) {
    size_t pivot = col;
    for (size_t row = col + 1; row < n; ++row) {
      if (std::abs(a[row * n + col]) > std::abs(a[pivot * n + col])) pivot = row;
    }
    if (!(std::abs(a[pivot * n + col]) > 1e-300)) return false;
    if (pivot != col) {
      for (size_t k = 0; k < n; ++k) std::swap(a[col * n + k], a[pivot * n + k]);
      std::swap(b[col], b[pivot]);
    }
    for (size_t row = col + 1; row < n; ++row) {
      const double f = a[row * n + col] / a[col * n + col];
      for (size_t k = col; k < n; ++k) a[row * n + k] -= f * a[col * n + k];
      b[row] -= f * b[col];
    }
  }
  x->assign(n, 0.0);
  for (size_t i = n; i-- > 0;) {
    double s = b[i];
    for (size_t k = i + 1; k < n; ++k) s -= a[i * n + k] * (*x)[k];
    (*x)[i] = s / a[i * n + i];
  }
  return true;
}

Result<StackFitResult> fit_stack(const SoftwareStack& start, const StackFitOptions& options,
                                 const StackResiduals& residuals) {
  std::vector<const StackParameter*> params;
  for (const std::string& name : options.parameters) {
    const StackParameter* p = find_parameter(name);
    if (p == nullptr) {
      return invalid_argument(fmt::format("unknown stack parameter '{}': expected {}", name,
                                          join_alternatives(stack_parameter_names())));
    }
    params.push_back(p);
  }
  StackFitResult out;
  // Work in z = (x - lower) / (upper - lower), so every parameter moves on one scale.
  const size_t m = params.size();
  auto stack_at = [&](const std::vector<double>& z) {
    SoftwareStack s = start;
    for (size_t i = 0; i < m; ++i) {
      const double zi = std::clamp(z[i], 0.0, 1.0);
      set_stack_parameter(s, params[i]->name,
                          params[i]->lower + zi * (params[i]->upper - params[i]->lower));
    }
    return s;
  };
  auto evaluate = [&](const std::vector<double>& z) -> Result<std::vector<double>> {
    ++out.evaluations;
    return residuals(stack_at(z));
  };
  std::vector<double> z(m);
  for (size_t i = 0; i < m; ++i) {
    const double x = stack_parameter_value(start, params[i]->name);
    z[i] = std::clamp((x - params[i]->lower) / (params[i]->upper - params[i]->lower), 0.0, 1.0);
  }
  MOTLEY_ASSIGN_OR_RETURN(std::vector<double> r, evaluate(z));
  if (r.empty()) return invalid_argument("nothing to fit: no measurements");
  double cost = sum_of_squares(r);
  const size_t n = r.size();
  double lambda = 1e-2;
  for (int iter = 0; iter < options.max_iterations && m > 0; ++iter) {
    out.iterations = iter + 1;
    // Forward differences, stepping inward at an upper bound.
    std::vector<double> jac(n * m);
    for (size_t j = 0; j < m; ++j) {
      const double h = z[j] + 1e-4 <= 1.0 ? 1e-4 : -1e-4;
      std::vector<double> zh = z;
      zh[j] += h;
      MOTLEY_ASSIGN_OR_RETURN(std::vector<double> rh, evaluate(zh));
      for (size_t i = 0; i < n; ++i) jac[i * m + j] = (rh[i] - r[i]) / h;
    }
    std::vector<double> jtj(m * m, 0.0), jtr(m, 0.0);
    for (size_t i = 0; i < n; ++i) {
      for (size_t a = 0; a < m; ++a) {
        jtr[a] += jac[i * m + a] * r[i];
        for (size_t b = 0; b < m; ++b) jtj[a * m + b] += jac[i * m + a] * jac[i * m + b];
      }
    }
    bool accepted = false;
    for (int tries = 0; tries < 12 && !accepted; ++tries) {
      std::vector<double> a = jtj;
      for (size_t k = 0; k < m; ++k) a[k * m + k] += lambda * (jtj[k * m + k] + 1e-9);
      std::vector<double> neg(m);
      for (size_t k = 0; k < m; ++k) neg[k] = -jtr[k];
      std::vector<double> step;
      if (!solve_linear_system(a, neg, &step)) {
        lambda *= 10;
        continue;
      }
      std::vector<double> next(m);
      for (size_t k = 0; k < m; ++k) next[k] = std::clamp(z[k] + step[k], 0.0, 1.0);
      MOTLEY_ASSIGN_OR_RETURN(std::vector<double> rn, evaluate(next));
      const double next_cost = sum_of_squares(rn);
      if (next_cost < cost) {
        const double gain = (cost - next_cost) / std::max(cost, 1e-300);
        z = next;
        r = std::move(rn);
        cost = next_cost;
        lambda = std::max(lambda / 3, 1e-9);
        accepted = true;
        if (gain < options.tolerance) iter = options.max_iterations;
      } else {
        lambda *= 4;
      }
    }
    if (!accepted) break;
  }
  out.stack = stack_at(z);
  out.residuals = r;
  out.sum_of_squares = cost;
  for (size_t k = 0; k < m; ++k) {
    if (z[k] <= 1e-9 || z[k] >= 1 - 1e-9) out.at_bound.emplace_back(params[k]->name);
  }
  return out;
}

}  // namespace motley
