// SoftwareStack: the efficiencies of the training software a cluster runs (Megatron-LM of 2022,
// Megatron-Core with Transformer Engine, PyTorch FSDP), as named, documented parameters of the
// timing model rather than constants in its code; the built-in stacks and the calibration file
// ("motley.calibration/1") that carries a fitted stack. Values and sources:
// docs/timing-model.md. Plain data; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/core/units.h"

namespace motley {

enum class AttentionImplementation {
  kEager,  // scores materialized: batched GEMMs, then softmax, mask and dropout passes over s^2
  kFused,  // one fused kernel (FlashAttention, cuDNN): no s^2 traffic, masked blocks skipped
};
const char* attention_implementation_name(AttentionImplementation implementation);

struct SoftwareStack {
  std::string name = "megatron-core";
  std::string description;

  // GEMMs: the device's best large-matmul efficiency (DeviceType::matmul_efficiency) times
  // gemm_efficiency, times x / (x + gemm_half_dim) for each of the GEMM's m, n and k: small and
  // skinny GEMMs fill fewer tiles and waves. 0.792: fitted (least squares) to the BF16 H100
  // runs published with their layouts, under megatron-core (scripts/h100-bf16-fit.sh;
  // docs/calibration.md gives the fit and each run held out); megatron-core-fp8's BF16 GEMMs
  // and pytorch-fsdp's keep it, megatron-lm-2022 has its own A100 fit.
  double gemm_efficiency = 0.792;
  double gemm_half_dim = 64;
  // FP8 linear layers (Transformer Engine): on a device with FP8 units, every GEMM of a layer
  // other than the embedding and the head runs at the device's FP8 peak times the GEMM rule's
  // efficiency times fp8_gemm_efficiency, reading FP8 inputs, after a pass that casts its
  // activation-side operand to FP8 at the element-wise rate. Attention and the element-wise work
  // keep the model's dtype, as does every GEMM on a device without FP8 units.
  bool fp8_linear = false;
  double fp8_gemm_efficiency = 1.0;

  // The attention core. kFused: its FLOPs (causal pairs only) at these fractions of the dense
  // peak. kEager: the score GEMMs at the GEMM rule, plus softmax (and dropout) passes over the
  // full s x s scores at the element-wise rate.
  AttentionImplementation attention = AttentionImplementation::kFused;
  double attention_forward_efficiency = 0.6;
  double attention_backward_efficiency = 0.45;

  // The cross-entropy over the logits. Unfused (false): Megatron-LM's vocabulary-parallel
  // cross-entropy on logits upcast to fp32, six passes over them forward (the upcast, max,
  // subtract, exp, sum, divide) and two backward (scale by the loss's gradient, cast back),
  // keeping the fp32 softmax. Fused (true): one kernel reading the logits forward and one
  // reading them and writing their gradient backward, keeping that gradient in the model's
  // dtype (Transformer Engine's or Megatron-Core's --cross-entropy-loss-fusion).
  bool fused_cross_entropy = false;

  // Memory-bound kernels (norms, activations, residual adds, dropout, softmax, loss) reach this
  // fraction of the device's memory bandwidth.
  double memory_efficiency = 0.8;
  // Each kernel's launch and the gap to the next one.
  Seconds kernel_overhead = Seconds(4e-6);

  // Collectives reach this fraction of the ring's link bandwidth as bus bandwidth (nccl-tests'
  // busbw over the link rate); point-to-point transfers this fraction of the path's.
  double collective_efficiency = 0.8;
  double p2p_efficiency = 0.9;
  // Fraction of the tensor-parallel collectives hidden behind compute (0: blocking, as
  // Megatron-LM's default; Transformer Engine's userbuffer overlap hides part of them).
  double tp_overlap = 0.0;
  // A pipeline message leaves every TP rank of a stage with its 1/t share, in parallel, and is
  // all-gathered at the receiver (Megatron-LM's scatter-gather optimization).
  bool pipeline_scatter_gather = true;
  // Expert parallelism's token dispatcher. false: one all-to-all of every routed copy of a
  // token (Megatron-LM's alltoall dispatcher over torch.distributed). true: a dispatcher that
  // sends a token once to each other node holding any of its experts and forwards it there over
  // the node's links (DeepEP's normal kernels, Megatron-Core's flex dispatcher with the DeepEP
  // or HybridEP backend), and combines the same way back.
  bool node_deduplicated_dispatch = false;
  // The data-parallel gradient all-reduce runs bucket by bucket under the backward pass (only
  // the last bucket is exposed), instead of after it.
  bool overlap_grad_reduce = true;
  // Under ZeRO-1, the all-gather of the updated weights runs bucket by bucket under the next
  // iteration's first forward pass (Megatron-Core's --overlap-param-gather, FSDP's prefetch)
  // instead of before it.
  bool overlap_param_gather = true;
  // Under overlap_grad_reduce, a stage's gradients (per device) are reduced in buckets of
  // max(gradient_bucket_parameters, gradient_bucket_parameters_per_replica * replicas)
  // parameters: Megatron-Core's default bucket (40 M, or 1 M per data-parallel rank).
  double gradient_bucket_parameters = 40e6;
  double gradient_bucket_parameters_per_replica = 1e6;
};

// The named stacks motley ships, in a fixed order.
const std::vector<SoftwareStack>& software_stacks();
// By name; the error lists the known names.
Result<SoftwareStack> find_software_stack(std::string_view name);

// The continuous parameters of a stack that calibration may fit, with the bounds it keeps
// them in (physically meaningful ranges, docs/timing-model.md).
struct StackParameter {
  const char* name;
  double SoftwareStack::*field;  // kernel_overhead is fitted through kernel_overhead_us
  double lower;
  double upper;
  const char* meaning;
};
const std::vector<StackParameter>& stack_parameters();
// The value of a named parameter (kernel_overhead in microseconds as "kernel_overhead_us").
double stack_parameter_value(const SoftwareStack& stack, std::string_view name);
void set_stack_parameter(SoftwareStack& stack, std::string_view name, double value);
// The names stack_parameters() and "kernel_overhead_us" accept.
std::vector<std::string> stack_parameter_names();

// A stack as JSON: every field written out (the "stack" object of a calibration file, a plan
// file's "software_stack"). Reading takes `base`'s value for a field left out; unknown fields,
// out-of-bounds and non-finite values are errors naming the field and the allowed range.
Json software_stack_to_json(const SoftwareStack& stack);
Result<SoftwareStack> software_stack_from_json(const JsonField& stack, const SoftwareStack& base);

inline constexpr const char* kCalibrationFormat = "motley.calibration/1";

// A calibration file: a stack (a built-in one's name as `base`, every parameter written out),
// what it was fitted to and the residuals left. The stack alone is what the cost model reads.
struct Calibration {
  SoftwareStack stack;
  std::string base;                 // the built-in stack the fit started from
  std::vector<std::string> fitted;  // parameter names the fit moved
  Json fit = Json::object();        // free-form record: cases, residuals, method
};

Json calibration_to_json(const Calibration& calibration);
// `source` names the file in messages. Unknown fields, out-of-bounds values and non-finite
// numbers are errors naming the field and the allowed range.
Result<Calibration> calibration_from_json(const Json& json, const std::string& source);
Result<Calibration> load_calibration(const std::string& path);

}  // namespace motley
