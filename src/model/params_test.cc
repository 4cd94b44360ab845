#include <gtest/gtest.h>

#include "motley/model/layer_cost.h"
#include "motley/model/model.h"

namespace motley {
namespace {

// Small shapes whose counts are written out term by term below.
AttentionShape gqa() {
  AttentionShape a;
  a.hidden = 64;
  a.num_heads = 8;
  a.num_kv_heads = 2;
  a.head_dim = 16;
  return a;
}

Layer attention_layer(AttentionShape a, int64_t norms) {
  Layer l;
  l.name = "attn";
  l.kind = LayerKind::kAttention;
  l.attention = a;
  l.num_norms = norms;
  return l;
}

TEST(Params, GroupedQueryAttention) {
  // q 64*8*16 + k 64*2*16 + v 64*2*16 + o 8*16*64, plus one 64-wide norm.
  const int64_t expected = 8192 + 2048 + 2048 + 8192 + 64;
  EXPECT_EQ(layer_params(attention_layer(gqa(), 1)), expected);
  EXPECT_EQ(layer_active_params(attention_layer(gqa(), 1)), expected);
  EXPECT_EQ(layer_stored_params(attention_layer(gqa(), 1)), expected);
}

TEST(Params, AttentionBiasesNormsAndSinks) {
  AttentionShape a = gqa();
  a.qkv_bias = true;     // + 8*16 + 2*16 + 2*16
  a.output_bias = true;  // + 64
  a.qk_norm = true;      // + 2*16
  a.sinks = true;        // + 8
  const int64_t weights = 8192 + 2048 + 2048 + 8192;
  EXPECT_EQ(layer_params(attention_layer(a, 0)), weights + 128 + 32 + 32 + 64 + 32 + 8);
}

TEST(Params, AttentionWithSeparateValueHeadDim) {
  AttentionShape a = gqa();
  a.v_head_dim = 8;
  // q 64*8*16, k 64*2*16, v 64*2*8, o 8*8*64.
  EXPECT_EQ(layer_params(attention_layer(a, 0)), 8192 + 2048 + 1024 + 4096);
}

AttentionShape mla(int64_t q_lora) {
  AttentionShape a;
  a.hidden = 64;
  a.num_heads = 4;
  a.num_kv_heads = 4;
  a.mla = true;
  a.q_lora_rank = q_lora;
  a.kv_lora_rank = 16;
  a.qk_nope_head_dim = 8;
  a.qk_rope_head_dim = 4;
  a.v_head_dim = 8;
  a.head_dim = 12;
  return a;
}

TEST(Params, LatentAttentionWithQueryBottleneck) {
  // q_a_proj 64*24, q_a_layernorm 24, q_b_proj 24*4*(8+4), kv_a_proj_with_mqa 64*(16+4),
  // kv_a_layernorm 16, kv_b_proj 16*4*(8+8), o 4*8*64.
  const int64_t expected = 1536 + 24 + 1152 + 1280 + 16 + 1024 + 2048;
  EXPECT_EQ(layer_params(attention_layer(mla(24), 0)), expected);
}

TEST(Params, LatentAttentionWithoutQueryBottleneck) {
  // q_proj 64*4*(8+4) replaces the three query terms (DeepSeek-V2-Lite).
  const int64_t expected = 3072 + 1280 + 16 + 1024 + 2048;
  EXPECT_EQ(layer_params(attention_layer(mla(0), 0)), expected);
}

TEST(Params, LatentAttentionBiases) {
  AttentionShape a = mla(24);
  a.qkv_bias = true;     // q_a_proj 24 + kv_a_proj_with_mqa 20
  a.output_bias = true;  // o 64
  const int64_t weights = 1536 + 24 + 1152 + 1280 + 16 + 1024 + 2048;
  EXPECT_EQ(layer_params(attention_layer(a, 0)), weights + 24 + 20 + 64);
}

Layer ffn_layer(Activation act, bool bias) {
  Layer l;
  l.name = "ffn";
  l.kind = LayerKind::kFeedForward;
  l.ffn = FeedForwardShape{64, 256, act, bias};
  l.num_norms = 1;
  return l;
}

TEST(Params, FeedForwardGatedAndPlain) {
  EXPECT_EQ(layer_params(ffn_layer(Activation::kSwiGlu, false)), 3 * 64 * 256 + 64);
  EXPECT_EQ(layer_params(ffn_layer(Activation::kGeGlu, false)), 3 * 64 * 256 + 64);
  EXPECT_EQ(layer_params(ffn_layer(Activation::kRelu2, false)), 2 * 64 * 256 + 64);
  EXPECT_EQ(layer_params(ffn_layer(Activation::kGelu, false)), 2 * 64 * 256 + 64);
  // Biases: gate and up 256 each plus down 64; plain: up 256 plus down 64.
  EXPECT_EQ(layer_params(ffn_layer(Activation::kSwiGlu, true)), 3 * 64 * 256 + 576 + 64);
  EXPECT_EQ(layer_params(ffn_layer(Activation::kRelu, true)), 2 * 64 * 256 + 320 + 64);
}

MoeShape small_moe() {
  MoeShape m;
  m.hidden = 64;
  m.num_experts = 8;
  m.top_k = 2;
  m.expert_ffn_size = 32;
  m.activation = Activation::kSwiGlu;
  return m;
}

Layer moe_layer(MoeShape m) {
  Layer l;
  l.name = "moe";
  l.kind = LayerKind::kMoe;
  l.moe = m;
  l.num_norms = 1;
  return l;
}

TEST(Params, MoeCountsAllExpertsInTotalAndTopKActive) {
  const int64_t expert = 3 * 64 * 32;  // 6144
  const int64_t router = 64 * 8;
  EXPECT_EQ(layer_params(moe_layer(small_moe())), router + 8 * expert + 64);
  EXPECT_EQ(layer_active_params(moe_layer(small_moe())), router + 2 * expert + 64);
}

TEST(Params, MoeSharedExpertWithGateAndRouterBias) {
  MoeShape m = small_moe();
  m.num_shared_experts = 1;
  m.shared_ffn_size = 128;
  m.shared_expert_gate = true;
  m.router_bias = true;
  const int64_t expert = 3 * 64 * 32;
  const int64_t always = 64 * 8 + 8 + 3 * 64 * 128 + 64;  // router + bias, shared, its gate
  EXPECT_EQ(layer_params(moe_layer(m)), always + 8 * expert + 64);
  EXPECT_EQ(layer_active_params(moe_layer(m)), always + 2 * expert + 64);
}

TEST(Params, MoeExpertBiases) {
  MoeShape m = small_moe();
  m.expert_bias = true;
  m.router_bias = true;
  const int64_t expert = 3 * 64 * 32 + 2 * 32 + 64;  // gate_up bias 2f, down bias h
  EXPECT_EQ(layer_params(moe_layer(m)), 64 * 8 + 8 + 8 * expert + 64);
  EXPECT_EQ(layer_active_params(moe_layer(m)), 64 * 8 + 8 + 2 * expert + 64);
}

TEST(Params, MoeLatentExperts) {
  MoeShape m = small_moe();
  m.activation = Activation::kRelu2;
  m.latent_size = 16;
  const int64_t expert = 2 * 16 * 32;           // up and down at the latent width
  const int64_t always = 64 * 8 + 2 * 64 * 16;  // router, hidden->latent and latent->hidden
  EXPECT_EQ(layer_params(moe_layer(m)), always + 8 * expert + 64);
  EXPECT_EQ(layer_active_params(moe_layer(m)), always + 2 * expert + 64);
}

TEST(Params, Mamba2Mixer) {
  MambaShape m;
  m.hidden = 64;
  m.d_inner = 128;
  m.d_state = 16;
  m.n_groups = 2;
  m.n_heads = 8;
  m.head_dim = 16;
  m.conv_kernel = 4;
  Layer l;
  l.name = "mamba";
  l.kind = LayerKind::kMamba;
  l.mamba = m;
  l.num_norms = 1;
  // in_proj 64*(2*128 + 2*2*16 + 8) = 64*328; conv (128+64)*4 + 192 bias; dt_bias, A_log, D
  // 3*8; gated norm 128; out_proj 128*64; pre-norm 64.
  const int64_t expected = 20992 + 768 + 192 + 24 + 128 + 8192 + 64;
  EXPECT_EQ(layer_params(l), expected);
  EXPECT_EQ(layer_active_params(l), expected);
  l.mamba->proj_bias = true;  // in_proj 328 + out_proj 64
  EXPECT_EQ(layer_params(l), expected + 328 + 64);
}

TEST(Params, Mamba1Mixer) {
  MambaShape m;
  m.version = 1;
  m.hidden = 64;
  m.d_inner = 128;
  m.d_state = 16;
  m.conv_kernel = 4;
  m.dt_rank = 4;
  m.inner_norms = true;
  Layer l;
  l.name = "mamba";
  l.kind = LayerKind::kMamba;
  l.mamba = m;
  l.num_norms = 1;
  // in_proj 64*256; conv 128*4 + 128; x_proj 128*(4+32); dt_proj 4*128 + 128; A_log 128*16;
  // D 128; out_proj 128*64; inner norms 4+16+16; pre-norm 64.
  const int64_t expected = 16384 + 640 + 4608 + 640 + 2048 + 128 + 8192 + 36 + 64;
  EXPECT_EQ(layer_params(l), expected);
  l.mamba->inner_norms = false;  // Falcon-Mamba's weightless norms
  EXPECT_EQ(layer_params(l), expected - 36);
}

TEST(Params, DecoderBlockSumsItsParts) {
  Layer l;
  l.name = "layers.0";
  l.kind = LayerKind::kDecoderBlock;
  l.attention = gqa();
  l.moe = small_moe();
  l.num_norms = 2;
  const int64_t attention = 8192 + 2048 + 2048 + 8192;
  const int64_t expert = 3 * 64 * 32;
  EXPECT_EQ(layer_params(l), attention + 512 + 8 * expert + 128);
  EXPECT_EQ(layer_active_params(l), attention + 512 + 2 * expert + 128);
  l.moe.reset();
  l.ffn = FeedForwardShape{64, 256, Activation::kSwiGlu, false};
  EXPECT_EQ(layer_params(l), attention + 3 * 64 * 256 + 128);
}

TEST(Params, EmbeddingCountsTheWholeTableAsActive) {
  Layer l;
  l.name = "embed";
  l.kind = LayerKind::kEmbedding;
  l.embedding = EmbeddingShape{1000, 64, 128};
  EXPECT_EQ(layer_params(l), 1000 * 64 + 128 * 64);
  EXPECT_EQ(layer_active_params(l), 1000 * 64 + 128 * 64);
}

TEST(Params, TiedHeadIsStoredButNotCountedTwice) {
  Layer l;
  l.name = "head";
  l.kind = LayerKind::kHead;
  l.head = HeadShape{1000, 64, /*tied=*/true};
  l.num_norms = 1;
  EXPECT_EQ(layer_params(l), 64);
  EXPECT_EQ(layer_active_params(l), 64);
  EXPECT_EQ(layer_stored_params(l), 64 + 1000 * 64);
  l.head->tied = false;
  EXPECT_EQ(layer_params(l), 64 + 1000 * 64);
  EXPECT_EQ(layer_stored_params(l), 64 + 1000 * 64);
}

TEST(Params, LayerNormBiasesDoubleTheNorms) {
  Layer l = ffn_layer(Activation::kGelu, false);
  l.num_norms = 2;
  l.norm_bias = true;
  EXPECT_EQ(layer_params(l), 2 * 64 * 256 + 2 * 2 * 64);
}

TEST(Params, VisionLayers) {
  Layer patch;
  patch.name = "patch";
  patch.kind = LayerKind::kPatchEmbedding;
  patch.patch_embedding = PatchEmbeddingShape{3, 14, 64, 256};
  // Conv 3*14*14*64 + bias 64, position table 256*64.
  EXPECT_EQ(layer_params(patch), 37632 + 64 + 16384);

  Layer block;
  block.name = "vision.0";
  block.kind = LayerKind::kVisionBlock;
  AttentionShape a = gqa();
  a.num_kv_heads = 8;
  a.qkv_bias = true;
  a.output_bias = true;
  a.causal = false;
  block.attention = a;
  block.ffn = FeedForwardShape{64, 256, Activation::kGelu, true};
  block.num_norms = 2;
  block.norm_bias = true;
  // q, k, v, o 64*128 each + biases 3*128 + 64; MLP 2*64*256 + 256 + 64; two LayerNorms.
  EXPECT_EQ(layer_params(block), 4 * 8192 + 384 + 64 + 32768 + 320 + 256);

  Layer proj;
  proj.name = "projector";
  proj.kind = LayerKind::kProjector;
  proj.projector = ProjectorShape{64, 32, 128, true};
  EXPECT_EQ(layer_params(proj), 64 * 128 + 128 + 128 * 32 + 32);
  proj.projector = ProjectorShape{64, 32, 0, false};
  proj.num_norms = 1;  // on the 64-wide input
  EXPECT_EQ(layer_params(proj), 64 * 32 + 64);
}

TEST(Params, MeasuredLayerFromBf16Bytes) {
  Layer l;
  l.name = "m";
  l.kind = LayerKind::kMeasured;
  MeasuredLayer m;
  m.param_bytes = Bytes(2.0e6);
  l.measured = m;
  EXPECT_EQ(layer_params(l), 1000000);
  EXPECT_EQ(layer_active_params(l), 1000000);
}

TEST(TensorParallelObstacle, NamesTheFirstWidthTheDegreeDoesNotDivide) {
  Layer block;
  block.kind = LayerKind::kDecoderBlock;
  block.attention = AttentionShape{};
  block.attention->num_heads = 8;
  block.attention->num_kv_heads = 2;
  block.ffn = FeedForwardShape{};
  block.ffn->ffn_size = 100;
  EXPECT_EQ(tensor_parallel_obstacle(block, 1, true), std::nullopt);
  EXPECT_EQ(tensor_parallel_obstacle(block, 2, true), std::nullopt);
  EXPECT_EQ(tensor_parallel_obstacle(block, 4, true), "num_kv_heads (2) is not a multiple of 4");
  block.attention->num_kv_heads = 8;
  EXPECT_EQ(tensor_parallel_obstacle(block, 4, true), std::nullopt);
  EXPECT_EQ(tensor_parallel_obstacle(block, 8, true), "ffn_size (100) is not a multiple of 8");

  Layer head;
  head.kind = LayerKind::kHead;
  head.head = HeadShape{};
  head.head->vocab = 50257;  // GPT-2's: Megatron pads it, the executor needs it whole
  EXPECT_EQ(tensor_parallel_obstacle(head, 2, false), std::nullopt);
  EXPECT_EQ(tensor_parallel_obstacle(head, 2, true), "vocab (50257) is not a multiple of 2");

  Layer mamba;
  mamba.kind = LayerKind::kMamba;
  mamba.mamba = MambaShape{};
  mamba.mamba->n_heads = 24;
  mamba.mamba->n_groups = 1;
  EXPECT_EQ(tensor_parallel_obstacle(mamba, 8, true), std::nullopt);  // one group, shared
  mamba.mamba->n_groups = 3;
  EXPECT_EQ(tensor_parallel_obstacle(mamba, 2, true),
            "n_groups (3) neither divides nor is a multiple of 2");

  // Mamba-1 has no heads or groups: its channels are split.
  mamba.mamba = MambaShape{};
  mamba.mamba->version = 1;
  mamba.mamba->d_inner = 96;
  EXPECT_EQ(tensor_parallel_obstacle(mamba, 32, true), std::nullopt);
  EXPECT_EQ(tensor_parallel_obstacle(mamba, 64, true), "d_inner (96) is not a multiple of 64");
}

}  // namespace
}  // namespace motley
