#include "motley/model/layer_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>

#include "motley/core/check.h"

// Every formula below is written out, with its source, in docs/cost-model.md. All counts are
// doubles: they stay far below 2^53 for real models, so integer shapes give exact results.

namespace motley {
namespace {

// One layer's kernels as they accumulate, sub-layer by sub-layer, and the activations they
// keep; finish() sums the kernels into the layer's FLOPs and memory traffic per pass.
class CostBuilder {
 public:
  // finish() hands the kernels to `sink` when it is not null.
  CostBuilder(double dtype_bytes, bool dropout, std::vector<Kernel>* sink)
      : d_(dtype_bytes), dropout_(dropout), sink_(sink) {}

  double d() const { return d_; }
  bool dropout() const { return dropout_; }

  // A matmul with weights: `rows` x `in` times `in` x `out`. Forward, input gradient and weight
  // gradient each cost 2*rows*in*out and each move the input, the weight and the output once.
  // `weight_copies` distinct weight matrices share the rows (MoE experts: that many GEMMs of
  // rows / weight_copies rows each); `input_grad` is false for the first layer of a model,
  // whose input needs no gradient. `split` is Megatron's: column-parallel layers divide their
  // output features across a TP group, row-parallel ones their input features.
  enum class Parallel { kColumn, kRow, kReplicated };
  void linear(double rows, double in, double out, Parallel parallel, double weight_copies = 1.0,
              bool input_grad = true) {
    const double flops = 2.0 * rows * in * out;
    const double bytes = d_ * (rows * in + weight_copies * in * out + rows * out);
    const double m = rows / weight_copies;
    const bool column = parallel == Parallel::kColumn;
    const bool row = parallel == Parallel::kRow;
    auto gemm = [&](KernelPass pass, double gm, double gn, double gk, GemmSplit split) {
      Kernel kernel;
      kernel.kind = KernelKind::kGemm;
      kernel.pass = pass;
      kernel.flops = flops;
      kernel.bytes = bytes;
      kernel.m = gm;
      kernel.n = gn;
      kernel.k = gk;
      kernel.count = weight_copies;
      kernel.split = parallel == Parallel::kReplicated ? GemmSplit::kNone : split;
      kernels_.push_back(kernel);
    };
    // Y = X W (m x in x out); dX = dY W^T (m x out x in); dW = X^T dY (in x m x out).
    gemm(KernelPass::kForward, m, out, in, column ? GemmSplit::kN : GemmSplit::kK);
    if (input_grad) {
      gemm(KernelPass::kBackwardInput, m, in, out, column ? GemmSplit::kK : GemmSplit::kN);
    }
    gemm(KernelPass::kBackwardWeight, in, out, m, row ? GemmSplit::kM : GemmSplit::kN);
  }

  // Work without weights, priced as `kind` (the attention core, the SSM scan): its whole
  // backward is input gradient, `backward_factor` times the forward FLOPs.
  Kernel& weightless(KernelKind kind, double forward_flops, double backward_factor,
                     double forward_bytes, double backward_bytes) {
    Kernel f;
    f.kind = kind;
    f.pass = KernelPass::kForward;
    f.flops = forward_flops;
    f.bytes = forward_bytes;
    Kernel b = f;
    b.pass = KernelPass::kBackwardInput;
    b.flops = backward_factor * forward_flops;
    b.bytes = backward_bytes;
    kernels_.push_back(f);
    kernels_.push_back(b);
    return kernels_[kernels_.size() - 2];
  }

  // A memory-bound operation reading `in` bytes and writing `out` bytes in the forward pass;
  // its backward reads the output gradient and the saved input and writes the input gradient.
  // kStream work lies on the residual stream, kElementwise work on tensors TP splits.
  void elementwise(double in, double out, KernelKind kind = KernelKind::kElementwise) {
    memory(kind, KernelPass::kForward, in + out);
    memory(kind, KernelPass::kBackwardInput, out + 2.0 * in);
  }

  void memory(KernelKind kind, KernelPass pass, double bytes) {
    Kernel kernel;
    kernel.kind = kind;
    kernel.pass = pass;
    kernel.bytes = bytes;
    kernels_.push_back(kernel);
  }

  // Activations kept for backward: `kept` survives selective recompute, `scores` (the s^2
  // terms of the attention core) does not.
  void keep(double bytes) { kept_ += bytes; }
  // Kept activations that are the saved input of a linear layer's GEMM (for its weight
  // gradient): what FP8 linear layers keep as 1-byte copies (LayerCost::linear_input_bytes).
  void keep_linear_input(double bytes) {
    kept_ += bytes;
    linear_inputs_ += bytes;
  }
  // Under context parallelism: the keys and values of the device's chunk that attention passes
  // around the group's ring (LayerCost::context_exchange_bytes).
  void exchange(double bytes) { exchanged_ += bytes; }
  void keep_scores(double bytes) { scores_ += bytes; }
  // The cross-entropy of `rows` tokens over `vocab` logits, which a TP group splits by
  // vocabulary. Its compulsory traffic reads the d-byte logits and writes the fp32 softmax it
  // keeps; the backward reads that softmax and writes the logits' gradient (the loss's own
  // gradient is one scalar). How many passes an implementation makes over them is the
  // stack's (timing-model.md).
  void loss(double rows, double vocab) {
    const double logits = rows * vocab;
    for (const KernelPass pass : {KernelPass::kForward, KernelPass::kBackwardInput}) {
      Kernel kernel;
      kernel.kind = KernelKind::kLoss;
      kernel.pass = pass;
      kernel.m = rows;
      kernel.n = vocab;
      kernel.split = GemmSplit::kN;
      kernel.bytes = pass == KernelPass::kForward ? (d_ + 4.0) * logits : (4.0 + 2.0 * d_) * logits;
      kernels_.push_back(kernel);
    }
    kept_ += 4.0 * logits;
    loss_softmax_ += 4.0 * logits;
  }

  // `count` hidden-size norms on `rows` tokens: each keeps its input and is memory-bound.
  void norms(int64_t count, double rows, double hidden) {
    for (int64_t i = 0; i < count; ++i) {
      keep(d_ * rows * hidden);
      elementwise(d_ * rows * hidden, d_ * rows * hidden, KernelKind::kStream);
    }
  }

  // A sub-layer's output added into the residual stream, through dropout when it is on (the
  // 1-byte mask is kept): the forward reads the branch and the residual and writes the sum (and
  // the mask); the backward adds the two gradients of the stream, through the mask.
  void residual_add(double rows, double hidden) {
    const double mask = dropout_ ? rows * hidden : 0.0;
    keep(mask);
    memory(KernelKind::kStream, KernelPass::kForward, 3.0 * d_ * rows * hidden + mask);
    memory(KernelKind::kStream, KernelPass::kBackwardInput, 3.0 * d_ * rows * hidden + mask);
  }

  // The 1-byte mask of a dropout on the embedding's output, when dropout is on.
  void output_dropout(double rows, double hidden) {
    if (dropout_) keep(rows * hidden);
  }

  LayerCost finish(double full_recompute_bytes, double output_bytes, int tp_allreduces) {
    std::array<double, 3> flops{0.0, 0.0, 0.0};
    std::array<double, 3> bytes{0.0, 0.0, 0.0};
    for (const Kernel& kernel : kernels_) {
      flops[static_cast<int>(kernel.pass)] += kernel.flops;
      bytes[static_cast<int>(kernel.pass)] += kernel.bytes;
    }
    LayerCost cost;
    cost.forward = Flops(flops[0]);
    cost.backward_input = Flops(flops[1]);
    cost.backward_weight = Flops(flops[2]);
    cost.forward_memory = Bytes(bytes[0]);
    cost.backward_input_memory = Bytes(bytes[1]);
    cost.backward_weight_memory = Bytes(bytes[2]);
    cost.activation_bytes[static_cast<int>(RecomputePolicy::kNone)] = Bytes(kept_ + scores_);
    cost.activation_bytes[static_cast<int>(RecomputePolicy::kSelective)] = Bytes(kept_);
    cost.activation_bytes[static_cast<int>(RecomputePolicy::kFull)] = Bytes(full_recompute_bytes);
    cost.output_bytes = Bytes(output_bytes);
    cost.tp_allreduces = tp_allreduces;
    cost.context_exchange_bytes = Bytes(exchanged_);
    cost.linear_input_bytes = Bytes(linear_inputs_);
    cost.loss_softmax_bytes = Bytes(loss_softmax_);
    if (sink_ != nullptr) *sink_ = std::move(kernels_);
    return cost;
  }

 private:
  double d_;
  bool dropout_;
  std::vector<Kernel>* sink_;
  std::vector<Kernel> kernels_;
  double kept_ = 0.0;
  double linear_inputs_ = 0.0;
  double loss_softmax_ = 0.0;
  double scores_ = 0.0;
  double exchanged_ = 0.0;
};

using Parallel = CostBuilder::Parallel;

// Query-key pairs one head scores for one sample of n tokens.
double attended_pairs(double n, bool causal, double window) {
  if (!causal) return n * (window > 0.0 ? std::min(n, window) : n);
  if (window <= 0.0 || window >= n) return n * (n + 1.0) / 2.0;
  // Queries 0..w-1 see i+1 keys, the remaining n-w queries see w keys each.
  return window * (window + 1.0) / 2.0 + (n - window) * window;
}

// Attention core shared by standard and latent attention: QK^T and AV over `heads` query heads,
// and the stored score tensors of an eager implementation (full n x n per head even when a mask
// hides part of it). Under context parallelism over `cp` devices each holds n / cp queries (the
// `q`, `k`, `v`, `o` bytes are its chunk's) and scores them against all n keys, a causal mask's
// pairs shared evenly by the load-balanced split; its keys and values go round the ring.
// Its traffic is a fused kernel's (FlashAttention): the forward reads q, k, v and writes o;
// the backward reads q, k, v, o and do and writes dq, dk, dv.
void attention_core(CostBuilder& c, const AttentionShape& a, double batch, double n, double cp,
                    double heads, double qk_dim, double v_dim, double q, double k, double v,
                    double o) {
  const double pairs =
      attended_pairs(n, a.causal, static_cast<double>(std::max<int64_t>(a.sliding_window, 0))) / cp;
  Kernel& core =
      c.weightless(KernelKind::kAttention, 2.0 * batch * heads * (qk_dim + v_dim) * pairs, 2.0,
                   q + k + v + o, 2.0 * (q + k + v) + 2.0 * o);
  for (Kernel* kernel : {&core, &core + 1}) {
    kernel->batch_heads = batch * heads;
    kernel->q_len = n / cp;
    kernel->kv_len = n;
    kernel->pairs = pairs;
    kernel->qk_dim = qk_dim;
    kernel->v_dim = v_dim;
  }
  const double scores = batch * heads * (n / cp) * n;
  if (cp > 1.0) c.exchange(k + v);
  c.keep_scores(c.d() * scores);                           // softmax output
  if (c.dropout()) c.keep_scores((1.0 + c.d()) * scores);  // dropout mask and dropout output
}

double value_head_dim(const AttentionShape& a) {
  return static_cast<double>(a.v_head_dim > 0 ? a.v_head_dim : a.head_dim);
}

void standard_attention(CostBuilder& c, const AttentionShape& a, double batch, double n,
                        double cp) {
  const double rows = batch * n / cp;
  const double h = static_cast<double>(a.hidden);
  const double heads = static_cast<double>(a.num_heads);
  const double kv = static_cast<double>(a.num_kv_heads > 0 ? a.num_kv_heads : a.num_heads);
  const double hd = static_cast<double>(a.head_dim);
  const double vd = value_head_dim(a);
  const double d = c.d();

  // Q, K and V as one GEMM, as Megatron-LM, Transformer Engine and most trainers fuse them.
  c.linear(rows, h, heads * hd + kv * hd + kv * vd, Parallel::kColumn);
  c.keep_linear_input(d * rows * h);  // the projections' shared input
  if (a.qk_norm) {
    c.keep(d * rows * (heads + kv) * hd);
    c.elementwise(d * rows * (heads + kv) * hd, d * rows * (heads + kv) * hd);
  }
  c.keep(d * rows * (heads * hd + kv * hd));  // Q and K for QK^T
  c.keep(d * rows * kv * vd);                 // V for AV
  attention_core(c, a, batch, n, cp, heads, hd, vd, d * rows * heads * hd, d * rows * kv * hd,
                 d * rows * kv * vd, d * rows * heads * vd);
  c.linear(rows, heads * vd, h, Parallel::kRow);  // output projection
  c.keep_linear_input(d * rows * heads * vd);
  c.residual_add(rows, h);
}

void latent_attention(CostBuilder& c, const AttentionShape& a, double batch, double n, double cp) {
  const double rows = batch * n / cp;
  const double h = static_cast<double>(a.hidden);
  const double heads = static_cast<double>(a.num_heads);
  const double nope = static_cast<double>(a.qk_nope_head_dim);
  const double rope = static_cast<double>(a.qk_rope_head_dim);
  const double qk = nope + rope > 0.0 ? nope + rope : static_cast<double>(a.head_dim);
  const double vd = value_head_dim(a);
  const double q_rank = static_cast<double>(a.q_lora_rank);
  const double kv_rank = static_cast<double>(a.kv_lora_rank);
  const double d = c.d();

  c.keep_linear_input(d * rows * h);  // input of the query and latent down-projections
  if (q_rank > 0.0) {
    c.linear(rows, h, q_rank, Parallel::kReplicated);
    c.keep(d * rows * q_rank);               // latent norm input
    c.keep_linear_input(d * rows * q_rank);  // up-projection input
    c.elementwise(d * rows * q_rank, d * rows * q_rank, KernelKind::kStream);
    c.linear(rows, q_rank, heads * qk, Parallel::kColumn);
  } else {
    c.linear(rows, h, heads * qk, Parallel::kColumn);
  }
  c.linear(rows, h, kv_rank + rope, Parallel::kReplicated);
  c.keep(d * rows * (kv_rank + rope));      // latent (+ rope key)
  c.keep_linear_input(d * rows * kv_rank);  // normed latent, the up-projection's input
  c.elementwise(d * rows * kv_rank, d * rows * kv_rank, KernelKind::kStream);
  c.linear(rows, kv_rank, heads * (nope + vd), Parallel::kColumn);
  c.keep(d * rows * heads * (2.0 * qk + vd));  // per-head Q, K and V
  attention_core(c, a, batch, n, cp, heads, qk, vd, d * rows * heads * qk, d * rows * heads * qk,
                 d * rows * heads * vd, d * rows * heads * vd);
  c.linear(rows, heads * vd, h, Parallel::kRow);
  c.keep_linear_input(d * rows * heads * vd);
  c.residual_add(rows, h);
}

void attention(CostBuilder& c, const AttentionShape& a, double batch, double n, double cp) {
  if (a.mla) {
    latent_attention(c, a, batch, n, cp);
  } else {
    standard_attention(c, a, batch, n, cp);
  }
}

// Intermediate activations one token keeps inside a feed-forward network of size f, beyond its
// input: activation input and output, or gate, up and their product.
double ffn_intermediate_bytes(double d, bool gated, double f) {
  return gated ? 3.0 * d * f : 2.0 * d * f;
}

// The projections and activation of one feed-forward network; `weight_copies` distinct
// networks share the rows (routed experts). Keeps only the intermediates.
void ffn_core(CostBuilder& c, double rows, double h, double f, bool gated,
              double weight_copies = 1.0) {
  const double d = c.d();
  if (gated) {
    // Gate and up as one GEMM of twice the width, as Megatron-LM and Transformer Engine run it.
    c.linear(rows, h, 2.0 * f, Parallel::kColumn, weight_copies);
    c.elementwise(2.0 * d * rows * f, d * rows * f);
  } else {
    c.linear(rows, h, f, Parallel::kColumn, weight_copies);  // up
    c.elementwise(d * rows * f, d * rows * f);
  }
  c.linear(rows, f, h, Parallel::kRow, weight_copies);  // down
  // The activation's output is the down projection's input.
  c.keep(rows * (ffn_intermediate_bytes(d, gated, f) - d * f));
  c.keep_linear_input(d * rows * f);
}

void feed_forward(CostBuilder& c, const FeedForwardShape& f, double rows) {
  const double h = static_cast<double>(f.hidden);
  c.keep_linear_input(c.d() * rows * h);
  ffn_core(c, rows, h, static_cast<double>(f.ffn_size), is_gated(f.activation));
  c.residual_add(rows, h);
}

void mixture_of_experts(CostBuilder& c, const MoeShape& m, double rows) {
  const double d = c.d();
  const double h = static_cast<double>(m.hidden);
  const double experts = static_cast<double>(m.num_experts);
  const double k = static_cast<double>(m.top_k);
  const bool gated = is_gated(m.activation);

  c.keep(d * rows * h);  // router input and dispatch source
  c.linear(rows, h, experts, Parallel::kReplicated);
  c.elementwise(d * rows * experts, 4.0 * rows * experts, KernelKind::kStream);
  c.keep(4.0 * rows * experts);  // router probabilities, fp32

  // A latent MoE moves every token to the experts' narrower width and back.
  const double width = m.latent_size > 0 ? static_cast<double>(m.latent_size) : h;
  if (m.latent_size > 0) {
    c.linear(rows, h, width, Parallel::kReplicated);
    c.keep(d * rows * width);  // latent tokens, the dispatch source
  }

  // Routed experts: k copies of every token; each touched expert's weights are read once.
  const double copies = k * rows;
  const double touched = std::min(experts, copies);
  c.elementwise(d * rows * width, d * copies * width, KernelKind::kStream);  // dispatch
  c.keep_linear_input(d * copies * width);                                   // expert inputs
  ffn_core(c, copies, width, static_cast<double>(m.expert_ffn_size), gated, touched);
  c.keep(d * copies * width);  // expert outputs, for the routing-weight gradient
  c.elementwise(d * copies * width, d * rows * width, KernelKind::kStream);  // weighted combine
  if (m.latent_size > 0) {
    c.linear(rows, width, h, Parallel::kReplicated);
    c.keep_linear_input(d * rows * width);  // combined latent output
  }

  // Shared experts: each sees every token with weights of its own, as `n` networks sharing the
  // rows do (one pass over them rather than a loop as long as the file asks).
  if (m.num_shared_experts > 0) {
    const double n = static_cast<double>(m.num_shared_experts);
    ffn_core(c, n * rows, h, static_cast<double>(m.shared_ffn_size), gated, n);
  }
  if (m.num_shared_experts > 0 && m.shared_expert_gate) {
    c.linear(rows, h, 1.0, Parallel::kReplicated);
    c.keep(d * rows * (1.0 + h));  // gate value and the gated expert output
  }
  c.residual_add(rows, h);
}

void mamba2(CostBuilder& c, const MambaShape& m, double rows) {
  const double d = c.d();
  const double h = static_cast<double>(m.hidden);
  const double inner = static_cast<double>(m.d_inner);
  const double bc = 2.0 * static_cast<double>(m.n_groups) * static_cast<double>(m.d_state);
  const double heads = static_cast<double>(m.n_heads);
  const double conv = inner + bc;  // channels through the causal convolution: x, B, C

  c.keep_linear_input(d * rows * h);
  c.linear(rows, h, 2.0 * inner + bc + heads, Parallel::kColumn);  // in_proj: z, x, B, C, dt
  c.keep(d * rows * (2.0 * inner + bc + heads));
  c.elementwise(d * rows * conv, d * rows * conv);  // conv1d + SiLU
  c.keep(2.0 * d * rows * conv);                    // conv output before and after SiLU
  // The scan reads x, B, C and dt and writes y.
  const double scan_in = d * rows * (conv + heads);
  const double scan_out = d * rows * inner;
  c.weightless(KernelKind::kScan, 7.0 * rows * inner * static_cast<double>(m.d_state), 2.0,
               scan_in + scan_out, scan_out + 2.0 * scan_in);
  c.keep(d * rows * inner);                                 // scan output y
  c.elementwise(2.0 * d * rows * inner, d * rows * inner);  // y * silu(z), gated norm
  if (m.gated_norm) c.keep(d * rows * inner);
  c.linear(rows, inner, h, Parallel::kRow);  // out_proj
  c.keep_linear_input(d * rows * inner);
  c.residual_add(rows, h);
}

void mamba1(CostBuilder& c, const MambaShape& m, double rows) {
  const double d = c.d();
  const double h = static_cast<double>(m.hidden);
  const double inner = static_cast<double>(m.d_inner);
  const double state = static_cast<double>(m.d_state);
  const double rank = static_cast<double>(m.dt_rank);
  const double xp = rank + 2.0 * state;  // x_proj output: dt (low rank), B, C

  c.keep_linear_input(d * rows * h);
  c.linear(rows, h, 2.0 * inner, Parallel::kColumn);  // in_proj: x, z
  c.keep(2.0 * d * rows * inner);
  c.elementwise(d * rows * inner, d * rows * inner);  // conv1d + SiLU
  c.keep(2.0 * d * rows * inner);                     // conv output before and after SiLU
  c.linear(rows, inner, xp, Parallel::kRow);          // x_proj
  c.keep(d * rows * xp);
  if (m.inner_norms) {
    c.elementwise(d * rows * xp, d * rows * xp);
    c.keep(d * rows * xp);
  }
  c.linear(rows, rank, inner, Parallel::kColumn);  // dt_proj
  c.keep(d * rows * inner);
  const double scan_in = d * rows * (2.0 * inner + 2.0 * state);
  const double scan_out = d * rows * inner;
  c.weightless(KernelKind::kScan, 7.0 * rows * inner * state, 2.0, scan_in + scan_out,
               scan_out + 2.0 * scan_in);
  c.keep(d * rows * inner);                                 // scan output y
  c.elementwise(2.0 * d * rows * inner, d * rows * inner);  // y * silu(z)
  c.linear(rows, inner, h, Parallel::kRow);                 // out_proj
  c.keep_linear_input(d * rows * inner);
  c.residual_add(rows, h);
}

// Bytes scale with the tokens of a micro-batch when it differs from the measured one.
LayerCost measured_cost(const MeasuredLayer& m, double scale) {
  LayerCost cost;
  const Bytes kept = m.activation_bytes * scale;
  cost.activation_bytes[static_cast<int>(RecomputePolicy::kNone)] = kept;
  cost.activation_bytes[static_cast<int>(RecomputePolicy::kSelective)] = kept;
  // The layer input, taken to be as large as the layer output (a residual stream).
  cost.activation_bytes[static_cast<int>(RecomputePolicy::kFull)] =
      std::min(kept, m.output_bytes * scale);
  cost.output_bytes = m.output_bytes * scale;
  return cost;
}

template <class T>
const T& shape(const std::optional<T>& value, const Layer& layer, const char* what) {
  MOTLEY_CHECK(value.has_value(), fmt::format("layer '{}' of kind {} has no {} shape", layer.name,
                                              layer_kind_name(layer.kind), what));
  return *value;
}

LayerCost formula_cost(const Layer& layer, const Workload& w, std::vector<Kernel>* kernels) {
  const double d = static_cast<double>(dtype_bytes(w.dtype));
  const double batch = static_cast<double>(w.micro_batch_size);
  const double n =
      static_cast<double>(layer.tokens_per_sample > 0 ? layer.tokens_per_sample : w.seq_len);
  // Under context parallelism a device holds 1/cp of every sequence's tokens.
  const double cp = static_cast<double>(std::max<int64_t>(w.context_parallel, 1));
  const double rows = batch * n / cp;
  CostBuilder c(d, w.dropout, kernels);

  switch (layer.kind) {
    case LayerKind::kEmbedding: {
      const EmbeddingShape& e = shape(layer.embedding, layer, "embedding");
      const double h = static_cast<double>(e.hidden);
      const double positions = static_cast<double>(e.learned_positions);
      // A gather of token rows (and position rows), summed; no FLOPs and no input gradient.
      c.memory(KernelKind::kGather, KernelPass::kForward,
               d * rows * h * (positions > 0.0 ? 3.0 : 2.0));
      c.memory(KernelKind::kGather, KernelPass::kBackwardWeight,
               d * rows * h + d * (static_cast<double>(e.vocab) + positions) * h);
      c.keep(8.0 * rows);  // token ids (int64) for the scatter-add of the weight gradient
      c.output_dropout(rows, h);
      c.norms(layer.num_norms, rows, h);
      return c.finish(8.0 * rows, d * rows * h, 1);
    }
    case LayerKind::kAttention: {
      const AttentionShape& a = shape(layer.attention, layer, "attention");
      c.norms(layer.num_norms, rows, static_cast<double>(a.hidden));
      attention(c, a, batch, n, cp);
      const double out = d * rows * static_cast<double>(a.hidden);
      return c.finish(out, out, 1);
    }
    case LayerKind::kFeedForward: {
      const FeedForwardShape& f = shape(layer.ffn, layer, "feed-forward");
      c.norms(layer.num_norms, rows, static_cast<double>(f.hidden));
      feed_forward(c, f, rows);
      const double out = d * rows * static_cast<double>(f.hidden);
      return c.finish(out, out, 1);
    }
    case LayerKind::kMoe: {
      const MoeShape& m = shape(layer.moe, layer, "mixture-of-experts");
      c.norms(layer.num_norms, rows, static_cast<double>(m.hidden));
      mixture_of_experts(c, m, rows);
      const double out = d * rows * static_cast<double>(m.hidden);
      return c.finish(out, out, 1);
    }
    case LayerKind::kMamba: {
      const MambaShape& m = shape(layer.mamba, layer, "mamba");
      c.norms(layer.num_norms, rows, static_cast<double>(m.hidden));
      if (m.version == 1) {
        mamba1(c, m, rows);
      } else {
        mamba2(c, m, rows);
      }
      const double out = d * rows * static_cast<double>(m.hidden);
      return c.finish(out, out, 1);
    }
    case LayerKind::kDecoderBlock:
    case LayerKind::kVisionBlock: {
      const AttentionShape& a = shape(layer.attention, layer, "attention");
      c.norms(layer.num_norms, rows, static_cast<double>(a.hidden));
      attention(c, a, batch, n, cp);
      if (layer.moe.has_value()) {
        mixture_of_experts(c, *layer.moe, rows);
      } else {
        feed_forward(c, shape(layer.ffn, layer, "feed-forward"), rows);
      }
      const double out = d * rows * static_cast<double>(a.hidden);
      return c.finish(out, out, 2);
    }
    case LayerKind::kPatchEmbedding: {
      const PatchEmbeddingShape& p = shape(layer.patch_embedding, layer, "patch embedding");
      const double h = static_cast<double>(p.hidden);
      const double pixels = static_cast<double>(p.patch_size * p.patch_size * p.channels);
      // The first layer: the image needs no gradient, the convolution's weights do.
      c.linear(rows, pixels, h, Parallel::kReplicated, 1.0, /*input_grad=*/false);
      c.keep(d * rows * pixels);
      c.norms(layer.num_norms, rows, h);
      return c.finish(d * rows * pixels, d * rows * h, 0);
    }
    case LayerKind::kProjector: {
      const ProjectorShape& p = shape(layer.projector, layer, "projector");
      const double in = static_cast<double>(p.in_hidden);
      const double out = static_cast<double>(p.out_hidden);
      const double f = static_cast<double>(p.ffn_size);
      c.norms(layer.num_norms, rows, in);
      c.keep(d * rows * in);
      if (f > 0.0) {
        c.linear(rows, in, f, Parallel::kColumn);
        c.elementwise(d * rows * f, d * rows * f);  // GELU
        c.keep(2.0 * d * rows * f);
        c.linear(rows, f, out, Parallel::kRow);
      } else {
        c.linear(rows, in, out, Parallel::kReplicated);
      }
      return c.finish(d * rows * in, d * rows * out, 0);
    }
    case LayerKind::kHead: {
      const HeadShape& hs = shape(layer.head, layer, "head");
      const double h = static_cast<double>(hs.hidden);
      const double vocab = static_cast<double>(hs.vocab);
      c.norms(layer.num_norms, rows, h);
      c.linear(rows, h, vocab, Parallel::kColumn);  // vocabulary-parallel under TP
      c.keep(d * rows * h);
      // Cross-entropy on logits upcast to fp32: the softmax it keeps is 4 bytes per logit.
      c.loss(rows, vocab);
      return c.finish(d * rows * h, 4.0, 0);
    }
    case LayerKind::kMeasured:
      break;
  }
  MOTLEY_CHECK(false, "unhandled layer kind");
  return LayerCost{};
}

}  // namespace

LayerCost layer_cost(const Layer& layer, const Workload& workload) {
  LayerCost cost;
  if (layer.kind == LayerKind::kMeasured) {
    cost = measured_cost(shape(layer.measured, layer, "measured"),
                         measured_token_scale(layer, workload));
  } else {
    cost = formula_cost(layer, workload, nullptr);
  }
  cost.params = layer_params(layer);
  cost.stored_params = layer_stored_params(layer);
  cost.active_params = layer_active_params(layer);
  cost.routed_expert_params = layer_routed_expert_params(layer);
  if (cost.routed_expert_params > 0) {
    const MoeShape& m = *layer.moe;
    const double tokens = static_cast<double>(workload.micro_batch_size) *
                          static_cast<double>(layer.tokens_per_sample > 0 ? layer.tokens_per_sample
                                                                          : workload.seq_len) /
                          static_cast<double>(std::max<int64_t>(workload.context_parallel, 1));
    const double width = static_cast<double>(m.latent_size > 0 ? m.latent_size : m.hidden);
    cost.expert_dispatch_bytes = Bytes(static_cast<double>(dtype_bytes(workload.dtype)) * tokens *
                                       static_cast<double>(m.top_k) * width);
  }
  return cost;
}

std::vector<Kernel> layer_kernels(const Layer& layer, const Workload& workload) {
  std::vector<Kernel> kernels;
  if (layer.kind != LayerKind::kMeasured) formula_cost(layer, workload, &kernels);
  return kernels;
}

double measured_token_scale(const Layer& layer, const Workload& workload) {
  const MeasuredLayer& m = shape(layer.measured, layer, "measured");
  if (m.seq_len <= 0 || m.micro_batch_size <= 0) return 1.0;
  const double n =
      static_cast<double>(layer.tokens_per_sample > 0 ? layer.tokens_per_sample : workload.seq_len);
  return static_cast<double>(workload.micro_batch_size) * n /
         static_cast<double>(std::max<int64_t>(workload.context_parallel, 1)) /
         (static_cast<double>(m.micro_batch_size) * static_cast<double>(m.seq_len));
}

ModelTotals model_totals(const ModelSpec& model, const Workload& workload) {
  Workload w = workload;
  w.dropout = workload.dropout || model.dropout;
  w.context_parallel = 1;  // the whole micro-batch, however a plan splits its sequences
  ModelTotals totals;
  for (const Layer& layer : model.layers) {
    const LayerCost cost = layer_cost(layer, w);
    totals.total_params += cost.params;
    totals.active_params += cost.active_params;
    totals.forward += cost.forward;
    totals.backward_input += cost.backward_input;
    totals.backward_weight += cost.backward_weight;
    for (size_t i = 0; i < totals.activation_bytes.size(); ++i) {
      totals.activation_bytes[i] += cost.activation_bytes[i];
    }
  }
  for (const Layer& layer : model.extra_layers) totals.extra_params += layer_params(layer);
  return totals;
}

}  // namespace motley
