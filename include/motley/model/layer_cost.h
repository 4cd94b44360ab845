// Analytic per-layer figures: parameter counts, FLOPs of the forward, input-gradient and
// weight-gradient passes, activation bytes kept under each recompute policy, and the bytes
// passed to the next layer. Formulas and their sources are in docs/cost-model.md.
// Deliberately device-free: times come from the cost module. Pure functions; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "motley/core/units.h"
#include "motley/model/model.h"

namespace motley {

// The shape of one micro-batch.
struct Workload {
  int64_t seq_len = 4096;
  int64_t micro_batch_size = 1;
  DType dtype = DType::kBFloat16;
  // Dropout masks are kept for backward (set from ModelSpec::dropout; model_totals counts them
  // when either this or the model's flag is set).
  bool dropout = false;
  // Context parallelism (Plan::context_parallel): every sequence split over this many devices,
  // each pricing its share of the tokens (and of a causal mask's query-key pairs, against all
  // seq_len keys). model_totals ignores it: a model's totals are the whole micro-batch's.
  int64_t context_parallel = 1;
};

struct LayerCost {
  int64_t params = 0;         // counted once in the model's total
  int64_t stored_params = 0;  // held by the stage owning the layer (a tied head stores V*h more)
  int64_t active_params = 0;  // used by one token: MoE counts router, shared and top-k experts
  Flops forward;
  Flops backward_input;   // gradient with respect to the layer input (B)
  Flops backward_weight;  // gradient with respect to the weights (W)
  // Bytes read and written from device memory by each pass, for the memory roofline.
  Bytes forward_memory;
  Bytes backward_input_memory;
  Bytes backward_weight_memory;
  // Activation bytes kept from F until backward, per micro-batch, indexed by RecomputePolicy.
  std::array<Bytes, 3> activation_bytes;
  Bytes output_bytes;  // the tensor handed to the next layer, per micro-batch
  // Tensor-parallel all-reduces of output_bytes per forward pass (the same number in backward)
  // under Megatron's column/row split; 0 for layers that need none.
  int tp_allreduces = 0;
  // MoE layers: the routed experts' parameters (what expert parallelism splits), and the bytes
  // one all-to-all moves per micro-batch to dispatch the tokens' top_k copies to their experts
  // (combining them back moves as many). 0 for other layers.
  int64_t routed_expert_params = 0;
  Bytes expert_dispatch_bytes;
  // Under context parallelism (Workload::context_parallel > 1): the keys and values of one
  // device's chunk, per micro-batch without tensor parallelism, that ring attention passes to
  // the next member of the group at every step (its backward passes them and their gradients).
  // 0 for layers without attention, and without context parallelism.
  Bytes context_exchange_bytes;
  // The part of activation_bytes (without recompute or with selective recompute) that is the
  // saved input of a linear layer of the block (attention, MLP, expert, Mamba projections; not
  // the embedding, the head or a router), kept for its weight gradient. FP8 linear layers
  // (Transformer Engine) keep these as 1-byte copies (cost/analytic_cost_model.h).
  Bytes linear_input_bytes;
  // The head's part of activation_bytes (without recompute or with selective recompute) that
  // is the softmax of the cross-entropy, kept in fp32 (4 bytes per logit) as an unfused
  // implementation keeps it; a fused kernel keeps the logits' gradient in the model's dtype
  // instead (cost/analytic_cost_model.h). 0 for other layers.
  Bytes loss_softmax_bytes;
};

// One kernel of one pass of a layer: the unit the timing model prices (docs/timing-model.md).
// Shapes are those of one device without tensor parallelism; `split` says which GEMM
// dimension a tensor-parallel group divides.
enum class KernelPass { kForward, kBackwardInput, kBackwardWeight };
enum class KernelKind {
  kGemm,         // a weight matmul (m x k) * (k x n), `count` independent ones (routed experts)
  kAttention,    // the attention core: scores, softmax, weighted sum (implementation: the stack's)
  kScan,         // the selective state-space scan of a Mamba layer
  kElementwise,  // memory-bound work on tensors tensor parallelism splits (activations)
  kLoss,         // the cross-entropy over m tokens x n logits (implementation: the stack's)
  kStream,       // memory-bound work on the residual stream (norms, residual adds, dropout,
                 // routing): replicated in a TP group unless sequence parallelism splits it
  kGather,       // embedding rows gathered, or their gradient scatter-added
};
enum class GemmSplit { kNone, kM, kN, kK };  // the dimension a TP group divides

struct Kernel {
  KernelKind kind = KernelKind::kElementwise;
  KernelPass pass = KernelPass::kForward;
  double flops = 0;  // per pass, whole layer (all `count` GEMMs)
  double bytes = 0;  // compulsory memory traffic of the pass
  // kGemm: one matmul's shape and how many there are.
  double m = 0, n = 0, k = 0, count = 1;
  GemmSplit split = GemmSplit::kNone;
  // kAttention: batch x query heads score `pairs` query-key pairs per head of `q_len` queries
  // against `kv_len` keys (causal, whole sequences: q_len(q_len+1)/2); an eager implementation
  // computes all q_len x kv_len. kv_len exceeds q_len under context parallelism (0: q_len).
  double batch_heads = 0, q_len = 0, kv_len = 0, pairs = 0, qk_dim = 0, v_dim = 0;
};

// Parameter counts need no workload.
int64_t layer_params(const Layer& layer);
int64_t layer_stored_params(const Layer& layer);
int64_t layer_active_params(const Layer& layer);
// The routed experts' parameters of an MoE layer (num_experts copies of one expert); 0 else.
int64_t layer_routed_expert_params(const Layer& layer);

// FLOPs, memory traffic and activation bytes of one micro-batch through `layer`, on one device
// without tensor parallelism. REQUIRES: the layer carries the shape its kind needs.
LayerCost layer_cost(const Layer& layer, const Workload& workload);

// The kernels behind layer_cost(): its FLOPs and memory traffic are their sums per pass. Empty
// for kMeasured layers. REQUIRES: as layer_cost().
std::vector<Kernel> layer_kernels(const Layer& layer, const Workload& workload);

// What a measured layer's profile figures (times and bytes) are multiplied by for `workload`:
// its tokens per micro-batch over the measured ones, or 1 when the profile does not state the
// shape it was measured at. REQUIRES: layer.measured is set.
double measured_token_scale(const Layer& layer, const Workload& workload);

struct ModelTotals {
  int64_t total_params = 0;   // sum over ModelSpec::layers
  int64_t active_params = 0;  // per token
  int64_t extra_params = 0;   // ModelSpec::extra_layers, not in total_params
  Flops forward;
  Flops backward_input;
  Flops backward_weight;
  std::array<Bytes, 3> activation_bytes;  // all layers, per micro-batch
};

// Sums of layer_cost over ModelSpec::layers; extra_layers only contribute extra_params.
ModelTotals model_totals(const ModelSpec& model, const Workload& workload);

}  // namespace motley
