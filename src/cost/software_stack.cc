#include "motley/cost/software_stack.h"

#include <fmt/format.h>

#include <cmath>
#include <iterator>
#include <optional>
#include <string>

#include "motley/core/check.h"
#include "motley/core/enum_names.h"

// The values and their sources are tabled in docs/timing-model.md, "Software stacks".

namespace motley {
namespace {

constexpr const char* kKernelOverheadUs = "kernel_overhead_us";
constexpr const char* kBucketParameters = "gradient_bucket_parameters";
constexpr const char* kBucketPerReplica = "gradient_bucket_parameters_per_replica";
constexpr double kMaxBucket = 1e12;  // parameters: more than any model has

// A built-in stack: the defaults of SoftwareStack (docs/timing-model.md) with what sets it apart.
SoftwareStack named_stack(std::string name, std::string description,
                          AttentionImplementation attention, double tp_overlap,
                          bool pipeline_scatter_gather, bool overlap_grad_reduce,
                          bool overlap_param_gather) {
  SoftwareStack s;
  s.name = std::move(name);
  s.description = std::move(description);
  s.attention = attention;
  s.tp_overlap = tp_overlap;
  s.pipeline_scatter_gather = pipeline_scatter_gather;
  s.overlap_grad_reduce = overlap_grad_reduce;
  s.overlap_param_gather = overlap_param_gather;
  return s;
}

constexpr const char* kAttentionNames[] = {"eager", "fused"};
static_assert(std::size(kAttentionNames) ==
              static_cast<size_t>(AttentionImplementation::kFused) + 1);

Status check_finite_in(const JsonField& field, const std::string& key, double value, double lower,
                       double upper) {
  if (!(value >= lower && value <= upper)) {
    return field.child_error(
        key, fmt::format("expected a number from {} to {}, got {}", lower, upper, value));
  }
  return Status::ok();
}

}  // namespace

const char* attention_implementation_name(AttentionImplementation implementation) {
  return name_in(kAttentionNames, implementation);
}

const std::vector<SoftwareStack>& software_stacks() {
  static const std::vector<SoftwareStack> kStacks = [] {
    std::vector<SoftwareStack> stacks = {
        named_stack(
            "megatron-core",
            "bf16 Megatron-Core with Transformer Engine: fused (cuDNN flash) attention, "
            "--overlap-grad-reduce and --overlap-param-gather, tensor-parallel communication "
            "partly overlapped (--tp-comm-overlap), scatter-gather pipeline messages",
            AttentionImplementation::kFused, /*tp_overlap=*/0.5,
            /*pipeline_scatter_gather=*/true, /*overlap_grad_reduce=*/true,
            /*overlap_param_gather=*/true),
        named_stack("megatron-lm-2022",
                    "fp16 Megatron-LM as measured by Narayanan et al. 2021 and Korthikanti et al. "
                    "2022: eager attention with a fused scale-mask-softmax kernel, fused bias-GeLU "
                    "and bias-dropout-add, blocking tensor-parallel all-reduces, scatter-gather "
                    "pipeline messages, the data-parallel all-reduce after the backward pass",
                    AttentionImplementation::kEager, /*tp_overlap=*/0.0,
                    /*pipeline_scatter_gather=*/true, /*overlap_grad_reduce=*/false,
                    /*overlap_param_gather=*/false),
        named_stack("megatron-core-fp8",
                    "megatron-core with Transformer Engine's FP8 linear layers (--fp8-format "
                    "hybrid, delayed or current scaling), as NVIDIA's H100 performance recipes "
                    "train: the embedding, the head and attention stay in BF16",
                    AttentionImplementation::kFused, /*tp_overlap=*/0.5,
                    /*pipeline_scatter_gather=*/true, /*overlap_grad_reduce=*/true,
                    /*overlap_param_gather=*/true),
        named_stack("pytorch-fsdp",
                    "PyTorch FSDP / DDP with scaled_dot_product_attention (flash): gradient "
                    "reduction overlapped with the backward pass, blocking tensor-parallel "
                    "collectives, whole pipeline messages",
                    AttentionImplementation::kFused, /*tp_overlap=*/0.0,
                    /*pipeline_scatter_gather=*/false, /*overlap_grad_reduce=*/true,
                    /*overlap_param_gather=*/true),
    };
    SoftwareStack& fp8 = stacks[2];
    fp8.fp8_linear = true;
    // NVIDIA's performance recipes train with Transformer Engine's fused cross-entropy
    // (cross_entropy_loss_fusion, cross_entropy_fusion_impl "te").
    fp8.fused_cross_entropy = true;
    // Their MoE recipes dispatch with Megatron-Core's flex dispatcher on the DeepEP or HybridEP
    // backend (moe_token_dispatcher_type "flex"), which sends a token once per node.
    fp8.node_deduplicated_dispatch = true;
    // Transformer Engine's FP8 GEMMs with their casts reach less of the FP8 peak than the BF16
    // rule's fraction: fitted (least squares) to NVIDIA's two Megatron-Bridge Llama 3 runs on
    // DGX H100 (scripts/h100-fp8-check.sh with FIT=1; docs/calibration.md gives the fit, each
    // run held out from a fit to the other, and a third run never fitted).
    fp8.fp8_gemm_efficiency = 0.925;
    // Megatron-LM of 2022 ran on A100s only, with fp16 and the cuBLAS of its day: its GEMM and
    // memory-bound rates are fitted (least squares) to Korthikanti et al. 2022's eight measured
    // runs and ten measured layer passes together (scripts/calibration-check.sh; docs/
    // calibration.md gives the fit and its leave-one-run-out errors).
    SoftwareStack& megatron_2022 = stacks[1];
    megatron_2022.gemm_efficiency = 0.883;
    megatron_2022.memory_efficiency = 0.729;
    // DistributedDataParallel's bucket_cap_mb of 25 MiB of fp32 gradients, whatever the
    // number of replicas.
    SoftwareStack& fsdp = stacks.back();
    fsdp.gradient_bucket_parameters = 25.0 * 1024 * 1024 / 4;
    fsdp.gradient_bucket_parameters_per_replica = 0;
    return stacks;
  }();
  return kStacks;
}

Result<SoftwareStack> find_software_stack(std::string_view name) {
  std::vector<std::string> names;
  for (const SoftwareStack& s : software_stacks()) {
    if (s.name == name) return s;
    names.push_back(s.name);
  }
  return invalid_argument(
      fmt::format("unknown software stack '{}': expected {}", name, join_alternatives(names)));
}

const std::vector<StackParameter>& stack_parameters() {
  static const std::vector<StackParameter> kParameters = {
      {"gemm_efficiency", &SoftwareStack::gemm_efficiency, 0.3, 1.1,
       "large-GEMM rate over the device's best (MAMF) rate"},
      {"gemm_half_dim", &SoftwareStack::gemm_half_dim, 0.0, 1024.0,
       "GEMM dimension at which that dimension alone halves the rate"},
      {"fp8_gemm_efficiency", &SoftwareStack::fp8_gemm_efficiency, 0.3, 1.1,
       "FP8 GEMMs (fp8_linear): rate over the GEMM rule's at the FP8 peak"},
      {"attention_forward_efficiency", &SoftwareStack::attention_forward_efficiency, 0.05, 1.0,
       "fused attention forward: fraction of dense peak"},
      {"attention_backward_efficiency", &SoftwareStack::attention_backward_efficiency, 0.05, 1.0,
       "fused attention backward: fraction of dense peak"},
      {"memory_efficiency", &SoftwareStack::memory_efficiency, 0.2, 1.0,
       "element-wise kernels: fraction of memory bandwidth"},
      {kKernelOverheadUs, nullptr, 0.0, 50.0, "launch and gap per kernel, microseconds"},
      {"collective_efficiency", &SoftwareStack::collective_efficiency, 0.2, 1.0,
       "collectives: bus bandwidth over link rate"},
      {"p2p_efficiency", &SoftwareStack::p2p_efficiency, 0.2, 1.0,
       "point-to-point: achieved over path bandwidth"},
      {"tp_overlap", &SoftwareStack::tp_overlap, 0.0, 1.0,
       "fraction of tensor-parallel communication hidden"},
  };
  return kParameters;
}

std::vector<std::string> stack_parameter_names() {
  std::vector<std::string> names;
  for (const StackParameter& p : stack_parameters()) names.emplace_back(p.name);
  return names;
}

double stack_parameter_value(const SoftwareStack& stack, std::string_view name) {
  if (name == kKernelOverheadUs) return stack.kernel_overhead.value() * 1e6;
  for (const StackParameter& p : stack_parameters()) {
    if (p.field != nullptr && name == p.name) return stack.*(p.field);
  }
  MOTLEY_CHECK(false, fmt::format("unknown stack parameter '{}'", name));
  return 0;
}

void set_stack_parameter(SoftwareStack& stack, std::string_view name, double value) {
  if (name == kKernelOverheadUs) {
    stack.kernel_overhead = Seconds(value * 1e-6);
    return;
  }
  for (const StackParameter& p : stack_parameters()) {
    if (p.field != nullptr && name == p.name) {
      stack.*(p.field) = value;
      return;
    }
  }
  MOTLEY_CHECK(false, fmt::format("unknown stack parameter '{}'", name));
}

Json software_stack_to_json(const SoftwareStack& s) {
  Json stack = Json::object();
  stack["name"] = s.name;
  stack["description"] = s.description;
  stack["attention"] = attention_implementation_name(s.attention);
  for (const StackParameter& p : stack_parameters()) {
    stack[p.name] = number_json(stack_parameter_value(s, p.name));
  }
  stack["fp8_linear"] = s.fp8_linear;
  stack["fused_cross_entropy"] = s.fused_cross_entropy;
  stack["pipeline_scatter_gather"] = s.pipeline_scatter_gather;
  stack["overlap_grad_reduce"] = s.overlap_grad_reduce;
  stack["overlap_param_gather"] = s.overlap_param_gather;
  stack["node_deduplicated_dispatch"] = s.node_deduplicated_dispatch;
  stack[kBucketParameters] = number_json(s.gradient_bucket_parameters);
  stack[kBucketPerReplica] = number_json(s.gradient_bucket_parameters_per_replica);
  return stack;
}

Result<SoftwareStack> software_stack_from_json(const JsonField& stack, const SoftwareStack& base) {
  if (!stack.is_object()) return stack.error("expected a software stack object");
  std::vector<std::string_view> keys = {"name",
                                        "description",
                                        "attention",
                                        "fp8_linear",
                                        "fused_cross_entropy",
                                        "pipeline_scatter_gather",
                                        "overlap_grad_reduce",
                                        "overlap_param_gather",
                                        "node_deduplicated_dispatch",
                                        kBucketParameters,
                                        kBucketPerReplica};
  for (const StackParameter& p : stack_parameters()) keys.emplace_back(p.name);
  MOTLEY_RETURN_IF_ERROR(stack.check_keys(keys));
  SoftwareStack s = base;
  MOTLEY_ASSIGN_OR_RETURN(s.name, stack.get_string_or("name", base.name));
  MOTLEY_ASSIGN_OR_RETURN(s.description, stack.get_string_or("description", base.description));
  if (stack.has("attention")) {
    MOTLEY_ASSIGN_OR_RETURN(std::string attention, stack.get_string("attention"));
    std::optional<AttentionImplementation> parsed =
        parse_name_in<AttentionImplementation>(kAttentionNames, attention);
    if (!parsed) {
      return stack.child_error(
          "attention", fmt::format("expected {}, got \"{}\"",
                                   join_alternatives(names_in(kAttentionNames)), attention));
    }
    s.attention = *parsed;
  }
  for (const StackParameter& p : stack_parameters()) {
    MOTLEY_ASSIGN_OR_RETURN(double value,
                            stack.get_double_or(p.name, stack_parameter_value(base, p.name)));
    MOTLEY_RETURN_IF_ERROR(check_finite_in(stack, p.name, value, p.lower, p.upper));
    set_stack_parameter(s, p.name, value);
  }
  MOTLEY_ASSIGN_OR_RETURN(s.fp8_linear, stack.get_bool_or("fp8_linear", base.fp8_linear));
  MOTLEY_ASSIGN_OR_RETURN(s.fused_cross_entropy,
                          stack.get_bool_or("fused_cross_entropy", base.fused_cross_entropy));
  MOTLEY_ASSIGN_OR_RETURN(
      s.pipeline_scatter_gather,
      stack.get_bool_or("pipeline_scatter_gather", base.pipeline_scatter_gather));
  MOTLEY_ASSIGN_OR_RETURN(s.overlap_grad_reduce,
                          stack.get_bool_or("overlap_grad_reduce", base.overlap_grad_reduce));
  MOTLEY_ASSIGN_OR_RETURN(s.overlap_param_gather,
                          stack.get_bool_or("overlap_param_gather", base.overlap_param_gather));
  MOTLEY_ASSIGN_OR_RETURN(
      s.node_deduplicated_dispatch,
      stack.get_bool_or("node_deduplicated_dispatch", base.node_deduplicated_dispatch));
  MOTLEY_ASSIGN_OR_RETURN(s.gradient_bucket_parameters,
                          stack.get_double_or(kBucketParameters, base.gradient_bucket_parameters));
  MOTLEY_RETURN_IF_ERROR(
      check_finite_in(stack, kBucketParameters, s.gradient_bucket_parameters, 1, kMaxBucket));
  MOTLEY_ASSIGN_OR_RETURN(
      s.gradient_bucket_parameters_per_replica,
      stack.get_double_or(kBucketPerReplica, base.gradient_bucket_parameters_per_replica));
  MOTLEY_RETURN_IF_ERROR(check_finite_in(stack, kBucketPerReplica,
                                         s.gradient_bucket_parameters_per_replica, 0, kMaxBucket));
  return s;
}

Json calibration_to_json(const Calibration& calibration) {
  Json out = Json::object();
  out["format"] = kCalibrationFormat;
  out["base"] = calibration.base;
  out["fitted"] = calibration.fitted;
  out["stack"] = software_stack_to_json(calibration.stack);
  out["fit"] = calibration.fit;
  return out;
}

Result<Calibration> calibration_from_json(const Json& json, const std::string& source) {
  JsonField root(json, source);
  if (!root.is_object()) return root.error("expected a calibration object");
  MOTLEY_RETURN_IF_ERROR(root.check_keys({"format", "base", "fitted", "stack", "fit"}));
  MOTLEY_ASSIGN_OR_RETURN(std::string format, root.get_string("format"));
  if (format != kCalibrationFormat) {
    return root.child_error("format",
                            fmt::format("expected \"{}\", got \"{}\"", kCalibrationFormat, format));
  }
  Calibration c;
  MOTLEY_ASSIGN_OR_RETURN(c.base, root.get_string("base"));
  Result<SoftwareStack> found = find_software_stack(c.base);
  if (!found.is_ok()) return root.child_error("base", found.status().message());
  MOTLEY_ASSIGN_OR_RETURN(JsonField stack, root.get("stack"));
  MOTLEY_ASSIGN_OR_RETURN(c.stack, software_stack_from_json(stack, found.value()));
  if (root.has("fitted")) {
    MOTLEY_ASSIGN_OR_RETURN(JsonField fitted, root.get("fitted"));
    MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> names, fitted.items());
    for (const JsonField& n : names) {
      MOTLEY_ASSIGN_OR_RETURN(std::string name, n.as_string());
      c.fitted.push_back(std::move(name));
    }
  }
  if (root.has("fit")) c.fit = json["fit"];
  return c;
}

Result<Calibration> load_calibration(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(Json json, read_json_file(path));
  return calibration_from_json(json, path);
}

}  // namespace motley
