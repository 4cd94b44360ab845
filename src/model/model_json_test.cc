#include "motley/model/model_json.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "model_test_util.h"
#include "motley/model/limits.h"
#include "motley/model/presets.h"

namespace motley {
namespace {

using model_testing::kData;
using model_testing::parse_or_die;

ModelSpec tiny_llama() {
  Result<ModelSpec> m = model_preset("tiny-llama");
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return m.is_ok() ? m.value() : ModelSpec{};
}

// Runs validate_model on `model` and returns the message ("" when valid).
std::string validation_error(const ModelSpec& model) {
  Status s = validate_model(model, "m.json");
  return s.is_ok() ? "" : s.message();
}

// ---- names ----

TEST(ModelNames, EnumNamesRoundTrip) {
  for (const std::string& name : activation_names()) {
    ASSERT_TRUE(parse_activation(name).has_value()) << name;
    EXPECT_EQ(activation_name(*parse_activation(name)), name);
  }
  for (const std::string& name : layer_kind_names()) {
    ASSERT_TRUE(parse_layer_kind(name).has_value()) << name;
    EXPECT_EQ(layer_kind_name(*parse_layer_kind(name)), name);
  }
  for (const std::string& name : recompute_policy_names()) {
    ASSERT_TRUE(parse_recompute_policy(name).has_value()) << name;
    EXPECT_EQ(recompute_policy_name(*parse_recompute_policy(name)), name);
  }
  EXPECT_EQ(activation_names().size(), 6u);
  EXPECT_EQ(layer_kind_names().size(), 11u);
  EXPECT_EQ(parse_activation("SwiGLU"), Activation::kSwiGlu);
  EXPECT_EQ(parse_layer_kind("Decoder_Block"), LayerKind::kDecoderBlock);
  EXPECT_EQ(parse_recompute_policy("FULL"), RecomputePolicy::kFull);
  EXPECT_FALSE(parse_activation("swish").has_value());
  EXPECT_STREQ(layer_kind_name(LayerKind::kFeedForward), "feed_forward");
  EXPECT_STREQ(recompute_policy_name(RecomputePolicy::kSelective), "selective");
}

TEST(ModelNames, OnlyGluVariantsAreGated) {
  EXPECT_TRUE(is_gated(Activation::kSwiGlu));
  EXPECT_TRUE(is_gated(Activation::kGeGlu));
  EXPECT_FALSE(is_gated(Activation::kGelu));
  EXPECT_FALSE(is_gated(Activation::kRelu));
  EXPECT_FALSE(is_gated(Activation::kRelu2));
  EXPECT_FALSE(is_gated(Activation::kSilu));
}

// ---- model_to_json / model_from_json ----

// Counts the fields of a plain aggregate by trying brace-initialization with ever more
// arguments, so that a field added to a shape without a JSON key fails a test here.
struct AnyScalar {
  template <class T>
  operator T() const;  // NOLINT(google-explicit-constructor): never called, only overloaded
};

template <class T, class... Args>
constexpr size_t field_count() {
  if constexpr (requires { T{Args{}..., AnyScalar{}}; }) {
    return field_count<T, Args..., AnyScalar>();
  } else {
    return sizeof...(Args);
  }
}

size_t written_keys(const Json& j) { return j.size(); }

TEST(ModelJson, WritesEveryFieldOfEveryShape) {
  Result<ModelSpec> vlm = model_preset("llava-style-vlm");
  Result<ModelSpec> moe = model_preset("tiny-moe");
  Result<ModelSpec> hybrid = model_preset("tiny-hybrid");
  ASSERT_TRUE(vlm.is_ok() && moe.is_ok() && hybrid.is_ok());
  Json v = model_to_json(*vlm);
  Json m = model_to_json(*moe);
  Json h = model_to_json(*hybrid);
  const char* hint = "a shape field has no JSON key: update model_json.cc and model-format.md";
  EXPECT_EQ(written_keys(v["layers"][1]["attention"]), field_count<AttentionShape>()) << hint;
  EXPECT_EQ(written_keys(v["layers"][1]["ffn"]), field_count<FeedForwardShape>()) << hint;
  EXPECT_EQ(written_keys(m["layers"][1]["moe"]), field_count<MoeShape>()) << hint;
  EXPECT_EQ(written_keys(h["layers"][1]["mamba"]), field_count<MambaShape>()) << hint;
  EXPECT_EQ(written_keys(v["layers"][26]["embedding"]), field_count<EmbeddingShape>()) << hint;
  EXPECT_EQ(written_keys(v["layers"].back()["head"]), field_count<HeadShape>()) << hint;
  EXPECT_EQ(written_keys(v["layers"][0]["patch_embedding"]), field_count<PatchEmbeddingShape>())
      << hint;
  EXPECT_EQ(written_keys(v["layers"][25]["projector"]), field_count<ProjectorShape>()) << hint;
  EXPECT_EQ(field_count<AttentionShape>(), 16u);  // the counter itself works
}

TEST(ModelJson, EveryPresetRoundTrips) {
  for (const std::string& name : model_preset_names()) {
    Result<ModelSpec> m = model_preset(name);
    ASSERT_TRUE(m.is_ok()) << name << ": " << m.status().message();
    Json written = model_to_json(*m);
    Result<ModelSpec> back = model_from_json(written, name + ".json");
    ASSERT_TRUE(back.is_ok()) << back.status().message();
    EXPECT_EQ(model_to_json(*back), written) << name;
    EXPECT_EQ(back->layers.size(), m->layers.size());
  }
}

TEST(ModelJson, WritesEveryLayerFieldAndOnlyPresentShapes) {
  ModelSpec m = tiny_llama();
  m.dropout = true;
  Json j = model_to_json(m);
  EXPECT_EQ(j["format"], "motley.model/1");
  EXPECT_EQ(j["dtype"], "fp32");
  EXPECT_EQ(j["dropout"], true);
  EXPECT_EQ(j["default_seq_len"], 64);
  const Json& block = j["layers"][1];
  std::vector<std::string> keys;
  for (auto it = block.begin(); it != block.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"attention", "ffn", "kind", "name", "norm_bias",
                                            "num_norms", "tokens_per_sample"}));
  EXPECT_EQ(block["kind"], "decoder_block");
  EXPECT_EQ(block["ffn"]["activation"], "swiglu");
  EXPECT_EQ(block["attention"]["num_kv_heads"], 2);
  EXPECT_EQ(block["attention"].size(), 16u);  // every AttentionShape field
  EXPECT_EQ(j["layers"][0]["kind"], "embedding");
  EXPECT_EQ(j["layers"][5]["head"]["tied"], false);
}

TEST(ModelJson, RoundTripsMeasuredLayers) {
  ModelSpec m;
  m.name = "measured";
  Layer l;
  l.name = "x";
  l.kind = LayerKind::kMeasured;
  MeasuredLayer ml;
  ml.measured_on = "H100-SXM";
  ml.times = {Seconds(0.001), Seconds(0.002), Seconds(0.0005), std::nullopt, std::nullopt};
  ml.times_by_device["A100-80GB"].forward = Seconds(0.003);
  ml.seq_len = 2048;
  ml.micro_batch_size = 2;
  ml.param_bytes = Bytes(1024);
  ml.activation_bytes = Bytes(2048.5);
  l.measured = ml;
  m.layers.push_back(l);
  Json j = model_to_json(m);
  EXPECT_EQ(j["layers"][0]["measured"]["param_bytes"], 1024);
  EXPECT_FALSE(
      j["layers"][0]["measured"]["times_by_device"]["A100-80GB"].contains("backward_input_s"));
  Result<ModelSpec> back = model_from_json(j, "m.json");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  const MeasuredLayer& r = *back->layers[0].measured;
  EXPECT_EQ(r.times.backward_weight, Seconds(0.0005));
  EXPECT_EQ(r.times_by_device.at("A100-80GB").forward, Seconds(0.003));
  EXPECT_FALSE(r.times_by_device.at("A100-80GB").backward_input.has_value());
  EXPECT_EQ(r.activation_bytes, Bytes(2048.5));
  EXPECT_EQ(model_to_json(*back), j);
}

TEST(ModelJson, HandWrittenFileUsesDocumentedDefaults) {
  Result<ModelSpec> m = load_model(kData + "/model/tiny-dense.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->name, "tiny-dense");
  EXPECT_EQ(m->family, "custom");
  EXPECT_EQ(m->default_seq_len, 128);
  EXPECT_EQ(m->dtype, DType::kFloat32);
  ASSERT_EQ(m->layers.size(), 5u);
  const Layer& b0 = m->layers[1];
  EXPECT_EQ(b0.attention->num_kv_heads, 4);  // defaults to num_heads
  EXPECT_EQ(b0.attention->head_dim, 8);      // hidden / num_heads
  EXPECT_TRUE(b0.attention->causal);
  EXPECT_EQ(b0.ffn->activation, Activation::kGelu);
  EXPECT_EQ(b0.num_norms, 2);  // a decoder block's default
  const Layer& b1 = m->layers[2];
  EXPECT_EQ(b1.moe->shared_ffn_size, 48);  // defaults to expert_ffn_size when shared
  EXPECT_EQ(b1.moe->activation, Activation::kSwiGlu);
  EXPECT_EQ(b1.attention->sliding_window, 32);
  const Layer& mixer = m->layers[3];
  EXPECT_EQ(mixer.mamba->version, 2);
  EXPECT_EQ(mixer.mamba->d_inner, 64);   // 2 * hidden
  EXPECT_EQ(mixer.mamba->head_dim, 16);  // d_inner / n_heads
  EXPECT_EQ(mixer.num_norms, 1);
  EXPECT_EQ(m->layers[4].num_norms, 1);
  EXPECT_TRUE(m->layers[4].head->tied);
}

TEST(ModelJson, MambaVersion1DefaultsTheTimeStepRank) {
  Json j = parse_or_die(R"({"format": "motley.model/1", "layers": [
      {"name": "m", "kind": "mamba", "mamba": {"version": 1, "hidden": 4096, "d_state": 16}}]})");
  Result<ModelSpec> m = model_from_json(j, "m.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->layers[0].mamba->dt_rank, 256);  // ceil(4096 / 16)
  EXPECT_EQ(m->layers[0].mamba->d_inner, 8192);
}

TEST(ModelJson, RejectsUnknownKeysNamingTheField) {
  Json j = parse_or_die(R"({"format": "motley.model/1", "layers": [
      {"name": "e", "kind": "embedding", "embedding": {"vocab": 8, "hidden": 4, "vocabulary": 9}}]})");
  Result<ModelSpec> m = model_from_json(j, "m.json");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.status().message().rfind("m.json: field 'layers[0].embedding.vocabulary': unknown "
                                       "field",
                                       0),
            0u)
      << m.status().message();
}

TEST(ModelJson, RejectsWrongFormatString) {
  Json j = parse_or_die(R"({"format": "motley.model/2", "layers": []})");
  Result<ModelSpec> m = model_from_json(j, "m.json");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().message(),
            "m.json: field 'format': expected \"motley.model/1\", got \"motley.model/2\"");
}

TEST(ModelJson, RejectsUnknownKindAndActivationListingTheAllowedOnes) {
  Json kind =
      parse_or_die(R"({"format": "motley.model/1", "layers": [{"name": "x", "kind": "conv"}]})");
  Result<ModelSpec> m = model_from_json(kind, "m.json");
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("field 'layers[0].kind': unknown layer kind \"conv\""),
            std::string::npos)
      << m.status().message();
  EXPECT_NE(m.status().message().find("head or measured"), std::string::npos);

  Json act = parse_or_die(R"({"format": "motley.model/1", "layers": [{"name": "f",
      "kind": "feed_forward", "ffn": {"hidden": 4, "ffn_size": 8, "activation": "swish"}}]})");
  m = model_from_json(act, "m.json");
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("field 'layers[0].ffn.activation': unknown activation "
                                      "\"swish\"; expected gelu, relu, relu2, silu, swiglu or "
                                      "geglu"),
            std::string::npos)
      << m.status().message();
}

TEST(ModelJson, RejectsNonPositiveSizesNamingTheField) {
  Json j = parse_or_die(R"({"format": "motley.model/1", "layers": [{"name": "f",
      "kind": "feed_forward", "ffn": {"hidden": 4, "ffn_size": -8}}]})");
  Result<ModelSpec> m = model_from_json(j, "m.json");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().message(),
            "m.json: field 'layers[0].ffn.ffn_size': expected a positive integer, got -8");
}

TEST(ModelJson, ValidatesAfterReading) {
  Result<ModelSpec> m = load_model(kData + "/model/bad-heads.json");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().message(),
            kData +
                "/model/bad-heads.json: layer 'block.0' (layers[1]): attention.num_heads (6) "
                "must be a multiple of attention.num_kv_heads (4)");
}

// The error for a motley model file with `text`, "" when it loads.
std::string file_error(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  {
    std::ofstream out(path);
    out << text;
  }
  Result<ModelSpec> m = load_model(path);
  std::remove(path.c_str());
  if (m.is_ok()) return "";
  const std::string& message = m.status().message();
  // The path prefix varies with the temporary directory.
  return message.rfind(path, 0) == 0 ? name + message.substr(path.size()) : message;
}

TEST(ModelJson, RejectsDuplicateKeysNamingTheKeyPath) {
  EXPECT_EQ(file_error("dup.json", R"({"format": "motley.model/1", "layers": [{"name": "f",
      "kind": "feed_forward", "ffn": {"hidden": 4, "ffn_size": 8, "hidden": 16}}]})"),
            "dup.json: field 'layers[0].ffn.hidden': duplicate key; a key may appear only once in "
            "an object");
}

TEST(ModelJson, RejectsNonFiniteNumbersNamingTheField) {
  // A Python writer's NaN, and 1e999, which no double holds.
  EXPECT_EQ(file_error("nan.json", R"({"format": "motley.model/1", "default_seq_len": NaN,
      "layers": []})"),
            "nan.json: field 'default_seq_len': expected an integer, got NaN");
  EXPECT_EQ(file_error("inf.json", R"({"format": "motley.model/1", "default_seq_len": 1e999})"),
            "inf.json: malformed JSON at line 1, column 49: the number 1e999 is beyond the range "
            "of a double (about 1.8e308)");
  EXPECT_EQ(file_error("nan.json", R"({"format": "motley.model/1", "layers": [{"name": "m",
      "kind": "measured", "measured": {"measured_on": "T4", "forward_s": NaN,
      "backward_input_s": 0, "backward_weight_s": 0}}]})"),
            "nan.json: field 'layers[0].measured.forward_s': expected a finite non-negative "
            "number, got NaN");
}

TEST(ModelJson, RejectsMoreLayersThanSupportedBeforeReadingThem) {
  std::string layers;
  for (int64_t i = 0; i <= kMaxLayers; ++i) layers += i == 0 ? "{}" : ",{}";
  Json j = parse_or_die(R"({"format": "motley.model/1", "layers": [)" + layers + "]}");
  Result<ModelSpec> m = model_from_json(j, "m.json");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().message(),
            "m.json: field 'layers': lists 100001 layers; at most 100000 are supported");
}

TEST(ModelJson, HugeSizesAreRejectedNamingTheLayerAndField) {
  // 2^40: every product of such sizes overflows int64_t.
  Json j = parse_or_die(R"({"format": "motley.model/1", "layers": [{"name": "f",
      "kind": "feed_forward", "ffn": {"hidden": 1099511627776, "ffn_size": 8}}]})");
  Result<ModelSpec> m = model_from_json(j, "m.json");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().message(),
            "m.json: layer 'f' (layers[0]): ffn.hidden must be at most 1048576, got 1099511627776");
  // Mamba's defaults derived from an out-of-range hidden size do not overflow on the way.
  Json mamba = parse_or_die(R"({"format": "motley.model/1", "layers": [{"name": "m",
      "kind": "mamba", "mamba": {"version": 1, "hidden": 9223372036854775807, "d_state": 16}}]})");
  EXPECT_EQ(model_from_json(mamba, "m.json").status().message(),
            "m.json: layer 'm' (layers[0]): mamba.hidden must be at most 1048576, got "
            "9223372036854775807");
}

// ---- validate_model ----

TEST(ValidateModel, HoldsEverySizeToItsLimit) {
  ModelSpec m = tiny_llama();
  m.layers[1].attention->num_heads = kMaxHeads * 2;
  EXPECT_EQ(validation_error(m),
            "m.json: layer 'layers.0' (layers[1]): attention.num_heads must be at most 65536, got "
            "131072");
  m = tiny_llama();
  m.layers[0].embedding->vocab = kMaxVocab + 1;
  EXPECT_EQ(validation_error(m),
            "m.json: layer 'embed' (layers[0]): embedding.vocab must be at most 16777216, got "
            "16777217");
  m = tiny_llama();
  m.layers[1].num_norms = int64_t{1} << 40;  // the cost model loops over norms
  EXPECT_EQ(validation_error(m),
            "m.json: layer 'layers.0' (layers[1]): num_norms must be at most 64, got "
            "1099511627776");
  m = tiny_llama();
  m.default_seq_len = 1'000'000'000;
  EXPECT_EQ(validation_error(m),
            "m.json: default_seq_len must be from 1 to 1048576, got 1000000000");
}

TEST(ValidateModel, BoundsTheModelsParameterTotal) {
  // Each layer within its limits (2^16 experts of 2^20 x 2^20: 2.2e17 parameters) fits
  // int64_t, but such layers add up past any total motley computes with.
  ModelSpec m = tiny_llama();
  Layer& block = m.layers[1];
  block.ffn.reset();
  block.moe = MoeShape{};
  block.moe->hidden = block.attention->hidden;
  block.moe->num_experts = kMaxHeads;
  block.moe->top_k = 1;
  block.moe->expert_ffn_size = kMaxWidth;
  block.moe->latent_size = kMaxWidth;
  EXPECT_EQ(validation_error(m),
            "m.json: layer 'layers.0' (layers[1]): brings the model past 1000000000000000 "
            "parameters, the most supported");
  ModelSpec many = tiny_llama();
  many.layers.resize(static_cast<size_t>(kMaxLayers) + 1, many.layers[1]);
  EXPECT_EQ(validation_error(many),
            "m.json: the model has 100001 layers; at most 100000 are supported");
}

TEST(ValidateModel, AcceptsEveryBuiltPreset) { EXPECT_EQ(validation_error(tiny_llama()), ""); }

TEST(ValidateModel, NeedsAtLeastOneLayer) {
  EXPECT_EQ(validation_error(ModelSpec{}), "m.json: the model has no layers");
}

TEST(ValidateModel, ChecksTopKAgainstExperts) {
  Result<ModelSpec> m = model_preset("tiny-moe");
  ASSERT_TRUE(m.is_ok());
  m->layers[2].moe->top_k = 5;
  EXPECT_EQ(validation_error(*m),
            "m.json: layer 'layers.1' (layers[2]): moe.top_k (5) must not exceed "
            "moe.num_experts (4)");
}

TEST(ValidateModel, RejectsDuplicateNames) {
  ModelSpec m = tiny_llama();
  m.layers[3].name = "layers.0";
  EXPECT_EQ(validation_error(m),
            "m.json: layer 'layers.0' (layers[3]): the name is already used by layers[1]; "
            "layer names must be unique");
}

TEST(ValidateModel, DecoderBlockNeedsAttentionAndExactlyOneOfFfnOrMoe) {
  ModelSpec m = tiny_llama();
  m.layers[1].moe = MoeShape{64, 4, 2, 64};
  EXPECT_EQ(validation_error(m),
            "m.json: layer 'layers.0' (layers[1]): a layer of kind decoder_block needs "
            "exactly attention and one of ffn or moe, but this one has attention, ffn and moe");
  m = tiny_llama();
  m.layers[1].ffn.reset();
  EXPECT_NE(validation_error(m).find("but this one has attention"), std::string::npos);
}

TEST(ValidateModel, RejectsShapesTheKindDoesNotHave) {
  ModelSpec m = tiny_llama();
  m.layers[0].head = HeadShape{256, 64, false};
  EXPECT_EQ(validation_error(m),
            "m.json: layer 'embed' (layers[0]): a layer of kind embedding needs exactly "
            "embedding, but this one has embedding and head");
}

TEST(ValidateModel, ChecksWidthsInsideABlock) {
  ModelSpec m = tiny_llama();
  m.layers[2].ffn->hidden = 32;
  EXPECT_EQ(validation_error(m),
            "m.json: layer 'layers.1' (layers[2]): attention.hidden (64) differs from "
            "ffn.hidden (32)");
}

// A layer reads the hidden state the one before it writes; an embedding starts a stream of its
// own (a vision tower's projector may write any width before it), the head ends it.
TEST(ValidateModel, ChecksWidthsBetweenLayers) {
  ModelSpec m = tiny_llama();
  m.layers[2].attention->hidden = 32;
  m.layers[2].ffn->hidden = 32;
  EXPECT_EQ(validation_error(m),
            "m.json: layer 'layers.1' (layers[2]): reads a hidden state of width 32 but layer "
            "'layers.0' (layers[1]) before it writes 64");
  m = tiny_llama();
  m.layers.back().head->hidden = 128;
  EXPECT_NE(validation_error(m).find("reads a hidden state of width 128"), std::string::npos);
  m = tiny_llama();
  Layer projector;
  projector.name = "projector";
  projector.kind = LayerKind::kProjector;
  projector.projector = ProjectorShape{32, 48, 0};
  m.layers.insert(m.layers.begin(), projector);
  EXPECT_EQ(validation_error(m), "");
}

// The widths the chain above compares, which the executor also sizes its messages by.
TEST(ValidateModel, HiddenWidthsReadAndWritten) {
  const ModelSpec m = tiny_llama();
  EXPECT_EQ(hidden_width_read(m.layers.front()), 0);  // token ids
  EXPECT_EQ(hidden_width_written(m.layers.front()), 64);
  EXPECT_EQ(hidden_width_read(m.layers[1]), 64);
  EXPECT_EQ(hidden_width_written(m.layers[1]), 64);
  EXPECT_EQ(hidden_width_read(m.layers.back()), 64);
  EXPECT_EQ(hidden_width_written(m.layers.back()), 0);  // logits, not a hidden state
  Layer projector;
  projector.kind = LayerKind::kProjector;
  projector.projector = ProjectorShape{32, 48, 0};
  EXPECT_EQ(hidden_width_read(projector), 32);
  EXPECT_EQ(hidden_width_written(projector), 48);
}

TEST(ValidateModel, ChecksPositiveSizesAndMambaHeads) {
  ModelSpec m = tiny_llama();
  m.layers[1].attention->head_dim = 0;
  EXPECT_EQ(validation_error(m),
            "m.json: layer 'layers.0' (layers[1]): attention.head_dim must be positive, got 0");
  Result<ModelSpec> h = model_preset("tiny-hybrid");
  ASSERT_TRUE(h.is_ok());
  h->layers[1].mamba->head_dim = 32;
  EXPECT_EQ(validation_error(*h),
            "m.json: layer 'layers.0.mamba' (layers[1]): mamba.n_heads * mamba.head_dim (256) must "
            "equal mamba.d_inner (128)");
}

TEST(ValidateModel, LatentAttentionHeadDimIsNopePlusRope) {
  ModelSpec m = tiny_llama();
  AttentionShape& a = *m.layers[1].attention;
  a.mla = true;
  a.kv_lora_rank = 32;
  a.qk_nope_head_dim = 12;
  a.qk_rope_head_dim = 4;  // 12 + 4 == head_dim 16
  EXPECT_EQ(validation_error(m), "");
  a.qk_rope_head_dim = 8;
  EXPECT_NE(validation_error(m).find("attention.head_dim (16) of a latent (mla) attention must "
                                     "equal qk_nope_head_dim + qk_rope_head_dim (20)"),
            std::string::npos);
  a.qk_nope_head_dim = 13;
  a.qk_rope_head_dim = 3;
  EXPECT_EQ(validation_error(m),
            "m.json: layer 'layers.0' (layers[1]): attention.qk_rope_head_dim (3) must be even: "
            "rotary embeddings turn pairs");
}

TEST(ValidateModel, TiedHeadNeedsAMatchingEmbedding) {
  Result<ModelSpec> m = model_preset("tiny-gemma");
  ASSERT_TRUE(m.is_ok());
  m->layers.back().head->vocab = 512;
  EXPECT_EQ(validation_error(*m),
            "m.json: layer 'head' (layers[5]): head.tied needs an embedding layer with the same "
            "vocab (512) and hidden (64)");
}

TEST(ValidateModel, ChecksExtraLayersAndTheirNames) {
  ModelSpec m = tiny_llama();
  Layer extra = m.layers[1];
  m.extra_layers.push_back(extra);
  EXPECT_EQ(validation_error(m),
            "m.json: layer 'layers.0' (extra_layers[0]): the name is already used by "
            "layers[1]; layer names must be unique");
  m.extra_layers[0].name = "mtp.0";
  EXPECT_EQ(validation_error(m), "");
}

TEST(ValidateModel, MeasuredLayersNeedAllThreeTimes) {
  ModelSpec m;
  Layer l;
  l.name = "x";
  l.kind = LayerKind::kMeasured;
  l.measured = MeasuredLayer{};
  l.measured->measured_on = "H100-SXM";
  l.measured->times.forward = Seconds(1);
  l.measured->times.backward_input = Seconds(1);
  m.layers.push_back(l);
  EXPECT_EQ(validation_error(m),
            "m.json: layer 'x' (layers[0]): measured.backward_weight_s is missing");
  m.layers[0].measured->times.backward_weight = Seconds(-1);
  EXPECT_NE(validation_error(m).find("measured.backward_weight_s must be a finite non-negative"),
            std::string::npos);
}

// ---- load_model ----

TEST(LoadModel, ResolvesPresetNames) {
  Result<ModelSpec> m = load_model("tiny-moe");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->name, "tiny-moe");
}

TEST(LoadModel, UnknownNameSaysNoFileAndListsPresets) {
  Result<ModelSpec> m = load_model("no-such-model");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(m.status().message().rfind(
                "no such file and no preset named 'no-such-model'; presets: llama-3-8b, ", 0),
            0u)
      << m.status().message();
}

TEST(LoadModel, ReadsProfiles) {
  Result<ModelSpec> m = load_model(kData + "/profile/nemotron-h-47b.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->family, "profile");
  EXPECT_EQ(m->layers.size(), 100u);
}

TEST(LoadModel, ExplainsWhatAFileShouldContain) {
  std::string path = kData + "/model/not-a-model.json";
  Result<ModelSpec> m = load_model(path);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().message(),
            path +
                ": not a model file: expected a motley model (\"format\": "
                "\"motley.model/1\"), a motley profile (\"format\": \"motley.profile/2\") or "
                "a Hugging Face config.json (with \"model_type\")");
}

TEST(LoadModel, RejectsUnknownFormats) {
  std::string path = kData + "/model/unknown-format.json";
  Result<ModelSpec> m = load_model(path);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().message(),
            path +
                ": field 'format': unknown format \"motley.plan/1\"; expected "
                "\"motley.model/1\", \"motley.profile/1\" or \"motley.profile/2\"");
}

TEST(LoadModel, DirectoryWithoutConfigIsAnError) {
  std::string dir = kData + "/model";
  Result<ModelSpec> m = load_model(dir);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.status().message().rfind(dir + ": is a directory without a config.json", 0), 0u);
}

// A Hugging Face model directory with the tiny-llama shape imports to the same parameters.
TEST(LoadModel, ReadsHuggingFaceDirectoriesAndConfigFiles) {
  Result<ModelSpec> from_dir = load_model(kData + "/model/hf-tiny-llama");
  ASSERT_TRUE(from_dir.is_ok()) << from_dir.status().message();
  Result<ModelSpec> from_file = load_model(kData + "/model/hf-tiny-llama/config.json");
  ASSERT_TRUE(from_file.is_ok()) << from_file.status().message();
  EXPECT_EQ(model_to_json(*from_dir), model_to_json(*from_file));
  int blocks = 0;
  for (const Layer& l : from_dir->layers) {
    if (!l.attention) continue;
    ++blocks;
    EXPECT_EQ(l.attention->num_heads, 4);
    EXPECT_EQ(l.attention->num_kv_heads, 2);
    EXPECT_EQ(l.attention->head_dim, 16);
  }
  EXPECT_EQ(blocks, 4);
}

}  // namespace
}  // namespace motley
