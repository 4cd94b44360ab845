#include "motley/schedule/layer_split.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "motley/model/presets.h"

namespace motley {
namespace {

// A model of the given layer kinds in order (shapes do not matter to a counting rule).
ModelSpec model_of(const std::vector<LayerKind>& kinds) {
  ModelSpec m;
  m.name = "kinds";
  for (size_t i = 0; i < kinds.size(); ++i) {
    Layer l;
    l.name = "layer." + std::to_string(i);
    l.kind = kinds[i];
    m.layers.push_back(l);
  }
  return m;
}

// An embedding, `blocks` decoder blocks and a head.
ModelSpec language_model(int blocks) {
  std::vector<LayerKind> kinds{LayerKind::kEmbedding};
  kinds.insert(kinds.end(), blocks, LayerKind::kDecoderBlock);
  kinds.push_back(LayerKind::kHead);
  return model_of(kinds);
}

ModelSpec preset(const std::string& name) {
  Result<ModelSpec> m = model_preset(name);
  MOTLEY_CHECK(m.is_ok(), m.status().message());
  return m.value();
}

TEST(LayerSplitTest, NamesRoundTrip) {
  EXPECT_EQ(layer_split_names(), (std::vector<std::string>{"uniform", "megatron"}));
  for (LayerSplit split : {LayerSplit::kUniform, LayerSplit::kMegatron}) {
    EXPECT_EQ(parse_layer_split(layer_split_name(split)), split);
  }
  EXPECT_EQ(parse_layer_split("Megatron"), LayerSplit::kMegatron);
  EXPECT_EQ(parse_layer_split("balanced"), std::nullopt);
}

TEST(LayerSplitTest, UniformRemainderGoesToTheFirstStages) {
  EXPECT_EQ(uniform_bounds(10, 4), (std::vector<int>{0, 3, 6, 8, 10}));
  EXPECT_EQ(uniform_bounds(6, 6), (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(uniform_bounds(7, 1), (std::vector<int>{0, 7}));
  // The embedding and the head count as layers: 34 over 4 stages is 9, 9, 8, 8.
  EXPECT_EQ(split_bounds(LayerSplit::kUniform, language_model(32), 4),
            (std::vector<int>{0, 9, 18, 26, 34}));
}

TEST(LayerSplitTest, DecoderSpanSkipsWhatComesBeforeAndAfter) {
  EXPECT_EQ(decoder_span(language_model(8)).begin, 1);
  EXPECT_EQ(decoder_span(language_model(8)).end, 9);
  // Nemotron-H's split form: Mamba, MLP and attention layers are all decoder layers.
  const ModelSpec hybrid = preset("tiny-hybrid");  // embedding, "M-*-M-", head
  EXPECT_EQ(decoder_span(hybrid).begin, 1);
  EXPECT_EQ(decoder_span(hybrid).end, 7);
  EXPECT_EQ(max_stages(LayerSplit::kMegatron, hybrid), 6);
  EXPECT_EQ(max_stages(LayerSplit::kUniform, hybrid), 8);
  const ModelSpec none = model_of({LayerKind::kEmbedding, LayerKind::kHead});
  EXPECT_EQ(decoder_span(none).size(), 0);
  EXPECT_EQ(max_stages(LayerSplit::kMegatron, none), 0);
}

TEST(LayerSplitTest, MegatronSplitsDecoderLayersEvenlyWithEmbeddingFirstAndHeadLast) {
  // 8 blocks over 4 stages: 2 each; the embedding joins stage 0, the head stage 3.
  EXPECT_EQ(megatron_bounds(language_model(8), 4), (std::vector<int>{0, 3, 5, 7, 10}));
  // Llama-3-8B's 32 blocks over 8 stages: 4 each, so 5, 4, 4, 4, 4, 4, 4, 5 layers.
  EXPECT_EQ(split_bounds(LayerSplit::kMegatron, preset("llama-3-8b"), 8),
            (std::vector<int>{0, 5, 9, 13, 17, 21, 25, 29, 34}));
  EXPECT_EQ(megatron_bounds(language_model(8), 1), (std::vector<int>{0, 10}));
}

TEST(LayerSplitTest, MegatronRemainderGoesToTheMiddleStages) {
  // 9, 10, 11 blocks over 4 stages: 2 each and the 1, 2 or 3 extra ones to stages 1, 2 and,
  // only when both have one, 0; never to the last stage, which holds the head.
  EXPECT_EQ(megatron_bounds(language_model(9), 4), (std::vector<int>{0, 3, 6, 8, 11}));
  EXPECT_EQ(megatron_bounds(language_model(10), 4), (std::vector<int>{0, 3, 6, 9, 12}));
  EXPECT_EQ(megatron_bounds(language_model(11), 4), (std::vector<int>{0, 4, 7, 10, 13}));
  // Two stages and an odd count: the first takes the extra one.
  EXPECT_EQ(megatron_bounds(language_model(5), 2), (std::vector<int>{0, 4, 7}));
  // As many stages as blocks: one each.
  EXPECT_EQ(megatron_bounds(language_model(3), 3), (std::vector<int>{0, 2, 3, 5}));
}

TEST(LayerSplitTest, MegatronInterleavedChunksSplitLikeStages) {
  // Interleaved with p = 4 groups and v = 2 chunks is 8 stages in pipeline order (stage s on
  // group s mod 4). 30 blocks: 3 each and 6 extra to stages 1-6, so the first and the last
  // chunk hold one block fewer than the others (Llama 3's balance of embedding and head).
  EXPECT_EQ(megatron_bounds(language_model(30), 8),
            (std::vector<int>{0, 4, 8, 12, 16, 20, 24, 28, 32}));
  // p = 2, v = 2 on Llama-3-8B: 8 blocks per chunk.
  EXPECT_EQ(megatron_bounds(preset("llama-3-8b"), 4), (std::vector<int>{0, 9, 17, 25, 34}));
}

TEST(LayerSplitTest, MegatronPutsAVisionEncoderOnTheFirstStage) {
  // LLaVA: patch embedding, 24 vision blocks, projector, token embedding (layers 0-26), 32
  // decoder blocks (27-58), head (59). Megatron-LM's pretrain_vlm builds the vision encoder on
  // the first pipeline stage: stage 0 holds it with the embedding and 4 decoder blocks.
  const ModelSpec vlm = preset("llava-style-vlm");
  ASSERT_EQ(vlm.layers.size(), 60u);
  EXPECT_EQ(decoder_span(vlm).begin, 27);
  EXPECT_EQ(decoder_span(vlm).end, 59);
  EXPECT_EQ(megatron_bounds(vlm, 8), (std::vector<int>{0, 31, 35, 39, 43, 47, 51, 55, 60}));
  // 32 over 6: 5 each, the 2 extra to stages 1 and 2.
  EXPECT_EQ(megatron_bounds(vlm, 6), (std::vector<int>{0, 32, 38, 44, 49, 54, 60}));
}

}  // namespace
}  // namespace motley
