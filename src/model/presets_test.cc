#include "motley/model/presets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model_test_util.h"
#include "motley/model/layer_cost.h"
#include "motley/model/model_json.h"

namespace motley {
namespace {

using model_testing::relative_error;

int64_t total_params(const ModelSpec& m) {
  int64_t n = 0;
  for (const Layer& l : m.layers) n += layer_params(l);
  return n;
}

int64_t active_params(const ModelSpec& m) {
  int64_t n = 0;
  for (const Layer& l : m.layers) n += layer_active_params(l);
  return n;
}

int64_t params_of_kind(const ModelSpec& m, LayerKind kind) {
  int64_t n = 0;
  for (const Layer& l : m.layers) n += l.kind == kind ? layer_params(l) : 0;
  return n;
}

int count_kind(const ModelSpec& m, LayerKind kind) {
  int n = 0;
  for (const Layer& l : m.layers) n += l.kind == kind ? 1 : 0;
  return n;
}

ModelSpec preset_or_die(const std::string& name) {
  Result<ModelSpec> m = model_preset(name);
  EXPECT_TRUE(m.is_ok()) << name << ": " << m.status().message();
  return m.is_ok() ? m.value() : ModelSpec{};
}

// Relative difference to a published figure.
TEST(ModelPresets, ListsEveryPresetInOrder) {
  std::vector<std::string> expected = {
      "llama-3-8b",    "llama-3-70b", "mixtral-8x7b", "deepseek-v2-lite", "gemma-2-9b",
      "nemotron-h-8b", "jamba-v0.1",  "jamba-mini",   "llava-style-vlm",  "tiny-llama",
      "tiny-moe",      "tiny-hybrid", "tiny-gemma"};
  EXPECT_EQ(model_preset_names(), expected);
}

TEST(ModelPresets, EveryPresetBuildsAndValidates) {
  for (const std::string& name : model_preset_names()) {
    Result<ModelSpec> m = model_preset(name);
    ASSERT_TRUE(m.is_ok()) << name << ": " << m.status().message();
    EXPECT_EQ(m->name, name);
    EXPECT_TRUE(validate_model(*m, name).is_ok()) << validate_model(*m, name).message();
    EXPECT_TRUE(m->layers.front().kind == LayerKind::kEmbedding ||
                m->layers.front().kind == LayerKind::kPatchEmbedding)
        << name;
    EXPECT_EQ(m->layers.back().kind, LayerKind::kHead) << name;
  }
}

TEST(ModelPresets, NamesAreCaseInsensitive) {
  Result<ModelSpec> m = model_preset("Tiny-LLaMA");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->name, "tiny-llama");
}

TEST(ModelPresets, UnknownNameListsThePresets) {
  Result<ModelSpec> m = model_preset("llama-9b");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("'llama-9b'"), std::string::npos);
  EXPECT_NE(m.status().message().find("llama-3-8b, llama-3-70b"), std::string::npos);
  EXPECT_NE(m.status().message().find("tiny-gemma"), std::string::npos);
}

// ---- Published models: totals against the numbers their publishers give. ----

// Sum of the safetensors tensors of meta-llama/Meta-Llama-3-8B: 8,030,261,248.
TEST(ModelPresets, Llama3_8bMatchesPublishedCount) {
  ModelSpec m = preset_or_die("llama-3-8b");
  EXPECT_LT(relative_error(total_params(m), 8030261248.0), 0.005) << total_params(m);
}

// meta-llama/Meta-Llama-3-70B: 70,553,706,496.
TEST(ModelPresets, Llama3_70bMatchesPublishedCount) {
  ModelSpec m = preset_or_die("llama-3-70b");
  EXPECT_LT(relative_error(total_params(m), 70553706496.0), 0.005) << total_params(m);
}

// mistralai/Mixtral-8x7B-v0.1: 46,702,792,704 in total; 12,879,925,248 used per token
// (attention, router, norms, embeddings and 2 of the 8 experts of every layer).
TEST(ModelPresets, Mixtral8x7bMatchesPublishedTotalAndActiveCounts) {
  ModelSpec m = preset_or_die("mixtral-8x7b");
  EXPECT_LT(relative_error(total_params(m), 46702792704.0), 0.005) << total_params(m);
  EXPECT_LT(relative_error(active_params(m), 12879925248.0), 0.005) << active_params(m);
}

// google/gemma-2-9b: 9,241,705,984 (the head is tied to the embedding).
TEST(ModelPresets, Gemma2_9bMatchesPublishedCountAndAlternatesWindows) {
  ModelSpec m = preset_or_die("gemma-2-9b");
  EXPECT_LT(relative_error(total_params(m), 9241705984.0), 0.005) << total_params(m);
  std::vector<const Layer*> blocks;
  for (const Layer& l : m.layers) {
    if (l.attention) blocks.push_back(&l);
  }
  ASSERT_EQ(blocks.size(), 42u);
  for (size_t i = 0; i < blocks.size(); ++i) {
    // Transformers' Gemma 2 gives even layers the 4096-token window.
    EXPECT_EQ(blocks[i]->attention->sliding_window, i % 2 == 0 ? 4096 : 0) << i;
    EXPECT_EQ(blocks[i]->num_norms, 4) << i;
    ASSERT_TRUE(blocks[i]->ffn.has_value());
    EXPECT_EQ(blocks[i]->ffn->activation, Activation::kGeGlu);
  }
  ASSERT_TRUE(m.layers.back().head.has_value());
  EXPECT_TRUE(m.layers.back().head->tied);
  EXPECT_EQ(m.layers.back().head->vocab, 256000);
}

// nvidia/Nemotron-H-8B-Base-8K: 8,100,852,736; layers in hybrid_override_pattern order.
TEST(ModelPresets, NemotronH8bMatchesPublishedCountAndPattern) {
  ModelSpec m = preset_or_die("nemotron-h-8b");
  EXPECT_LT(relative_error(total_params(m), 8100852736.0), 0.005) << total_params(m);
  std::string pattern;
  for (const Layer& l : m.layers) {
    if (l.mamba) pattern += 'M';
    if (l.attention) pattern += '*';
    if (l.ffn) pattern += '-';
  }
  EXPECT_EQ(pattern, "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-");
  for (const Layer& l : m.layers) {
    if (l.ffn) {
      EXPECT_EQ(l.ffn->activation, Activation::kRelu2);
    }
    if (l.mamba) {
      EXPECT_EQ(l.mamba->n_heads, 128);
      EXPECT_EQ(l.mamba->head_dim, 64);
      EXPECT_EQ(l.mamba->n_groups, 8);
      EXPECT_EQ(l.mamba->d_state, 128);
    }
  }
}

// deepseek-ai/DeepSeek-V2-Lite: "15.7B total, 2.4B activated" (model card). Counting the
// Hugging Face modules gives 15,706,484,224 and 2,661,150,208 per token; the card's active
// figure leaves out the 209,715,200-entry embedding table (2,451,435,008).
TEST(ModelPresets, DeepSeekV2LiteMatchesPublishedCounts) {
  ModelSpec m = preset_or_die("deepseek-v2-lite");
  EXPECT_LT(relative_error(total_params(m), 15.7e9), 0.005) << total_params(m);
  EXPECT_EQ(total_params(m), 15706484224);
  EXPECT_EQ(active_params(m), 2661150208);
  int dense = 0, moe = 0;
  for (const Layer& l : m.layers) {
    if (l.attention) {
      EXPECT_TRUE(l.attention->mla);
      EXPECT_EQ(l.attention->q_lora_rank, 0);
      EXPECT_EQ(l.attention->kv_lora_rank, 512);
    }
    if (l.ffn) ++dense;
    if (l.moe) {
      ++moe;
      EXPECT_EQ(l.moe->num_experts, 64);
      EXPECT_EQ(l.moe->top_k, 6);
      EXPECT_EQ(l.moe->num_shared_experts, 2);
    }
  }
  EXPECT_EQ(dense, 1);
  EXPECT_EQ(moe, 26);
  auto first_ffn =
      std::find_if(m.layers.begin(), m.layers.end(), [](const Layer& l) { return l.ffn || l.moe; });
  ASSERT_NE(first_ffn, m.layers.end());
  EXPECT_TRUE(first_ffn->ffn.has_value()) << "the first layer should be the dense one";
}

// ai21labs/Jamba-v0.1: "52B total, 12B active" (AI21). Counting the Hugging Face modules
// (Mamba-1 mixer with dt/B/C norms) gives 51,570,323,328 and 12,110,311,296.
TEST(ModelPresets, JambaMatchesPublishedCountsAndLayout) {
  for (const char* name : {"jamba-v0.1", "jamba-mini"}) {
    ModelSpec m = preset_or_die(name);
    EXPECT_EQ(total_params(m), 51570323328) << name;
    EXPECT_EQ(active_params(m), 12110311296) << name;
    EXPECT_LT(relative_error(total_params(m), 52e9), 0.01);
    int mamba = 0, attention = 0, moe = 0, dense = 0;
    for (const Layer& l : m.layers) {
      if (l.mamba) {
        ++mamba;
        EXPECT_EQ(l.mamba->version, 1);
      }
      attention += l.attention ? 1 : 0;
      dense += l.ffn ? 1 : 0;
      if (l.moe) {
        ++moe;
        EXPECT_EQ(l.moe->num_experts, 16);
        EXPECT_EQ(l.moe->top_k, 2);
      }
    }
    EXPECT_EQ(mamba, 28);
    EXPECT_EQ(attention, 4);
    EXPECT_EQ(moe, 16);
    EXPECT_EQ(dense, 16);
  }
}

// ---- Built presets ----

// CLIP ViT-L/14-336 block: 4 (1024^2 + 1024) attention + (2 * 1024 * 4096 + 4096 + 1024) MLP
// + 2 LayerNorms (2 * 2048) = 12,596,224. Llama-2-7B block: 4 * 4096^2 + 3 * 4096 * 11008
// + 2 * 4096 = 202,383,360. llava-hf/llava-1.5-7b-hf lists 7.06B parameters.
TEST(ModelPresets, LlavaStyleVlmHasClipEncoderAndLlama7bDecoder) {
  ModelSpec m = preset_or_die("llava-style-vlm");
  EXPECT_EQ(count_kind(m, LayerKind::kPatchEmbedding), 1);
  EXPECT_EQ(count_kind(m, LayerKind::kVisionBlock), 24);
  EXPECT_EQ(count_kind(m, LayerKind::kProjector), 1);
  EXPECT_EQ(count_kind(m, LayerKind::kDecoderBlock), 32);
  for (const Layer& l : m.layers) {
    if (l.kind != LayerKind::kVisionBlock) continue;
    EXPECT_FALSE(l.attention->causal);
    EXPECT_EQ(l.tokens_per_sample, 577);
  }
  EXPECT_EQ(params_of_kind(m, LayerKind::kVisionBlock), 24 * 12596224);
  EXPECT_EQ(params_of_kind(m, LayerKind::kDecoderBlock), 32 * int64_t{202383360});
  EXPECT_LT(relative_error(total_params(m), 7.06e9), 0.005) << total_params(m);
}

// Embedding 256 * 64 = 16,384; head 16,384 + final norm 64. Block: attention
// 64 * 64 (q) + 2 * 64 * 32 (k, v) + 64 * 64 (o) = 12,288; SwiGLU 3 * 64 * 176 = 33,792;
// 2 norms = 128. Total 16,384 + 4 * 46,208 + 16,448 = 217,664.
TEST(ModelPresets, TinyLlamaHasHandCountedParameters) {
  ModelSpec m = preset_or_die("tiny-llama");
  EXPECT_EQ(m.layers.size(), 6u);
  EXPECT_EQ(m.default_seq_len, 64);
  EXPECT_EQ(m.dtype, DType::kFloat32);
  EXPECT_EQ(total_params(m), 217664);
  EXPECT_EQ(active_params(m), 217664);
}

// Block: attention 12,288; 4 experts of 3 * 64 * 64 = 12,288 each; one shared expert 12,288;
// router 64 * 4 = 256; 2 norms 128: 74,112 stored, 49,536 used per token (2 experts).
TEST(ModelPresets, TinyMoeHasHandCountedParameters) {
  ModelSpec m = preset_or_die("tiny-moe");
  EXPECT_EQ(total_params(m), 16384 + 4 * 74112 + 16448);   // 329,280
  EXPECT_EQ(active_params(m), 16384 + 4 * 49536 + 16448);  // 230,976
  for (const Layer& l : m.layers) {
    if (l.kind != LayerKind::kDecoderBlock) continue;
    EXPECT_EQ(l.moe->top_k, 2);
    EXPECT_EQ(l.moe->num_experts, 4);
    EXPECT_EQ(l.moe->num_shared_experts, 1);
  }
}

// Mamba-2 layer (h 64, d_inner 128, 8 heads, 1 group, N 16, kernel 4): norm 64; in_proj
// 64 * (2 * 128 + 2 * 16 + 8) = 18,944; conv (128 + 32) * 4 + 160 bias = 800; dt bias, A and
// D 3 * 8 = 24; gated norm 128; out_proj 128 * 64 = 8,192: 28,152. Attention: norm + 12,288 =
// 12,352. Squared-ReLU MLP: norm + 2 * 64 * 256 = 32,832.
TEST(ModelPresets, TinyHybridHasSplitLayersAndHandCountedParameters) {
  ModelSpec m = preset_or_die("tiny-hybrid");
  std::vector<std::string> names;
  for (const Layer& l : m.layers) names.push_back(l.name);
  EXPECT_EQ(names, (std::vector<std::string>{"embed", "layers.0.mamba", "layers.1.ffn",
                                             "layers.2.attention", "layers.3.ffn", "layers.4.mamba",
                                             "layers.5.ffn", "head"}));
  EXPECT_EQ(count_kind(m, LayerKind::kMamba), 2);
  EXPECT_EQ(count_kind(m, LayerKind::kAttention), 1);
  EXPECT_EQ(count_kind(m, LayerKind::kFeedForward), 3);
  EXPECT_EQ(total_params(m), 16384 + 2 * 28152 + 12352 + 3 * 32832 + 16448);  // 199,984
}

// Block: attention 12,288 + GeGLU 3 * 64 * 128 = 24,576 + 4 norms 256 = 37,120. The tied head
// adds only its final norm.
TEST(ModelPresets, TinyGemmaAlternatesWindowsAndTiesTheHead) {
  ModelSpec m = preset_or_die("tiny-gemma");
  std::vector<int64_t> windows;
  for (const Layer& l : m.layers) {
    if (l.attention) windows.push_back(l.attention->sliding_window);
  }
  EXPECT_EQ(windows, (std::vector<int64_t>{16, 0, 16, 0}));
  EXPECT_TRUE(m.layers.back().head->tied);
  EXPECT_EQ(total_params(m), 16384 + 4 * 37120 + 64);  // 164,928
}

}  // namespace
}  // namespace motley
