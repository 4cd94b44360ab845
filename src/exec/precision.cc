#include "motley/exec/precision.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>

#include <exception>

#include "error_text.h"
#include "motley/core/enum_names.h"

namespace motley {

namespace {

struct Probe {
  bool available = false;
  std::string why;
};

}  // namespace

// Indexed by Precision, in declaration order.
constexpr const char* kPrecisionNames[] = {"fp32", "bf16"};
static_assert(std::size(kPrecisionNames) == static_cast<size_t>(Precision::kBf16Autocast) + 1);

const char* precision_name(Precision precision) {
  return name_in(kPrecisionNames, precision, "fp32");
}

bool cpu_bf16_autocast_available(std::string* why) {
  // Once per process (a thread-safe static); the probe's own guard skips this check.
  static const Probe probe = [] {
    Probe p;
    try {
      const at::Tensor a = at::full({2, 2}, 1.5, at::kFloat);
      at::Tensor product;
      {
        AutocastGuard guard(Precision::kBf16Autocast, c10::kCPU, AutocastGuard::Unchecked{});
        product = at::matmul(a, a);
      }
      if (product.scalar_type() != at::kBFloat16) {
        p.why = fmt::format("a matrix product of fp32 tensors under CPU autocast came out in {}",
                            c10::toString(product.scalar_type()));
      } else if (!at::equal(product.to(at::kFloat), at::full({2, 2}, 4.5, at::kFloat))) {
        p.why = "a bf16 matrix product under CPU autocast gave a wrong result";
      } else {
        p.available = true;
      }
    } catch (const std::exception& e) {
      p.why = fmt::format("CPU autocast to bf16 failed: {}", internal::first_line(e.what()));
    }
    return p;
  }();
  if (why != nullptr) *why = probe.why;
  return probe.available;
}

Precision effective_precision(Precision requested) {
  return requested == Precision::kBf16Autocast && cpu_bf16_autocast_available()
             ? Precision::kBf16Autocast
             : Precision::kFp32;
}

// The CPU probe decides only for the CPU; CUDA devices autocast to bf16 natively (Ampere and
// later).
AutocastGuard::AutocastGuard(Precision precision, c10::DeviceType device)
    : AutocastGuard(device == c10::kCPU ? effective_precision(precision) : precision, device,
                    Unchecked{}) {}

// What torch.autocast(device, torch.bfloat16, cache_enabled=False).__enter__ does (torch/amp/
// autocast_mode.py, 1.13): the CPU's or the GPU's autocast state, whichever `device` is.
AutocastGuard::AutocastGuard(Precision precision, c10::DeviceType device, Unchecked)
    : device_(device) {
  if (precision != Precision::kBf16Autocast) return;
  engaged_ = true;
  previous_cache_enabled_ = at::autocast::is_autocast_cache_enabled();
  if (device_ == c10::kCPU) {
    previous_enabled_ = at::autocast::is_cpu_enabled();
    previous_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  } else {
    previous_enabled_ = at::autocast::is_enabled();
    previous_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
  }
  at::autocast::increment_nesting();
  at::autocast::set_autocast_cache_enabled(false);
}

AutocastGuard::~AutocastGuard() {
  if (!engaged_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  if (device_ == c10::kCPU) {
    at::autocast::set_cpu_enabled(previous_enabled_);
    at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  } else {
    at::autocast::set_enabled(previous_enabled_);
    at::autocast::set_autocast_gpu_dtype(previous_dtype_);
  }
  at::autocast::set_autocast_cache_enabled(previous_cache_enabled_);
}

}  // namespace motley
