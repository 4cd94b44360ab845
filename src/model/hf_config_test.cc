#include "motley/model/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "model_test_util.h"
#include "motley/core/json.h"
#include "motley/model/layer_cost.h"

namespace motley {
namespace {

using model_testing::relative_error;

using ::testing::HasSubstr;

std::string fixture(const std::string& name) {
  return std::string(MOTLEY_TEST_DATA_DIR) + "/hf/" + name;
}

ModelSpec load(const std::string& name) {
  const std::string path = fixture(name);
  Result<Json> json = read_json_file(path);
  EXPECT_TRUE(json.is_ok()) << json.status().message();
  if (!json.is_ok()) return ModelSpec{};
  Result<ModelSpec> model = import_hf_config(*json, path);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  return model.is_ok() ? *model : ModelSpec{};
}

Result<ModelSpec> import_text(const std::string& text, const std::string& source = "test.json") {
  Result<Json> json = parse_json(text, source);
  if (!json.is_ok()) return json.status();
  return import_hf_config(*json, source);
}

std::string error_of(const std::string& text, const std::string& source = "test.json") {
  Result<ModelSpec> model = import_text(text, source);
  EXPECT_FALSE(model.is_ok());
  if (model.is_ok()) return "";
  EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
  return model.status().message();
}

int64_t total(const ModelSpec& m) {
  int64_t t = 0;
  for (const Layer& l : m.layers) t += layer_params(l);
  return t;
}

int64_t active(const ModelSpec& m) {
  int64_t t = 0;
  for (const Layer& l : m.layers) t += layer_active_params(l);
  return t;
}

int64_t extra(const ModelSpec& m) {
  int64_t t = 0;
  for (const Layer& l : m.extra_layers) t += layer_params(l);
  return t;
}

const Layer& find(const ModelSpec& m, const std::string& name) {
  auto it = std::find_if(m.layers.begin(), m.layers.end(),
                         [&](const Layer& l) { return l.name == name; });
  if (it == m.layers.end()) {
    ADD_FAILURE() << "no layer " << name;
    static const Layer kNone;
    return kNone;
  }
  return *it;
}

// ---------------------------------------------------------------------------------------------
// Published counts. Exact numbers are the sum of the checkpoint tensors (safetensors total_size
// / 2 for bf16) or the model card; sources are listed per model in docs/hf-import.md.

TEST(HfConfig, Llama31_8B) {
  const ModelSpec m = load("llama-3.1-8b.json");
  EXPECT_EQ(total(m), 8030261248);  // meta-llama/Llama-3.1-8B checkpoint
  EXPECT_EQ(active(m), total(m));
}

TEST(HfConfig, Llama31_70B) {
  const ModelSpec m = load("llama-3.1-70b.json");
  EXPECT_EQ(total(m), 70553706496);  // meta-llama/Llama-3.1-70B checkpoint
}

TEST(HfConfig, Mixtral8x7B) {
  const ModelSpec m = load("mixtral-8x7b.json");
  EXPECT_EQ(total(m), 46702792704);   // mistralai/Mixtral-8x7B-v0.1 checkpoint
  EXPECT_EQ(active(m), 12879925248);  // 2 of 8 experts per token
}

TEST(HfConfig, Mixtral8x22B) {
  const ModelSpec m = load("mixtral-8x22b.json");
  EXPECT_EQ(total(m), 140620634112);
  EXPECT_EQ(active(m), 39152031744);
}

TEST(HfConfig, Gemma2_9B) {
  const ModelSpec m = load("gemma-2-9b.json");
  EXPECT_EQ(total(m), 9241705984);  // google/gemma-2-9b, tied embeddings counted once
}

TEST(HfConfig, Gemma2_27B) {
  const ModelSpec m = load("gemma-2-27b.json");
  EXPECT_EQ(total(m), 27227128320);
}

TEST(HfConfig, DeepSeekV3) {
  const ModelSpec m = load("deepseek-v3.json");
  EXPECT_EQ(total(m), 671026419200);  // 671B, multi-token prediction module excluded
  EXPECT_EQ(active(m), 37552297472);  // 37B activated
}

TEST(HfConfig, NemotronH_8B) {
  const ModelSpec m = load("nemotron-h-8b.json");
  EXPECT_EQ(total(m), 8100852736);
}

TEST(HfConfig, NemotronH_56B_WithInfinityInConfig) {
  // The fixture's time_step_limit holds a bare Infinity, as Python's json writes it.
  const ModelSpec m = load("nemotron-h-56b.json");
  EXPECT_EQ(total(m), 56324350464);
}

TEST(HfConfig, Qwen3_30B_A3B) {
  const ModelSpec m = load("qwen3-30b-a3b.json");
  EXPECT_EQ(total(m), 30532122624);
  EXPECT_EQ(active(m), 3353032704);
}

TEST(HfConfig, GptOss20B) {
  const ModelSpec m = load("gpt-oss-20b.json");
  EXPECT_EQ(total(m), 20914757184);
  EXPECT_EQ(active(m), 4187440704);
}

// Families beyond the acceptance set: the exact count in closed form from the config's shapes,
// then the published (often rounded) figure.

TEST(HfConfig, Qwen2_7B) {
  const ModelSpec m = load("qwen2-7b.json");
  const int64_t h = 3584, v = 152064, f = 18944;
  // q 3584x3584 + k, v 512x3584 each, all three biased; o unbiased.
  const int64_t attention = h * h + 2 * h * 512 + h * h + (h + 2 * 512);
  const int64_t layer = attention + 3 * h * f + 2 * h;
  const int64_t expected = 2 * v * h + h + 28 * layer;
  EXPECT_EQ(total(m), expected);
  EXPECT_EQ(expected, 7615616512);  // the sum of the module shapes Qwen2-7B prints
}

TEST(HfConfig, Qwen15MoeA27B) {
  const ModelSpec m = load("qwen1.5-moe-a2.7b.json");
  const int64_t h = 2048, v = 151936;
  const int64_t attention = 4 * h * h + 3 * h;  // MHA, q/k/v biases
  const int64_t expert = 3 * h * 1408;
  const int64_t always = attention + 60 * h + 3 * h * 5632 + h + 2 * h;  // router, shared, gate
  const int64_t ends = 2 * v * h + h;
  EXPECT_EQ(total(m), ends + 24 * (always + 60 * expert));
  EXPECT_EQ(active(m), ends + 24 * (always + 4 * expert));
  // Qwen's release post: 14.3B total, 2.7B activated.
  EXPECT_LT(relative_error(total(m), 14.3e9), 0.005);
  EXPECT_LT(relative_error(active(m), 2.7e9), 0.005);
}

TEST(HfConfig, Qwen3_8B) {
  const ModelSpec m = load("qwen3-8b.json");
  const int64_t h = 4096, v = 151936;
  const int64_t attention = h * 4096 + 2 * h * 1024 + 4096 * h + 2 * 128;  // + q/k norms
  const int64_t non_embedding = 36 * (attention + 3 * h * 12288 + 2 * h) + h;
  EXPECT_EQ(total(m), 2 * v * h + non_embedding);
  // Model card: 8.2B parameters, 6.95B non-embedding.
  EXPECT_LT(relative_error(total(m), 8.2e9), 0.005);
  EXPECT_LT(relative_error(total(m) - 2 * v * h, 6.95e9), 0.005);
}

TEST(HfConfig, DeepSeekV2Lite) {
  const ModelSpec m = load("deepseek-v2-lite.json");
  const int64_t h = 2048, v = 102400;
  // MLA without a query bottleneck: q_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o.
  const int64_t attention =
      h * 16 * 192 + h * (512 + 64) + 512 + 512 * 16 * (128 + 128) + 16 * 128 * h;
  const int64_t dense = attention + 3 * h * 10944 + 2 * h;
  const int64_t expert = 3 * h * 1408;
  const int64_t always = attention + 64 * h + 2 * expert + 2 * h;  // router, 2 shared experts
  const int64_t ends = 2 * v * h + h;
  EXPECT_EQ(total(m), ends + dense + 26 * (always + 64 * expert));
  EXPECT_EQ(active(m), ends + dense + 26 * (always + 6 * expert));
  // Model card: 15.7B total.
  EXPECT_LT(relative_error(total(m), 15.7e9), 0.005);
  // The card's 2.4B activated leaves the 0.21B embedding table out (motley counts it), and is
  // rounded: without the table the count is 2.45B.
  EXPECT_LT(relative_error(active(m) - v * h, 2.4e9), 0.025);
}

TEST(HfConfig, Phi3Mini) {
  const ModelSpec m = load("phi-3-mini-4k.json");
  const int64_t h = 3072, v = 32064;
  const int64_t layer = 3 * h * h + h * h + 3 * h * 8192 + 2 * h;  // fused qkv_proj, gate_up
  EXPECT_EQ(total(m), 2 * v * h + h + 32 * layer);
  EXPECT_EQ(total(m), 3821079552);
  EXPECT_LT(relative_error(total(m), 3.8e9), 0.006);  // model card: 3.8B, rounded
}

TEST(HfConfig, Gemma7B) {
  const ModelSpec m = load("gemma-7b.json");
  const int64_t h = 3072, v = 256000;
  const int64_t layer = 3 * h * 4096 + 4096 * h + 3 * h * 24576 + 2 * h;
  const int64_t non_embedding = 28 * layer + h;
  EXPECT_EQ(non_embedding, 7751248896);  // Gemma report (arXiv 2403.08295), Table 1
  EXPECT_EQ(total(m), v * h + non_embedding);
  EXPECT_EQ(total(m), 8537680896);
}

TEST(HfConfig, Gemma3_1B) {
  const ModelSpec m = load("gemma-3-1b.json");
  const int64_t h = 1152, v = 262144;
  const int64_t attention = h * 1024 + 2 * h * 256 + 1024 * h + 2 * 256;
  const int64_t non_embedding = 26 * (attention + 3 * h * 6912 + 4 * h) + h;
  EXPECT_EQ(total(m), v * h + non_embedding);
  // Gemma 3 report (arXiv 2503.19786), Table 1: 302M embedding, 698M non-embedding.
  EXPECT_LT(relative_error(v * h, 302e6), 0.005);
  EXPECT_LT(relative_error(non_embedding, 698e6), 0.005);
}

TEST(HfConfig, JambaV01) {
  const ModelSpec m = load("jamba-v0.1.json");
  const int64_t h = 4096, v = 65536, d = 8192;
  const int64_t attention = 2 * h * h + 2 * h * 1024;
  // in_proj, conv1d + bias, x_proj, dt_proj + bias, A_log, D, out_proj, dt/B/C norms.
  const int64_t mamba =
      h * 2 * d + d * 4 + d + d * (256 + 32) + 256 * d + d + d * 16 + d + d * h + (256 + 32);
  const int64_t ffn = 3 * h * 14336;
  const int64_t moe_total = 16 * h + 16 * ffn;
  const int64_t moe_active = 16 * h + 2 * ffn;
  // 32 layers: attention at 4, 12, 20, 28 (all even: dense), MoE at every odd layer.
  const int64_t common = 2 * v * h + h + 4 * attention + 28 * mamba + 16 * ffn + 32 * 2 * h;
  EXPECT_EQ(total(m), common + 16 * moe_total);
  EXPECT_EQ(active(m), common + 16 * moe_active);
  // Hugging Face model page: 51.6B; Jamba paper (arXiv 2403.19887): 52B total, 12B active,
  // both rounded (12B to the nearest billion).
  EXPECT_LT(relative_error(total(m), 51.6e9), 0.005);
  EXPECT_LT(std::fabs(static_cast<double>(active(m)) - 12e9), 0.5e9);
}

TEST(HfConfig, Mistral7B) {
  const ModelSpec m = load("mistral-7b-v0.1.json");
  const int64_t h = 4096, v = 32000;
  const int64_t layer = 2 * h * h + 2 * h * 1024 + 3 * h * 14336 + 2 * h;
  EXPECT_EQ(total(m), 2 * v * h + h + 32 * layer);
  EXPECT_EQ(total(m), 7241732096);
}

TEST(HfConfig, MambaCodestral7B) {
  const ModelSpec m = load("mamba-codestral-7b.json");
  const int64_t h = 4096, v = 32768, d = 8192, bc = 2 * 8 * 128;
  // in_proj (z, x, B, C, dt), conv1d + bias over x, B, C, dt_bias/A_log/D, gated norm, out_proj.
  const int64_t mixer = h * (2 * d + bc + 128) + (d + bc) * 5 + 3 * 128 + d + d * h;
  EXPECT_EQ(total(m), 2 * v * h + h + 64 * (mixer + h));
  EXPECT_EQ(total(m), 7285403648);  // Mistral's model card states this exact count
}

TEST(HfConfig, FalconMamba7B) {
  const ModelSpec m = load("falcon-mamba-7b.json");
  const int64_t h = 4096, v = 65024, d = 8192;
  const int64_t mixer =
      h * 2 * d + d * 5 + d * (256 + 32) + 256 * d + d + d * 16 + d + d * h;  // no norm weights
  EXPECT_EQ(total(m), 2 * v * h + h + 64 * (mixer + h));
  EXPECT_LT(relative_error(total(m), 7.27e9), 0.005);  // Hugging Face model page: 7.27B
}

// ---------------------------------------------------------------------------------------------
// Layouts.

TEST(HfConfig, LlamaLayout) {
  const ModelSpec m = load("llama-3.1-8b.json");
  EXPECT_EQ(m.name, "llama-3.1-8b");  // no _name_or_path: the file name
  EXPECT_EQ(m.family, "llama");
  EXPECT_EQ(m.default_seq_len, 4096);  // max_position_embeddings 131072, capped
  ASSERT_EQ(m.layers.size(), 34u);
  EXPECT_EQ(m.layers[0].name, "embed");
  EXPECT_EQ(m.layers[0].kind, LayerKind::kEmbedding);
  const Layer& block = m.layers[1];
  EXPECT_EQ(block.name, "layers.0");
  EXPECT_EQ(block.kind, LayerKind::kDecoderBlock);
  EXPECT_EQ(block.num_norms, 2);
  EXPECT_EQ(block.attention->num_kv_heads, 8);
  EXPECT_EQ(block.attention->head_dim, 128);
  EXPECT_EQ(block.attention->sliding_window, 0);
  EXPECT_EQ(block.ffn->activation, Activation::kSwiGlu);
  EXPECT_EQ(block.ffn->ffn_size, 14336);
  EXPECT_EQ(m.layers.back().name, "head");
  EXPECT_EQ(m.layers.back().kind, LayerKind::kHead);
  EXPECT_FALSE(m.layers.back().head->tied);
  EXPECT_TRUE(m.extra_layers.empty());
}

TEST(HfConfig, Gemma2AlternatesSlidingWindowsAndTiesEmbeddings) {
  const ModelSpec m = load("gemma-2-9b.json");
  EXPECT_TRUE(m.layers.back().head->tied);  // the config has no tie_word_embeddings key
  const Layer& l0 = find(m, "layers.0");
  EXPECT_EQ(l0.num_norms, 4);
  EXPECT_EQ(l0.attention->sliding_window, 4096);
  EXPECT_EQ(find(m, "layers.1").attention->sliding_window, 0);
  EXPECT_EQ(find(m, "layers.40").attention->sliding_window, 4096);
  EXPECT_EQ(l0.ffn->activation, Activation::kGeGlu);
  EXPECT_EQ(l0.attention->head_dim, 256);
  EXPECT_FALSE(l0.attention->qk_norm);
  // A tied head stores the embedding matrix for the stage that holds it.
  EXPECT_EQ(layer_stored_params(m.layers.back()) - layer_params(m.layers.back()), 256000 * 3584);
}

TEST(HfConfig, Gemma3FiveSlidingLayersPerFullOne) {
  const ModelSpec m = load("gemma-3-1b.json");
  for (int i = 0; i < 26; ++i) {
    const int64_t expected = (i + 1) % 6 == 0 ? 0 : 512;
    EXPECT_EQ(find(m, "layers." + std::to_string(i)).attention->sliding_window, expected) << i;
  }
  EXPECT_TRUE(find(m, "layers.0").attention->qk_norm);
  EXPECT_EQ(m.family, "gemma3_text");
}

TEST(HfConfig, GptOssFollowsLayerTypes) {
  const ModelSpec m = load("gpt-oss-20b.json");
  const Layer& l0 = find(m, "layers.0");
  EXPECT_EQ(l0.attention->sliding_window, 128);
  EXPECT_EQ(find(m, "layers.1").attention->sliding_window, 0);
  EXPECT_TRUE(l0.attention->sinks);
  EXPECT_TRUE(l0.attention->qkv_bias);
  EXPECT_TRUE(l0.attention->output_bias);
  ASSERT_TRUE(l0.moe.has_value());
  EXPECT_EQ(l0.moe->num_experts, 32);
  EXPECT_EQ(l0.moe->top_k, 4);
  EXPECT_TRUE(l0.moe->expert_bias);
  EXPECT_TRUE(l0.moe->router_bias);
}

TEST(HfConfig, NemotronHSplitsEverySymbol) {
  const ModelSpec m = load("nemotron-h-8b.json");
  ASSERT_EQ(m.layers.size(), 54u);  // 52 symbols, embedding, head
  EXPECT_EQ(m.layers[1].name, "layers.0.mamba");
  EXPECT_EQ(m.layers[2].name, "layers.1.ffn");
  EXPECT_EQ(m.layers[8].name, "layers.7.attention");
  const Layer& mamba = m.layers[1];
  EXPECT_EQ(mamba.kind, LayerKind::kMamba);
  EXPECT_EQ(mamba.num_norms, 1);
  EXPECT_EQ(mamba.mamba->version, 2);
  EXPECT_EQ(mamba.mamba->d_inner, 8192);
  EXPECT_EQ(mamba.mamba->n_heads, 128);
  EXPECT_EQ(mamba.mamba->n_groups, 8);
  EXPECT_EQ(mamba.mamba->d_state, 128);
  EXPECT_EQ(m.layers[2].kind, LayerKind::kFeedForward);
  EXPECT_EQ(m.layers[2].ffn->activation, Activation::kRelu2);
  EXPECT_EQ(m.layers[2].ffn->ffn_size, 21504);
  const Layer& attention = m.layers[8];
  EXPECT_EQ(attention.kind, LayerKind::kAttention);
  EXPECT_EQ(attention.num_norms, 1);
  EXPECT_EQ(attention.attention->head_dim, 128);
  EXPECT_EQ(attention.attention->num_kv_heads, 8);
  int attention_layers = 0;
  for (const Layer& l : m.layers) attention_layers += l.kind == LayerKind::kAttention;
  EXPECT_EQ(attention_layers, 4);
}

TEST(HfConfig, NemotronHMoeAndLayerList) {
  // The newer list form of the layout, with MoE layers (Nemotron 3 style experts: squared
  // ReLU, one shared expert, a router with a correction bias).
  const char* text = R"({
    "model_type": "nemotron_h", "vocab_size": 1000, "hidden_size": 64,
    "layers_block_type": ["mamba", "moe", "attention", "moe"],
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 2,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "moe_shared_expert_intermediate_size": 48
  })";
  Result<ModelSpec> m = import_text(text);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  ASSERT_EQ(m->layers.size(), 6u);
  EXPECT_EQ(m->layers[2].name, "layers.1.moe");
  EXPECT_EQ(m->layers[3].name, "layers.2.attention");
  const Layer& moe = m->layers[2];
  const int64_t always = 64 * 8 + 8 + 2 * 64 * 48 + 64;  // router + bias, shared expert, norm
  EXPECT_EQ(layer_params(moe), always + 8 * 2 * 64 * 32);
  EXPECT_EQ(layer_active_params(moe), always + 2 * 2 * 64 * 32);
}

TEST(HfConfig, JambaInterleavesMambaAttentionAndExperts) {
  const ModelSpec m = load("jamba-v0.1.json");
  ASSERT_EQ(m.layers.size(), 62u);  // 28 Mamba layers in two parts, 4 blocks, embed, head
  EXPECT_EQ(m.layers[1].name, "layers.0.mamba");
  EXPECT_EQ(m.layers[2].name, "layers.0.ffn");
  EXPECT_EQ(m.layers[3].name, "layers.1.mamba");
  EXPECT_EQ(m.layers[4].name, "layers.1.moe");
  const Layer& mamba = m.layers[1];
  EXPECT_EQ(mamba.mamba->version, 1);
  EXPECT_EQ(mamba.mamba->dt_rank, 256);
  EXPECT_EQ(mamba.mamba->d_inner, 8192);
  EXPECT_TRUE(mamba.mamba->inner_norms);
  const Layer& block = find(m, "layers.4");
  EXPECT_EQ(block.kind, LayerKind::kDecoderBlock);
  EXPECT_TRUE(block.ffn.has_value());
  EXPECT_EQ(block.num_norms, 2);
  EXPECT_EQ(find(m, "layers.1.moe").moe->num_experts, 16);
}

TEST(HfConfig, DeepSeekV3DenseLayersAndMultiTokenPrediction) {
  const ModelSpec m = load("deepseek-v3.json");
  EXPECT_FALSE(find(m, "layers.2").moe.has_value());
  ASSERT_TRUE(find(m, "layers.3").moe.has_value());
  const MoeShape& moe = *find(m, "layers.3").moe;
  EXPECT_EQ(moe.num_experts, 256);
  EXPECT_EQ(moe.num_shared_experts, 1);
  EXPECT_TRUE(moe.router_bias);
  EXPECT_EQ(find(m, "layers.3").attention->q_lora_rank, 1536);

  ASSERT_EQ(m.extra_layers.size(), 3u);
  EXPECT_EQ(m.extra_layers[0].name, "mtp.0.proj");
  EXPECT_EQ(m.extra_layers[1].name, "mtp.0.block");
  EXPECT_EQ(m.extra_layers[2].name, "mtp.0.head");
  // enorm + hnorm, eh_proj, one MoE decoder block like layer 3, the final norm; the
  // embedding and LM head are the main model's.
  const int64_t h = 7168;
  EXPECT_EQ(extra(m), 2 * h + 2 * h * h + layer_params(find(m, "layers.3")) + h);
  EXPECT_EQ(extra(m), 11610068224);
  // The checkpoint's 14B-class MTP figure adds its own copies of embedding and head.
  EXPECT_EQ(extra(m) + 2 * 129280 * h, 13463426304);
}

TEST(HfConfig, DeepSeekV2LiteHasNoQueryBottleneck) {
  const ModelSpec m = load("deepseek-v2-lite.json");
  EXPECT_EQ(find(m, "layers.0").attention->q_lora_rank, 0);
  EXPECT_FALSE(find(m, "layers.0").moe.has_value());
  const MoeShape& moe = *find(m, "layers.1").moe;
  EXPECT_EQ(moe.num_shared_experts, 2);
  EXPECT_EQ(moe.top_k, 6);
  EXPECT_FALSE(moe.router_bias);  // greedy top-k: no correction bias
}

TEST(HfConfig, QwenMoeSparseStepAndMlpOnlyLayers) {
  const char* text = R"({
    "model_type": "qwen2_moe", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 6,
    "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128, "num_experts": 4,
    "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 64, "decoder_sparse_step": 2, "mlp_only_layers": [3]
  })";
  Result<ModelSpec> m = import_text(text);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  // Sparse where (i + 1) % 2 == 0 and i is not listed: layers 1 and 5.
  for (int i = 0; i < 6; ++i) {
    const Layer& l = find(*m, "layers." + std::to_string(i));
    EXPECT_EQ(l.moe.has_value(), i == 1 || i == 5) << i;
    EXPECT_EQ(l.ffn.has_value(), !(i == 1 || i == 5)) << i;
  }
  const MoeShape& moe = *find(*m, "layers.1").moe;
  EXPECT_TRUE(moe.shared_expert_gate);
  EXPECT_EQ(moe.shared_ffn_size, 64);
  EXPECT_TRUE(find(*m, "layers.1").attention->qkv_bias);
}

TEST(HfConfig, MistralAndPhi3SlideEveryLayer) {
  EXPECT_EQ(find(load("mistral-7b-v0.1.json"), "layers.31").attention->sliding_window, 4096);
  EXPECT_EQ(find(load("phi-3-mini-4k.json"), "layers.0").attention->sliding_window, 2047);
  EXPECT_EQ(find(load("mixtral-8x7b.json"), "layers.0").attention->sliding_window, 0);  // null
}

TEST(HfConfig, FalconMambaIntermediateSizeWinsOverExpand) {
  const ModelSpec m = load("falcon-mamba-7b.json");
  EXPECT_EQ(m.name, "falcon-mamba-7b");  // "_name_or_path": "./" names nothing
  const Layer& l = find(m, "layers.0");
  EXPECT_EQ(l.kind, LayerKind::kMamba);
  EXPECT_EQ(l.mamba->version, 1);
  EXPECT_EQ(l.mamba->d_inner, 8192);  // not expand (16) x 4096
  EXPECT_EQ(l.mamba->dt_rank, 256);
  EXPECT_FALSE(l.mamba->inner_norms);
  EXPECT_FALSE(m.layers.back().head->tied);
}

// ---------------------------------------------------------------------------------------------
// Defaults for absent keys.

TEST(HfConfig, LlamaDefaults) {
  Result<ModelSpec> m = import_text(R"({"model_type": "llama", "vocab_size": 1000,
      "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
      "intermediate_size": 512})",
                                    "models/tiny/config.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->name, "tiny");  // config.json: the folder's name
  EXPECT_EQ(m->default_seq_len, 4096);
  const Layer& l = m->layers[1];
  EXPECT_EQ(l.attention->num_kv_heads, 8);  // = num_attention_heads
  EXPECT_EQ(l.attention->head_dim, 32);     // = hidden_size / num_attention_heads
  EXPECT_FALSE(l.attention->qkv_bias);
  EXPECT_FALSE(l.ffn->bias);
  EXPECT_EQ(l.ffn->activation, Activation::kSwiGlu);
  EXPECT_FALSE(m->layers.back().head->tied);
  // 2 x 1000 x 256 + 256 + 2 x (4 x 256^2 + 3 x 256 x 512 + 2 x 256)
  EXPECT_EQ(total(*m), 512000 + 256 + 2 * (262144 + 393216 + 512));
}

TEST(HfConfig, NameAndSequenceLengthFromConfig) {
  Result<ModelSpec> m = import_text(R"({"model_type": "llama", "vocab_size": 1000,
      "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
      "intermediate_size": 512, "_name_or_path": "org/Model-1B", "max_position_embeddings": 2048})");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->name, "org/Model-1B");
  EXPECT_EQ(m->default_seq_len, 2048);
}

TEST(HfConfig, FamilyDefaults) {
  // Gemma: tied embeddings, head_dim 256, GeGLU, 16 key/value heads.
  Result<ModelSpec> gemma = import_text(R"({"model_type": "gemma", "vocab_size": 1000,
      "hidden_size": 256, "num_hidden_layers": 1, "num_attention_heads": 16,
      "intermediate_size": 512})");
  ASSERT_TRUE(gemma.is_ok()) << gemma.status().message();
  EXPECT_TRUE(gemma->layers.back().head->tied);
  EXPECT_EQ(gemma->layers[1].attention->head_dim, 256);
  EXPECT_EQ(gemma->layers[1].attention->num_kv_heads, 16);
  EXPECT_EQ(gemma->layers[1].ffn->activation, Activation::kGeGlu);

  // Qwen2: q/k/v biases whatever attention_bias says; o has none.
  Result<ModelSpec> qwen = import_text(R"({"model_type": "qwen2", "vocab_size": 1000,
      "hidden_size": 256, "num_hidden_layers": 1, "num_attention_heads": 8,
      "num_key_value_heads": 2, "intermediate_size": 512, "attention_bias": false})");
  ASSERT_TRUE(qwen.is_ok()) << qwen.status().message();
  EXPECT_TRUE(qwen->layers[1].attention->qkv_bias);
  EXPECT_FALSE(qwen->layers[1].attention->output_bias);

  // Mistral: an absent sliding_window is 4096 and num_key_value_heads 8; null means none.
  // Qwen2-MoE: transformers' fixed default of 16 key/value heads does not fit 4 heads.
  EXPECT_THAT(error_of(R"({"model_type": "qwen2_moe", "vocab_size": 10, "hidden_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 64})"),
              HasSubstr("must divide num_attention_heads (4), got 16 (the family's default"));

  Result<ModelSpec> mistral = import_text(R"({"model_type": "mistral", "vocab_size": 1000,
      "hidden_size": 256, "num_hidden_layers": 1, "num_attention_heads": 16,
      "intermediate_size": 512})");
  ASSERT_TRUE(mistral.is_ok()) << mistral.status().message();
  EXPECT_EQ(mistral->layers[1].attention->sliding_window, 4096);
  EXPECT_EQ(mistral->layers[1].attention->num_kv_heads, 8);

  // DeepSeek-V2 without routed experts is dense, with the default query bottleneck.
  Result<ModelSpec> deepseek = import_text(R"({"model_type": "deepseek_v2",
      "vocab_size": 1000, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 512})");
  ASSERT_TRUE(deepseek.is_ok()) << deepseek.status().message();
  EXPECT_FALSE(deepseek->layers[2].moe.has_value());
  EXPECT_EQ(deepseek->layers[2].attention->q_lora_rank, 1536);
  EXPECT_EQ(deepseek->layers[2].attention->kv_lora_rank, 512);
  EXPECT_TRUE(deepseek->extra_layers.empty());
}

TEST(HfConfig, SsmDefaults) {
  // Falcon-Mamba: expand 2, time_step_rank "auto" = ceil(hidden / 16), tied embeddings.
  Result<ModelSpec> falcon = import_text(R"({"model_type": "falcon_mamba",
      "vocab_size": 1000, "hidden_size": 100, "num_hidden_layers": 2, "time_step_rank": "auto"})");
  ASSERT_TRUE(falcon.is_ok()) << falcon.status().message();
  EXPECT_EQ(falcon->layers[1].mamba->d_inner, 200);
  EXPECT_EQ(falcon->layers[1].mamba->dt_rank, 7);
  EXPECT_EQ(falcon->layers[1].mamba->d_state, 16);
  EXPECT_TRUE(falcon->layers.back().head->tied);

  // Mamba-2: 128 heads of 64, 8 groups, state 128; untied.
  Result<ModelSpec> mamba2 = import_text(R"({"model_type": "mamba2", "vocab_size": 1000,
      "hidden_size": 4096, "num_hidden_layers": 1})");
  ASSERT_TRUE(mamba2.is_ok()) << mamba2.status().message();
  const MambaShape& m = *mamba2->layers[1].mamba;
  EXPECT_EQ(m.d_inner, 8192);
  EXPECT_EQ(m.n_heads, 128);
  EXPECT_EQ(m.n_groups, 8);
  EXPECT_EQ(m.d_state, 128);
  EXPECT_FALSE(mamba2->layers.back().head->tied);

  // Jamba: "auto" dt rank, layout periods 8 / 2, offsets 4 / 1.
  Result<ModelSpec> jamba = import_text(R"({"model_type": "jamba", "vocab_size": 1000,
      "hidden_size": 64, "num_hidden_layers": 8, "num_attention_heads": 8,
      "intermediate_size": 128, "mamba_dt_rank": "auto"})");
  ASSERT_TRUE(jamba.is_ok()) << jamba.status().message();
  EXPECT_EQ(find(*jamba, "layers.0.mamba").mamba->dt_rank, 4);
  EXPECT_EQ(find(*jamba, "layers.4").kind, LayerKind::kDecoderBlock);
  EXPECT_EQ(find(*jamba, "layers.4").attention->num_kv_heads, 8);
  EXPECT_EQ(find(*jamba, "layers.5.moe").moe->num_experts, 16);
}

// ---------------------------------------------------------------------------------------------
// Bad input.

TEST(HfConfig, SupportedTypes) {
  const std::vector<std::string> types = supported_hf_model_types();
  for (const char* t : {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
                        "gemma", "gemma2", "gemma3_text", "phi3", "deepseek_v2", "deepseek_v3",
                        "jamba", "nemotron_h", "gpt_oss", "mamba2", "falcon_mamba"}) {
    EXPECT_NE(std::find(types.begin(), types.end(), t), types.end()) << t;
  }
}

TEST(HfConfig, UnsupportedModelTypeListsSupportedOnes) {
  const std::string message =
      error_of(R"({"model_type": "bert", "hidden_size": 768})", "bert.json");
  EXPECT_THAT(message, HasSubstr("bert.json"));
  EXPECT_THAT(message, HasSubstr("'model_type'"));
  EXPECT_THAT(message, HasSubstr("\"bert\""));
  for (const std::string& t : supported_hf_model_types()) EXPECT_THAT(message, HasSubstr(t));
}

TEST(HfConfig, MissingModelType) {
  const std::string message = error_of(R"({"hidden_size": 768})", "x.json");
  EXPECT_THAT(message, HasSubstr("x.json: field 'model_type': is missing"));
  EXPECT_THAT(message, HasSubstr("nemotron_h"));
}

TEST(HfConfig, NotAnObject) {
  EXPECT_THAT(error_of("[1, 2]"), HasSubstr("test.json: expected a JSON object"));
}

constexpr const char* kLlamaBase =
    R"("model_type": "llama", "vocab_size": 1000, "intermediate_size": 512)";

TEST(HfConfig, MissingHiddenSize) {
  const std::string message = error_of(std::string("{") + kLlamaBase +
                                       R"(, "num_hidden_layers": 2, "num_attention_heads": 8})");
  EXPECT_EQ(message, "test.json: field 'hidden_size': is missing");
}

TEST(HfConfig, NegativeLayerCount) {
  const std::string message =
      error_of(std::string("{") + kLlamaBase +
               R"(, "hidden_size": 256, "num_hidden_layers": -2, "num_attention_heads": 8})");
  EXPECT_EQ(message, "test.json: field 'num_hidden_layers': expected a positive integer, got -2");
}

TEST(HfConfig, NonIntegerHeadCount) {
  const std::string message =
      error_of(std::string("{") + kLlamaBase +
               R"(, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 32.5})");
  EXPECT_EQ(message, "test.json: field 'num_attention_heads': expected an integer, got 32.5");
}

TEST(HfConfig, WrongTypes) {
  EXPECT_EQ(
      error_of(std::string("{") + kLlamaBase +
               R"(, "hidden_size": "256", "num_hidden_layers": 2, "num_attention_heads": 8})"),
      "test.json: field 'hidden_size': expected an integer, got \"256\"");
  EXPECT_THAT(error_of(std::string("{") + kLlamaBase +
                       R"(, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
                          "tie_word_embeddings": "yes"})"),
              HasSubstr("field 'tie_word_embeddings': expected true or false"));
  EXPECT_THAT(error_of(R"({"model_type": 7})"), HasSubstr("field 'model_type': expected a string"));
}

TEST(HfConfig, InconsistentShapes) {
  EXPECT_THAT(error_of(std::string("{") + kLlamaBase +
                       R"(, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
                          "num_key_value_heads": 3})"),
              HasSubstr("field 'num_key_value_heads': must divide num_attention_heads (8), got 3"));
  EXPECT_THAT(
      error_of(std::string("{") + kLlamaBase +
               R"(, "hidden_size": 250, "num_hidden_layers": 2, "num_attention_heads": 8})"),
      HasSubstr("needs a head_dim"));
  EXPECT_THAT(error_of(R"({"model_type": "mixtral", "vocab_size": 10, "hidden_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 8, "intermediate_size": 64,
      "num_local_experts": 2, "num_experts_per_tok": 4})"),
              HasSubstr("field 'num_experts_per_tok': routes each token to 4 experts but there "
                        "are only 2"));
  EXPECT_THAT(error_of(R"({"model_type": "mamba2", "vocab_size": 10, "hidden_size": 64,
      "num_hidden_layers": 1, "num_heads": 3, "head_dim": 64})"),
              HasSubstr("field 'num_heads'"));
  EXPECT_THAT(error_of(R"({"model_type": "jamba", "vocab_size": 10, "hidden_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 8, "intermediate_size": 64,
      "attn_layer_period": 4, "attn_layer_offset": 4})"),
              HasSubstr("field 'attn_layer_offset': must be less than attn_layer_period (4)"));
}

TEST(HfConfig, BadLayerTypes) {
  const std::string base = R"({"model_type": "gpt_oss", "vocab_size": 10, "hidden_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 8, "intermediate_size": 64, )";
  EXPECT_THAT(error_of(base + R"("layer_types": ["full_attention"]})"),
              HasSubstr("field 'layer_types': expected one entry per layer (num_hidden_layers = "
                        "2), got 1"));
  EXPECT_THAT(error_of(base + R"("layer_types": ["full_attention", "chunky"]})"),
              HasSubstr("field 'layer_types[1]': unsupported layer type \"chunky\""));
}

TEST(HfConfig, BadHybridPattern) {
  const std::string message = error_of(R"({"model_type": "nemotron_h", "vocab_size": 10,
      "hidden_size": 64, "hybrid_override_pattern": "M-X"})");
  EXPECT_THAT(message, HasSubstr("field 'hybrid_override_pattern': unknown layer symbol 'X' at "
                                 "position 2"));
  EXPECT_THAT(error_of(R"({"model_type": "nemotron_h", "vocab_size": 10, "hidden_size": 64})"),
              HasSubstr("field 'hybrid_override_pattern': is missing"));
}

TEST(HfConfig, UnsupportedActivation) {
  const std::string message =
      error_of(std::string("{") + kLlamaBase +
               R"(, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
         "hidden_act": "tanh"})");
  EXPECT_THAT(message, HasSubstr("field 'hidden_act': unsupported activation \"tanh\""));
  EXPECT_THAT(message, HasSubstr("gelu_pytorch_tanh"));
  EXPECT_THAT(error_of(std::string("{") + kLlamaBase +
                       R"(, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
                          "hidden_act": "relu2"})"),
              HasSubstr("a gated feed-forward needs silu, swish or a gelu variant"));
}

// Counts that size lists are capped before anything is allocated; 10^9 layers used to end in
// std::bad_alloc, naming neither the file nor the field.
TEST(HfConfig, HugeLayerCountsAreRejectedBeforeLayersAreMade) {
  EXPECT_EQ(
      error_of(std::string("{") + kLlamaBase +
               R"(, "hidden_size": 256, "num_hidden_layers": 1e9, "num_attention_heads": 8})"),
      "test.json: field 'num_hidden_layers': expected an integer from 1 to 99998, got "
      "1000000000.0");
  // Jamba splits each Mamba layer in two.
  EXPECT_EQ(error_of(R"({"model_type": "jamba", "vocab_size": 1000, "hidden_size": 64,
      "num_hidden_layers": 60000, "num_attention_heads": 8, "intermediate_size": 128})"),
            "test.json: field 'num_hidden_layers': expected an integer from 1 to 49999, got 60000");
  EXPECT_THAT(error_of(R"({"model_type": "deepseek_v3", "vocab_size": 1000, "hidden_size": 64,
      "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 128,
      "num_nextn_predict_layers": 9223372036854775807})"),
              HasSubstr("field 'num_nextn_predict_layers': expected an integer from 0 to 33331, "
                        "got 9223372036854775807"));
  EXPECT_EQ(error_of(R"({"model_type": "nemotron_h", "vocab_size": 10, "hidden_size": 64,
      "intermediate_size": 128, "hybrid_override_pattern": ")" +
                     std::string(100000, '-') + R"("})"),
            "test.json: field 'hybrid_override_pattern': gives 100000 layers; at most 99998 are "
            "supported");
}

TEST(HfConfig, HugeSizesAreRejected) {
  // Within the import's own bound the importer's products cannot overflow; the model's limits
  // then name the layer and field.
  EXPECT_EQ(error_of(std::string("{") + kLlamaBase +
                     R"(, "hidden_size": 4611686018427387905, "num_hidden_layers": 2,
                        "num_attention_heads": 8})"),
            "test.json: field 'hidden_size': expected an integer from 1 to 16777216, got "
            "4611686018427387905");
  EXPECT_EQ(error_of(std::string("{") + kLlamaBase +
                     R"(, "hidden_size": 4194304, "num_hidden_layers": 2,
                        "num_attention_heads": 8})"),
            "test.json: layer 'embed' (layers[0]): embedding.hidden must be at most 1048576, got "
            "4194304");
  EXPECT_EQ(error_of(R"({"model_type": "mamba2", "vocab_size": 1000, "hidden_size": 16777216,
      "expand": 16777216, "num_hidden_layers": 2})"),
            "test.json: field 'num_heads': num_heads (128) x head_dim (64) must equal expand x "
            "hidden_size (281474976710656)");
}

TEST(HfConfig, DuplicateKeysAndNonFiniteNumbersNameTheField) {
  EXPECT_EQ(error_of(std::string("{") + kLlamaBase +
                     R"(, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
                        "hidden_size": 512})"),
            "test.json: field 'hidden_size': duplicate key; a key may appear only once in an "
            "object");
  EXPECT_EQ(error_of(std::string("{") + kLlamaBase +
                     R"(, "hidden_size": NaN, "num_hidden_layers": 2, "num_attention_heads": 8})"),
            "test.json: field 'hidden_size': expected an integer, got NaN");
}

}  // namespace
}  // namespace motley
