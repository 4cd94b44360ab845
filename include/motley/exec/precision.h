// Precision: how the executor and the sequential reference compute a step — all in fp32, or the
// forward and backward under libtorch's CPU autocast to bf16 (matrix products and convolutions
// in bf16; master weights, gradients, AdamW state, stage boundaries and the loss stay fp32).
// AutocastGuard switches the calling thread's autocast state; it does not touch other threads,
// so every thread that computes (each rank's) holds its own. Thread-compatible.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace motley {

enum class Precision {
  kFp32,
  kBf16Autocast,  // torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False)
};

// "fp32" or "bf16", as the command line spells them.
const char* precision_name(Precision precision);

// Whether this libtorch autocasts to bf16 on the CPU: a probe, run once per process, that a
// matrix product of two fp32 tensors under the guard comes out in bf16. When false, `why` (if
// given) says what the probe saw, and AutocastGuard(kBf16Autocast) computes in fp32.
bool cpu_bf16_autocast_available(std::string* why = nullptr);

// What `requested` runs as here: kFp32 when bf16 autocast is unavailable.
Precision effective_precision(Precision requested);

// While alive, this thread runs eligible ops on `device` (the CPU, or CUDA) under autocast to
// bf16 (for kBf16Autocast — on the CPU when available; kFp32 changes nothing). Restores the
// previous state on destruction, and clears the cast cache when the outermost autocast region ends,
// as torch.autocast does. The cast cache is off inside: libtorch 1.13 caches a weight's bf16 copy
// made under no_grad (a recomputing stage's forward) and would hand that graph-less copy to the
// later forward with a graph, whose weights would then get no gradient. Optimizer steps belong
// outside the guard.
class AutocastGuard {
 public:
  explicit AutocastGuard(Precision precision, c10::DeviceType device = c10::kCPU);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  // Engages without asking cpu_bf16_autocast_available (which probes through it).
  struct Unchecked {};
  AutocastGuard(Precision precision, c10::DeviceType device, Unchecked);
  friend bool cpu_bf16_autocast_available(std::string* why);

  bool engaged_ = false;
  c10::DeviceType device_ = c10::kCPU;
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::BFloat16;
  bool previous_cache_enabled_ = true;
};

}  // namespace motley
