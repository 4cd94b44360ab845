#include "motley/model/layer_cost.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace motley {
namespace {

constexpr int kNone = static_cast<int>(RecomputePolicy::kNone);
constexpr int kSelective = static_cast<int>(RecomputePolicy::kSelective);
constexpr int kFull = static_cast<int>(RecomputePolicy::kFull);

Workload workload(int64_t seq_len, int64_t micro_batch_size, bool dropout = false,
                  DType dtype = DType::kBFloat16) {
  Workload w;
  w.seq_len = seq_len;
  w.micro_batch_size = micro_batch_size;
  w.dtype = dtype;
  w.dropout = dropout;
  return w;
}

AttentionShape attention_shape(int64_t h, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  AttentionShape a;
  a.hidden = h;
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = head_dim;
  return a;
}

FeedForwardShape ffn_shape(int64_t h, int64_t f, Activation activation) {
  FeedForwardShape f_shape;
  f_shape.hidden = h;
  f_shape.ffn_size = f;
  f_shape.activation = activation;
  return f_shape;
}

Layer block(const AttentionShape& a, const FeedForwardShape& f, int64_t num_norms = 2) {
  Layer layer;
  layer.name = "decoder.0";
  layer.kind = LayerKind::kDecoderBlock;
  layer.attention = a;
  layer.ffn = f;
  layer.num_norms = num_norms;
  return layer;
}

// An MHA block with a GELU feed-forward of 4h and two LayerNorms: the transformer layer of
// Korthikanti et al. 2022.
Layer gpt_block(int64_t h, int64_t heads, bool causal = true) {
  AttentionShape a = attention_shape(h, heads, heads, h / heads);
  a.causal = causal;
  a.qkv_bias = true;
  a.output_bias = true;
  FeedForwardShape f = ffn_shape(h, 4 * h, Activation::kGelu);
  f.bias = true;
  Layer layer = block(a, f);
  layer.norm_bias = true;
  return layer;
}

Layer head_layer(int64_t h, int64_t vocab) {
  Layer layer;
  layer.name = "head";
  layer.kind = LayerKind::kHead;
  HeadShape head;
  head.hidden = h;
  head.vocab = vocab;
  layer.head = head;
  layer.num_norms = 1;
  return layer;
}

Layer embedding_layer(int64_t h, int64_t vocab) {
  Layer layer;
  layer.name = "embedding";
  layer.kind = LayerKind::kEmbedding;
  EmbeddingShape e;
  e.hidden = h;
  e.vocab = vocab;
  layer.embedding = e;
  return layer;
}

// Llama-like grouped-query block: the forward is every weight matmul plus the causal core.
TEST(LayerCostTest, GroupedQueryBlockFlopsSplitIntoForwardInputAndWeightGradients) {
  const double h = 64, a = 8, kv = 2, hd = 8, f = 160, s = 32, b = 2;
  const Layer layer = block(attention_shape(64, 8, 2, 8), ffn_shape(64, 160, Activation::kSwiGlu));
  const LayerCost cost = layer_cost(layer, workload(32, 2));

  const double t = b * s;
  const double weights = 2 * t * (h * (a * hd + 2 * kv * hd) + a * hd * h + 3 * h * f);
  const double core = 2 * b * a * (hd + hd) * (s * (s + 1) / 2);  // QK^T and AV, causal pairs
  EXPECT_EQ(cost.forward.value(), weights + core);
  EXPECT_EQ(cost.backward_input.value(), weights + 2 * core);
  EXPECT_EQ(cost.backward_weight.value(), weights);
  EXPECT_EQ(cost.output_bytes.value(), 2 * t * h);
  EXPECT_EQ(cost.tp_allreduces, 2);
}

// Context parallelism over c devices: each holds s / c tokens of every sequence and scores them
// against all s keys, a causal mask's pairs shared evenly; its K and V chunk goes round the ring.
TEST(LayerCostTest, ContextParallelDividesTheTokensAndTheCausalPairs) {
  const double h = 64, a = 8, kv = 2, hd = 8, f = 160, s = 32, b = 2, c = 2;
  const Layer layer = block(attention_shape(64, 8, 2, 8), ffn_shape(64, 160, Activation::kSwiGlu));
  Workload w = workload(32, 2);
  w.context_parallel = 2;
  const LayerCost cost = layer_cost(layer, w);
  const double t = b * s / c;
  const double weights = 2 * t * (h * (a * hd + 2 * kv * hd) + a * hd * h + 3 * h * f);
  const double core = 2 * b * a * (hd + hd) * (s * (s + 1) / 2) / c;
  EXPECT_EQ(cost.forward.value(), weights + core);
  EXPECT_EQ(cost.backward_input.value(), weights + 2 * core);
  EXPECT_EQ(cost.backward_weight.value(), weights);
  EXPECT_EQ(cost.output_bytes.value(), 2 * t * h);
  EXPECT_EQ(cost.context_exchange_bytes.value(), 2 * t * (kv * hd + kv * hd));
  EXPECT_EQ(layer_cost(layer, workload(32, 2)).context_exchange_bytes.value(), 0);
  // Korthikanti's bytes for s / c tokens, the scores' s x s per head now (s / c) x s.
  Workload dropout = workload(32, 2, true);
  dropout.context_parallel = 2;
  const LayerCost gpt = layer_cost(gpt_block(64, 4), dropout);
  EXPECT_EQ(gpt.activation_bytes[kNone].value(), s / c * b * h * (34 + 5 * 4 * s / h));
  EXPECT_EQ(gpt.activation_bytes[kSelective].value(), 34 * s / c * b * h);
  // A model's totals stay the whole micro-batch's.
  ModelSpec model;
  model.layers = {layer};
  EXPECT_EQ(model_totals(model, w).forward.value(),
            model_totals(model, workload(32, 2)).forward.value());
}

TEST(LayerCostTest, MultiQueryAttentionProjectsOneKeyAndValueHead) {
  Layer layer;
  layer.name = "attn";
  layer.kind = LayerKind::kAttention;
  layer.attention = attention_shape(64, 8, 1, 8);
  const LayerCost cost = layer_cost(layer, workload(16, 1));
  const double t = 16, h = 64, a = 8, hd = 8;
  const double weights = 2 * t * (h * (a * hd + 2 * hd) + a * hd * h);
  const double core = 2 * a * 2 * hd * (16 * 17 / 2);
  EXPECT_EQ(cost.forward.value(), weights + core);
  EXPECT_EQ(cost.backward_weight.value(), weights);
  EXPECT_EQ(cost.tp_allreduces, 1);
}

TEST(LayerCostTest, ValueHeadDimDiffersFromQueryKeyHeadDim) {
  Layer layer;
  layer.name = "attn";
  layer.kind = LayerKind::kAttention;
  AttentionShape a = attention_shape(64, 4, 2, 16);
  a.v_head_dim = 8;
  a.causal = false;
  layer.attention = a;
  const LayerCost cost = layer_cost(layer, workload(8, 1));
  const double t = 8, h = 64;
  // Q 4x16, K 2x16, V 2x8, output 4x8 -> h; core: QK^T over 16, AV over 8, all 8x8 pairs.
  const double weights = 2 * t * (h * 64 + h * 32 + h * 16 + 32 * h);
  const double core = 2 * 4 * (16 + 8) * (8 * 8);
  EXPECT_EQ(cost.forward.value(), weights + core);
}

// Korthikanti et al. 2022, Section 4.1: sbh(34 + 5as/h) bytes per layer without recompute,
// 34sbh with the attention core recomputed, 2sbh (the layer input) with full recompute.
TEST(LayerCostTest, KorthikantiActivationBytesPerPolicy) {
  const double s = 32, b = 2, h = 64, a = 4;
  const LayerCost cost = layer_cost(gpt_block(64, 4), workload(32, 2, /*dropout=*/true));
  EXPECT_EQ(cost.activation_bytes[kNone].value(), s * b * h * (34 + 5 * a * s / h));
  EXPECT_EQ(cost.activation_bytes[kSelective].value(), 34 * s * b * h);
  EXPECT_EQ(cost.activation_bytes[kFull].value(), 2 * s * b * h);
}

TEST(LayerCostTest, StoredScoresIgnoreCausalityAndWindow) {
  // Eager attention stores the whole s x s score matrix; masking does not shrink it.
  const double s = 32, b = 2, h = 64, a = 4;
  const double expected = s * b * h * (34 + 5 * a * s / h);
  for (bool causal : {true, false}) {
    Layer layer = gpt_block(64, 4, causal);
    EXPECT_EQ(layer_cost(layer, workload(32, 2, true)).activation_bytes[kNone].value(), expected);
    layer.attention->sliding_window = 8;
    EXPECT_EQ(layer_cost(layer, workload(32, 2, true)).activation_bytes[kNone].value(), expected);
  }
}

TEST(LayerCostTest, VisionBlockKeepsKorthikantiBytesForItsOwnTokens) {
  Layer layer = gpt_block(64, 4, /*causal=*/false);
  layer.kind = LayerKind::kVisionBlock;
  layer.tokens_per_sample = 16;  // patches per image, independent of the text length
  const LayerCost cost = layer_cost(layer, workload(1024, 2, true));
  const double s = 16, b = 2, h = 64, a = 4;
  EXPECT_EQ(cost.activation_bytes[kNone].value(), s * b * h * (34 + 5 * a * s / h));
  EXPECT_EQ(cost.activation_bytes[kSelective].value(), 34 * s * b * h);
  EXPECT_EQ(cost.activation_bytes[kFull].value(), 2 * s * b * h);
  // Bidirectional: 24bsh^2 + 4bs^2h.
  EXPECT_EQ(cost.forward.value(), 24 * b * s * h * h + 4 * b * s * s * h);
  EXPECT_EQ(cost.output_bytes.value(), 2 * s * b * h);
  EXPECT_EQ(cost.tp_allreduces, 2);
}

TEST(LayerCostTest, WithoutDropoutNoMasksOrDropoutOutputsAreKept) {
  const double s = 32, b = 2, h = 64, a = 4;
  const LayerCost cost = layer_cost(gpt_block(64, 4), workload(32, 2, /*dropout=*/false));
  // Two output masks (sbh each), the score mask (as^2b) and the dropout output (2as^2b) go.
  EXPECT_EQ(cost.activation_bytes[kNone].value(), s * b * h * 32 + 2 * a * s * s * b);
  EXPECT_EQ(cost.activation_bytes[kSelective].value(), 32 * s * b * h);
}

TEST(LayerCostTest, Fp32DoublesEveryTwoByteTensor) {
  const double s = 32, b = 2, h = 64, a = 4;
  const LayerCost cost =
      layer_cost(gpt_block(64, 4), workload(32, 2, /*dropout=*/false, DType::kFloat32));
  EXPECT_EQ(cost.activation_bytes[kNone].value(), 2 * (s * b * h * 32 + 2 * a * s * s * b));
  EXPECT_EQ(cost.activation_bytes[kFull].value(), 4 * s * b * h);
}

TEST(LayerCostTest, DenseBlockForwardIsKorthikantisFormula) {
  const double b = 2, s = 32, h = 64;
  // Bidirectional counts all s^2 pairs: exactly 24bsh^2 + 4bs^2h.
  EXPECT_EQ(layer_cost(gpt_block(64, 4, false), workload(32, 2)).forward.value(),
            24 * b * s * h * h + 4 * b * s * s * h);
  // Causal counts s(s+1)/2 pairs: 24bsh^2 + 2bs(s+1)h.
  EXPECT_EQ(layer_cost(gpt_block(64, 4, true), workload(32, 2)).forward.value(),
            24 * b * s * h * h + 2 * b * s * (s + 1) * h);
}

ModelSpec gpt_model(int64_t layers, int64_t h, int64_t heads, int64_t vocab, bool causal) {
  ModelSpec model;
  model.name = "gpt";
  model.layers.push_back(embedding_layer(h, vocab));
  for (int64_t i = 0; i < layers; ++i) {
    Layer layer = gpt_block(h, heads, causal);
    layer.name = "decoder." + std::to_string(i);
    model.layers.push_back(layer);
  }
  model.layers.push_back(head_layer(h, vocab));
  return model;
}

// Korthikanti et al. 2022 (model FLOPs per iteration): 72Bslh^2 (1 + s/(6h) + V/(12lh)).
TEST(LayerCostTest, WholeModelTrainingFlopsMatchKorthikanti) {
  const double b = 2, s = 48, l = 4, h = 64, vocab = 768;  // s/(6h) = 1/8, V/(12lh) = 1/4
  const ModelTotals totals =
      model_totals(gpt_model(4, 64, 4, 768, /*causal=*/false), workload(48, 2));
  const double training =
      totals.forward.value() + totals.backward_input.value() + totals.backward_weight.value();
  EXPECT_EQ(training, 72 * b * s * l * h * h * (1 + s / (6 * h) + vocab / (12 * l * h)));
  EXPECT_EQ(totals.forward.value(),
            l * (24 * b * s * h * h + 4 * b * s * s * h) + 2 * b * s * h * vocab);

  // Causal: the s^2 term becomes s(s+1)/2 pairs.
  const ModelTotals causal =
      model_totals(gpt_model(4, 64, 4, 768, /*causal=*/true), workload(48, 2));
  EXPECT_EQ(causal.forward.value() + causal.backward_input.value() + causal.backward_weight.value(),
            72 * b * s * l * h * h + 6 * b * s * (s + 1) * h * l + 6 * b * s * h * vocab);
}

TEST(LayerCostTest, SlidingWindowCountsMinOfPositionAndWindowKeys) {
  Layer layer;
  layer.name = "attn";
  layer.kind = LayerKind::kAttention;
  layer.attention = attention_shape(32, 2, 2, 16);
  const Workload w = workload(32, 1);
  const double full = layer_cost(layer, w).forward.value();
  const double core_per_pair = 2 * 2 * (16 + 16);  // 2 * heads * (hd + v_hd)

  layer.attention->sliding_window = 8;
  // Queries 0..7 see 1..8 keys; queries 8..31 see 8 each: 36 + 24 * 8 = 228 pairs.
  const double windowed = layer_cost(layer, w).forward.value();
  EXPECT_EQ(full - windowed, core_per_pair * (32 * 33 / 2 - 228));
  EXPECT_LT(windowed, full);

  // A window at least as long as the sequence is full attention.
  layer.attention->sliding_window = 32;
  EXPECT_EQ(layer_cost(layer, w).forward.value(), full);
  layer.attention->sliding_window = 100;
  EXPECT_EQ(layer_cost(layer, w).forward.value(), full);
}

TEST(LayerCostTest, LatentAttentionFlops) {
  Layer layer;
  layer.name = "attn";
  layer.kind = LayerKind::kAttention;
  AttentionShape a;
  a.hidden = 64;
  a.num_heads = 4;
  a.num_kv_heads = 4;
  a.mla = true;
  a.q_lora_rank = 24;
  a.kv_lora_rank = 16;
  a.qk_nope_head_dim = 8;
  a.qk_rope_head_dim = 4;
  a.v_head_dim = 8;
  layer.attention = a;
  const double t = 2 * 16, h = 64, heads = 4, ql = 24, kvl = 16, nope = 8, rope = 4, v = 8;
  const double weights = 2 * t *
                         (h * ql + ql * heads * (nope + rope) + h * (kvl + rope) +
                          kvl * heads * (nope + v) + heads * v * h);
  const double core = 2 * 2 * heads * (nope + rope + v) * (16 * 17 / 2);
  const LayerCost cost = layer_cost(layer, workload(16, 2));
  EXPECT_EQ(cost.forward.value(), weights + core);
  EXPECT_EQ(cost.backward_input.value(), weights + 2 * core);
  EXPECT_EQ(cost.backward_weight.value(), weights);

  // Without the query bottleneck the queries come straight from the hidden state.
  layer.attention->q_lora_rank = 0;
  const double direct =
      2 * t *
      (h * heads * (nope + rope) + h * (kvl + rope) + kvl * heads * (nope + v) + heads * v * h);
  EXPECT_EQ(layer_cost(layer, workload(16, 2)).forward.value(), direct + core);
}

TEST(LayerCostTest, FeedForwardVariants) {
  const double t = 3 * 8, h = 16, f = 40, d = 2;
  Layer layer;
  layer.name = "mlp";
  layer.kind = LayerKind::kFeedForward;
  for (Activation act : {Activation::kGelu, Activation::kRelu, Activation::kRelu2,
                         Activation::kSilu, Activation::kSwiGlu, Activation::kGeGlu}) {
    SCOPED_TRACE(activation_name(act));
    layer.ffn = ffn_shape(16, 40, act);
    const bool gated = act == Activation::kSwiGlu || act == Activation::kGeGlu;
    const LayerCost cost = layer_cost(layer, workload(8, 3));
    const double flops = (gated ? 6 : 4) * t * h * f;
    EXPECT_EQ(cost.forward.value(), flops);
    EXPECT_EQ(cost.backward_input.value(), flops);
    EXPECT_EQ(cost.backward_weight.value(), flops);
    // Input, then activation input and output (non-gated) or gate, up and product (gated).
    EXPECT_EQ(cost.activation_bytes[kNone].value(), d * t * h + (gated ? 3 : 2) * d * t * f);
    EXPECT_EQ(cost.activation_bytes[kSelective].value(), cost.activation_bytes[kNone].value());
    EXPECT_EQ(cost.activation_bytes[kFull].value(), d * t * h);
    // With dropout, a 1-byte mask per output element.
    const LayerCost dropped = layer_cost(layer, workload(8, 3, /*dropout=*/true));
    EXPECT_EQ(dropped.activation_bytes[kNone].value(),
              cost.activation_bytes[kNone].value() + t * h);
    EXPECT_EQ(cost.tp_allreduces, 1);
  }
}

TEST(LayerCostTest, FeedForwardMemoryTrafficPerPass) {
  Layer layer;
  layer.name = "mlp";
  layer.kind = LayerKind::kFeedForward;
  layer.ffn = ffn_shape(16, 40, Activation::kGelu);
  const LayerCost cost = layer_cost(layer, workload(8, 3));
  const double t = 24, h = 16, f = 40, d = 2;
  // Each matmul moves input + weight + output once per pass; GELU reads and writes t*f in the
  // forward, and reads dy and x and writes dx in the backward. The residual add reads two
  // t*h tensors and writes one, in each direction.
  const double matmuls = d * (t * h + h * f + t * f) + d * (t * f + f * h + t * h);
  const double residual = 3 * d * t * h;
  EXPECT_EQ(cost.forward_memory.value(), matmuls + 2 * d * t * f + residual);
  EXPECT_EQ(cost.backward_input_memory.value(), matmuls + 3 * d * t * f + residual);
  EXPECT_EQ(cost.backward_weight_memory.value(), matmuls);
}

MoeShape moe_shape() {
  MoeShape m;
  m.hidden = 16;
  m.num_experts = 8;
  m.top_k = 2;
  m.expert_ffn_size = 12;
  m.num_shared_experts = 1;
  m.shared_ffn_size = 20;
  m.activation = Activation::kSwiGlu;
  return m;
}

TEST(LayerCostTest, MoeComputesRouterTopKAndSharedExpertsOnly) {
  Layer layer;
  layer.name = "moe";
  layer.kind = LayerKind::kMoe;
  layer.moe = moe_shape();
  const double t = 2 * 8, h = 16, e = 8, k = 2, fe = 12, fs = 20, d = 2;
  const double router = 2 * t * h * e;
  const double experts = k * 6 * t * h * fe + 6 * t * h * fs;
  const LayerCost cost = layer_cost(layer, workload(8, 2));
  EXPECT_EQ(cost.forward.value(), router + experts);
  EXPECT_EQ(cost.backward_input.value(), router + experts);
  EXPECT_EQ(cost.backward_weight.value(), router + experts);
  EXPECT_EQ(cost.tp_allreduces, 1);

  // Four times the experts: only the router grows.
  layer.moe->num_experts = 32;
  EXPECT_EQ(layer_cost(layer, workload(8, 2)).forward.value(), 4 * router + experts);
  layer.moe->num_experts = 8;

  // Activations: input, fp32 router probabilities, per routed copy its input, gate/up/product
  // and output, the shared expert's gate/up/product.
  EXPECT_EQ(cost.activation_bytes[kNone].value(),
            d * t * h + 4 * t * e + k * t * (d * h + 3 * d * fe + d * h) + 3 * d * t * fs);
  EXPECT_EQ(cost.activation_bytes[kFull].value(), d * t * h);

  // A sigmoid gate on the shared expert adds one h -> 1 projection.
  layer.moe->shared_expert_gate = true;
  EXPECT_EQ(layer_cost(layer, workload(8, 2)).forward.value(), router + experts + 2 * t * h);
}

// Shared experts are costed in one step, however many a file gives (a loop over 2^16 of them
// in each of 10^5 layers took minutes): three cost three times one.
TEST(LayerCostTest, SharedExpertsAddUpWithoutALoopPerExpert) {
  Layer layer;
  layer.name = "moe";
  layer.kind = LayerKind::kMoe;
  layer.moe = moe_shape();
  const double t = 2 * 8, h = 16, fs = 20, d = 2;
  layer.moe->num_shared_experts = 0;
  const LayerCost none = layer_cost(layer, workload(8, 2));
  layer.moe->num_shared_experts = 3;
  const LayerCost three = layer_cost(layer, workload(8, 2));
  EXPECT_EQ(three.forward.value() - none.forward.value(), 3 * 6 * t * h * fs);
  EXPECT_EQ(three.activation_bytes[kNone].value() - none.activation_bytes[kNone].value(),
            3 * 3 * d * t * fs);
  // Each shared expert reads its own weights once per pass: the fused gate-and-up GEMM
  // (t x h in, 2fs wide) and the down GEMM.
  EXPECT_EQ(three.backward_weight_memory.value() - none.backward_weight_memory.value(),
            3 * d * ((t * h + 2 * h * fs + 2 * t * fs) + (t * fs + fs * h + t * h)));
}

TEST(LayerCostTest, LatentMoeRunsExpertsAtTheLatentWidth) {
  Layer layer;
  layer.name = "moe";
  layer.kind = LayerKind::kMoe;
  MoeShape m = moe_shape();
  m.num_shared_experts = 0;
  m.latent_size = 8;
  layer.moe = m;
  const double t = 2 * 8, h = 16, e = 8, k = 2, fe = 12, latent = 8;
  // Router at h, hidden -> latent and latent -> hidden for every token, experts at the latent
  // width (Megatron-LM's latent-MoE accounting).
  const double flops = 2 * t * h * e + 2 * (2 * t * h * latent) + k * 6 * t * latent * fe;
  const LayerCost cost = layer_cost(layer, workload(8, 2));
  EXPECT_EQ(cost.forward.value(), flops);
  EXPECT_EQ(cost.backward_input.value(), flops);
  EXPECT_EQ(cost.backward_weight.value(), flops);
}

TEST(LayerCostTest, MoeParamsCountAllExpertsButActiveOnlyTopK) {
  Layer layer;
  layer.name = "moe";
  layer.kind = LayerKind::kMoe;
  layer.moe = moe_shape();
  const int64_t h = 16, e = 8, k = 2, fe = 12, fs = 20;
  const LayerCost cost = layer_cost(layer, workload(8, 2));
  EXPECT_EQ(cost.params, h * e + 3 * h * fs + e * 3 * h * fe);
  EXPECT_EQ(cost.active_params, h * e + 3 * h * fs + k * 3 * h * fe);
}

TEST(LayerCostTest, MoeReadsOnlyTheExpertsTokensReach) {
  Layer layer;
  layer.name = "moe";
  layer.kind = LayerKind::kMoe;
  MoeShape m = moe_shape();
  m.num_shared_experts = 0;
  m.num_experts = 64;
  m.top_k = 1;
  m.activation = Activation::kGelu;
  layer.moe = m;
  // One token, top-1: one expert's weights are read, not 64.
  const double h = 16, e = 64, f = 12, d = 2;
  const LayerCost cost = layer_cost(layer, workload(1, 1));
  const double router = d * (h + h * e + e) + (d * e + 4 * e);
  const double dispatch = 2 * d * h;
  const double expert = d * (h + h * f + f) + 2 * d * f + d * (f + f * h + h);
  const double combine = 2 * d * h;
  const double residual = 3 * d * h;
  EXPECT_EQ(cost.forward_memory.value(), router + dispatch + expert + combine + residual);
}

TEST(LayerCostTest, DecoderBlockWithMoeEqualsItsSplitForms) {
  Layer attn;
  attn.name = "attn";
  attn.kind = LayerKind::kAttention;
  attn.attention = attention_shape(16, 4, 2, 4);
  attn.num_norms = 1;
  Layer moe;
  moe.name = "moe";
  moe.kind = LayerKind::kMoe;
  moe.moe = moe_shape();
  moe.num_norms = 1;
  Layer whole;
  whole.name = "block";
  whole.kind = LayerKind::kDecoderBlock;
  whole.attention = attn.attention;
  whole.moe = moe.moe;
  whole.num_norms = 2;

  const Workload w = workload(8, 2, /*dropout=*/true);
  const LayerCost a = layer_cost(attn, w), m = layer_cost(moe, w), c = layer_cost(whole, w);
  EXPECT_EQ(c.forward, a.forward + m.forward);
  EXPECT_EQ(c.backward_input, a.backward_input + m.backward_input);
  EXPECT_EQ(c.backward_weight, a.backward_weight + m.backward_weight);
  EXPECT_EQ(c.forward_memory, a.forward_memory + m.forward_memory);
  EXPECT_EQ(c.backward_input_memory, a.backward_input_memory + m.backward_input_memory);
  EXPECT_EQ(c.backward_weight_memory, a.backward_weight_memory + m.backward_weight_memory);
  EXPECT_EQ(c.activation_bytes[kNone], a.activation_bytes[kNone] + m.activation_bytes[kNone]);
  EXPECT_EQ(c.activation_bytes[kSelective],
            a.activation_bytes[kSelective] + m.activation_bytes[kSelective]);
  EXPECT_EQ(c.activation_bytes[kFull], a.activation_bytes[kFull]);
  EXPECT_EQ(c.output_bytes, a.output_bytes);
  EXPECT_EQ(c.tp_allreduces, a.tp_allreduces + m.tp_allreduces);
}

MambaShape mamba2_shape() {
  MambaShape m;
  m.version = 2;
  m.hidden = 64;
  m.d_inner = 128;
  m.d_state = 16;
  m.n_groups = 2;
  m.n_heads = 8;
  m.head_dim = 16;
  return m;
}

// Megatron-LM's accounting: in_proj 2bsh(2d_in + 2GN + n_heads), scan 7bs d_in N,
// out_proj 2bs d_in h.
TEST(LayerCostTest, Mamba2FollowsMegatronAccounting) {
  Layer layer;
  layer.name = "mamba";
  layer.kind = LayerKind::kMamba;
  layer.mamba = mamba2_shape();
  layer.num_norms = 1;
  const double b = 2, s = 32, h = 64, d_in = 128, n = 16, g = 2, heads = 8;
  const double in_proj = 2 * b * s * h * (2 * d_in + 2 * g * n + heads);
  const double scan = 7 * b * s * d_in * n;
  const double out_proj = 2 * b * s * d_in * h;
  const LayerCost cost = layer_cost(layer, workload(32, 2));
  EXPECT_EQ(cost.forward.value(), in_proj + scan + out_proj);
  EXPECT_EQ(cost.backward_input.value(), in_proj + 2 * scan + out_proj);
  EXPECT_EQ(cost.backward_weight.value(), in_proj + out_proj);
  EXPECT_EQ(cost.tp_allreduces, 1);

  const double t = b * s, d = 2;
  // Norm input, in_proj input and output, conv output before/after SiLU, y, gated-norm input,
  // out_proj input.
  EXPECT_EQ(
      cost.activation_bytes[kNone].value(),
      d * t *
          (h + h + (2 * d_in + 2 * g * n + heads) + 2 * (d_in + 2 * g * n) + d_in + d_in + d_in));
  EXPECT_EQ(cost.activation_bytes[kSelective], cost.activation_bytes[kNone]);
  EXPECT_EQ(cost.activation_bytes[kFull].value(), d * t * h);
  EXPECT_EQ(cost.output_bytes.value(), d * t * h);
}

TEST(LayerCostTest, Mamba1CountsItsFourProjectionsAndTheScan) {
  Layer layer;
  layer.name = "mamba";
  layer.kind = LayerKind::kMamba;
  MambaShape m = mamba2_shape();
  m.version = 1;
  m.n_groups = 1;
  m.n_heads = 0;
  m.head_dim = 0;
  m.dt_rank = 4;
  layer.mamba = m;
  const double t = 32, h = 64, d_in = 128, n = 16, r = 4;
  const double weights =
      2 * t * h * 2 * d_in + 2 * t * d_in * (r + 2 * n) + 2 * t * r * d_in + 2 * t * d_in * h;
  const double scan = 7 * t * d_in * n;
  const LayerCost cost = layer_cost(layer, workload(32, 1));
  EXPECT_EQ(cost.forward.value(), weights + scan);
  EXPECT_EQ(cost.backward_input.value(), weights + 2 * scan);
  EXPECT_EQ(cost.backward_weight.value(), weights);

  // in_proj input and output (x, z), conv output before/after SiLU, x_proj
  // output, dt_proj output, y, out_proj input.
  const double d = 2;
  const double kept = d * t * (h + 2 * d_in + 2 * d_in + (r + 2 * n) + d_in + d_in + d_in);
  EXPECT_EQ(cost.activation_bytes[kNone].value(), kept);
  // Learned norms on dt, B and C keep their outputs as well.
  layer.mamba->inner_norms = true;
  EXPECT_EQ(layer_cost(layer, workload(32, 1)).activation_bytes[kNone].value(),
            kept + d * t * (r + 2 * n));
}

TEST(LayerCostTest, HeadIsTheVocabularyMatmulAndAScalarLoss) {
  const double t = 2 * 16, h = 32, vocab = 1000, d = 2;
  const LayerCost cost = layer_cost(head_layer(32, 1000), workload(16, 2));
  EXPECT_EQ(cost.forward.value(), 2 * t * h * vocab);
  EXPECT_EQ(cost.backward_input.value(), 2 * t * h * vocab);
  EXPECT_EQ(cost.backward_weight.value(), 2 * t * h * vocab);
  // Final-norm input, LM-head input, fp32 softmax of the cross-entropy.
  EXPECT_EQ(cost.activation_bytes[kNone].value(), d * t * h + d * t * h + 4 * t * vocab);
  EXPECT_EQ(cost.activation_bytes[kSelective], cost.activation_bytes[kNone]);
  EXPECT_EQ(cost.activation_bytes[kFull].value(), d * t * h);
  EXPECT_EQ(cost.output_bytes.value(), 4);
  EXPECT_EQ(cost.tp_allreduces, 0);
}

TEST(LayerCostTest, EmbeddingHasNoFlopsAndNoInputGradient) {
  const double t = 4 * 16, h = 32, vocab = 1000, d = 2;
  const LayerCost cost = layer_cost(embedding_layer(32, 1000), workload(16, 4));
  EXPECT_EQ(cost.forward.value(), 0);
  EXPECT_EQ(cost.backward_input.value(), 0);
  EXPECT_EQ(cost.backward_weight.value(), 0);
  EXPECT_EQ(cost.backward_input_memory.value(), 0);
  // Gather reads t rows and writes the output; the weight gradient reads dy and writes the
  // dense table gradient.
  EXPECT_EQ(cost.forward_memory.value(), 2 * d * t * h);
  EXPECT_EQ(cost.backward_weight_memory.value(), d * t * h + d * vocab * h);
  EXPECT_EQ(cost.activation_bytes[kNone].value(), 8 * t);  // int64 token ids
  EXPECT_EQ(cost.activation_bytes[kFull].value(), 8 * t);
  EXPECT_EQ(
      layer_cost(embedding_layer(32, 1000), workload(16, 4, true)).activation_bytes[kNone].value(),
      8 * t + t * h);
  EXPECT_EQ(cost.output_bytes.value(), d * t * h);
  EXPECT_EQ(cost.tp_allreduces, 1);
}

TEST(LayerCostTest, PatchEmbeddingHasWeightGradientButNoInputGradient) {
  Layer layer;
  layer.name = "patch";
  layer.kind = LayerKind::kPatchEmbedding;
  PatchEmbeddingShape p;
  p.channels = 3;
  p.patch_size = 4;
  p.hidden = 32;
  p.num_positions = 16;
  layer.patch_embedding = p;
  layer.tokens_per_sample = 16;
  const double t = 2 * 16, pixels = 4 * 4 * 3, h = 32, d = 2;
  const LayerCost cost = layer_cost(layer, workload(4096, 2));
  EXPECT_EQ(cost.forward.value(), 2 * t * pixels * h);
  EXPECT_EQ(cost.backward_input.value(), 0);
  EXPECT_EQ(cost.backward_weight.value(), 2 * t * pixels * h);
  EXPECT_EQ(cost.activation_bytes[kNone].value(), d * t * pixels);
  EXPECT_EQ(cost.activation_bytes[kFull].value(), d * t * pixels);
  EXPECT_EQ(cost.output_bytes.value(), d * t * h);
  EXPECT_EQ(cost.tp_allreduces, 0);
}

TEST(LayerCostTest, ProjectorUsesVisionTokens) {
  Layer layer;
  layer.name = "projector";
  layer.kind = LayerKind::kProjector;
  ProjectorShape p;
  p.in_hidden = 48;
  p.out_hidden = 64;
  layer.projector = p;
  layer.tokens_per_sample = 10;
  const double t = 3 * 10, in = 48, out = 64, f = 80, d = 2;
  LayerCost cost = layer_cost(layer, workload(4096, 3));
  EXPECT_EQ(cost.forward.value(), 2 * t * in * out);
  EXPECT_EQ(cost.backward_input.value(), 2 * t * in * out);
  EXPECT_EQ(cost.activation_bytes[kNone].value(), d * t * in);
  EXPECT_EQ(cost.output_bytes.value(), d * t * out);
  EXPECT_EQ(cost.tp_allreduces, 0);

  layer.projector->ffn_size = 80;
  cost = layer_cost(layer, workload(4096, 3));
  EXPECT_EQ(cost.forward.value(), 2 * t * (in * f + f * out));
  EXPECT_EQ(cost.activation_bytes[kNone].value(), d * t * (in + 2 * f));
  EXPECT_EQ(cost.activation_bytes[kFull].value(), d * t * in);
  EXPECT_EQ(cost.output_bytes.value(), d * t * out);
}

TEST(LayerCostTest, MeasuredLayerUsesItsBytesAndHasNoFlops) {
  Layer layer;
  layer.name = "custom";
  layer.kind = LayerKind::kMeasured;
  MeasuredLayer m;
  m.measured_on = "H100";
  m.times.forward = Seconds(1e-3);
  m.times.backward_input = Seconds(1e-3);
  m.times.backward_weight = Seconds(1e-3);
  m.seq_len = 128;
  m.micro_batch_size = 1;
  m.activation_bytes = Bytes(6000);
  m.output_bytes = Bytes(1000);
  layer.measured = m;

  EXPECT_TRUE(layer_kernels(layer, workload(128, 1)).empty());
  LayerCost cost = layer_cost(layer, workload(128, 1));
  EXPECT_EQ(cost.forward.value(), 0);
  EXPECT_EQ(cost.backward_input.value(), 0);
  EXPECT_EQ(cost.backward_weight.value(), 0);
  EXPECT_EQ(cost.forward_memory.value(), 0);
  EXPECT_EQ(cost.activation_bytes[kNone].value(), 6000);
  EXPECT_EQ(cost.activation_bytes[kSelective].value(), 6000);
  EXPECT_EQ(cost.activation_bytes[kFull].value(), 1000);
  EXPECT_EQ(cost.output_bytes.value(), 1000);
  EXPECT_EQ(cost.tp_allreduces, 0);

  // Twice the tokens per micro-batch: twice the bytes.
  cost = layer_cost(layer, workload(128, 2));
  EXPECT_EQ(cost.activation_bytes[kNone].value(), 12000);
  EXPECT_EQ(cost.output_bytes.value(), 2000);
}

TEST(LayerCostTest, ParamFieldsComeFromTheParameterCounts) {
  const Layer layer =
      block(attention_shape(64, 8, 2, 8), ffn_shape(64, 160, Activation::kSwiGlu), 2);
  const LayerCost cost = layer_cost(layer, workload(32, 2));
  // q, k, v, o; gate, up, down; two RMSNorm weights.
  const int64_t expected = 64 * 64 + 2 * 64 * 16 + 64 * 64 + 3 * 64 * 160 + 2 * 64;
  EXPECT_EQ(cost.params, expected);
  EXPECT_EQ(cost.stored_params, expected);
  EXPECT_EQ(cost.active_params, expected);
}

TEST(LayerCostTest, ModelTotalsSumLayersAndKeepExtraLayersApart) {
  ModelSpec model = gpt_model(2, 32, 4, 100, true);
  Layer extra;
  extra.name = "mtp.mlp";
  extra.kind = LayerKind::kFeedForward;
  extra.ffn = ffn_shape(32, 64, Activation::kGelu);
  model.extra_layers.push_back(extra);
  model.dropout = true;

  const Workload w = workload(16, 2);  // dropout comes from the model
  Workload with_dropout = w;
  with_dropout.dropout = true;
  const ModelTotals totals = model_totals(model, w);

  double forward = 0, input = 0, weight = 0;
  double kept[3] = {0, 0, 0};
  int64_t params = 0;
  for (const Layer& layer : model.layers) {
    const LayerCost cost = layer_cost(layer, with_dropout);
    forward += cost.forward.value();
    input += cost.backward_input.value();
    weight += cost.backward_weight.value();
    for (int i = 0; i < 3; ++i) kept[i] += cost.activation_bytes[i].value();
    params += cost.params;
  }
  EXPECT_EQ(totals.forward.value(), forward);
  EXPECT_EQ(totals.backward_input.value(), input);
  EXPECT_EQ(totals.backward_weight.value(), weight);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(totals.activation_bytes[i].value(), kept[i]);
  EXPECT_EQ(totals.total_params, params);
  // The extra feed-forward network (two bias-free matmuls) is reported apart.
  EXPECT_EQ(totals.extra_params, 2 * 32 * 64);
  // Dropout masks were counted: the model's flag reached every layer.
  ModelSpec without = model;
  without.dropout = false;
  EXPECT_GT(totals.activation_bytes[kNone], model_totals(without, w).activation_bytes[kNone]);
}

TEST(LayerCostTest, KernelsCarryMegatronGemmShapesAndSplits) {
  Layer layer;
  layer.name = "mlp";
  layer.kind = LayerKind::kFeedForward;
  layer.ffn = ffn_shape(16, 40, Activation::kGelu);
  const std::vector<Kernel> kernels = layer_kernels(layer, workload(8, 3));
  std::vector<const Kernel*> gemms;
  for (const Kernel& k : kernels) {
    if (k.kind == KernelKind::kGemm) gemms.push_back(&k);
  }
  // up: F, B, W, then down: F, B, W.
  ASSERT_EQ(gemms.size(), 6u);
  const double t = 24, h = 16, f = 40;
  auto expect = [](const Kernel& k, KernelPass pass, double m, double n, double kk,
                   GemmSplit split) {
    EXPECT_EQ(k.pass, pass);
    EXPECT_EQ(k.m, m);
    EXPECT_EQ(k.n, n);
    EXPECT_EQ(k.k, kk);
    EXPECT_EQ(k.split, split);
    EXPECT_EQ(k.flops, 2 * m * n * kk);
  };
  // Column-parallel up projection: its output features are split.
  expect(*gemms[0], KernelPass::kForward, t, f, h, GemmSplit::kN);
  expect(*gemms[1], KernelPass::kBackwardInput, t, h, f, GemmSplit::kK);
  expect(*gemms[2], KernelPass::kBackwardWeight, h, f, t, GemmSplit::kN);
  // Row-parallel down projection: its input features are split.
  expect(*gemms[3], KernelPass::kForward, t, h, f, GemmSplit::kK);
  expect(*gemms[4], KernelPass::kBackwardInput, t, f, h, GemmSplit::kN);
  expect(*gemms[5], KernelPass::kBackwardWeight, f, h, t, GemmSplit::kM);
}

TEST(LayerCostTest, AttentionKernelCountsCausalPairsAndKeepsTheSequence) {
  Layer layer;
  layer.name = "attn";
  layer.kind = LayerKind::kAttention;
  layer.attention = attention_shape(16, 4, 2, 4);
  int cores = 0;
  for (const Kernel& k : layer_kernels(layer, workload(8, 3))) {
    if (k.kind != KernelKind::kAttention) continue;
    ++cores;
    EXPECT_EQ(k.batch_heads, 3 * 4);
    EXPECT_EQ(k.q_len, 8);
    EXPECT_EQ(k.pairs, 8 * 9 / 2);
    EXPECT_EQ(k.qk_dim, 4);
    EXPECT_EQ(k.v_dim, 4);
  }
  EXPECT_EQ(cores, 2);  // forward and backward
}

}  // namespace
}  // namespace motley
