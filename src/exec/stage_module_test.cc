#include "motley/exec/stage_module.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "motley/exec/data.h"
#include "motley/model/layer_cost.h"
#include "motley/model/presets.h"
#include "test_util.h"

namespace motley {
namespace {

using testing::preset;

constexpr int64_t kSeq = 24;

std::unique_ptr<StageModule> stage(const ModelSpec& model, int begin, int end,
                                   ParameterStore& store, uint64_t seed = 5) {
  auto module =
      make_transformer_stage(model, begin, end, StageModuleOptions{seed, kSeq, {}}, store);
  EXPECT_TRUE(module.is_ok()) << module.status().message();
  return std::move(module).value();
}

void batch(int64_t g, at::Tensor* inputs, at::Tensor* targets) {
  auto tokens = TokenStream::from_text(synthetic_corpus(4096, 1), "corpus");
  micro_batch_tensors(*tokens, g, 2, kSeq, inputs, targets);
}

TEST(MicroBatchTensors, RowsAreConsecutiveSamplesShiftedByOne) {
  auto tokens = TokenStream::from_text("abcdefghijklmnopqrstuvwxyz", "letters");
  at::Tensor in, out;
  micro_batch_tensors(*tokens, /*g=*/1, /*micro_batch_size=*/2, /*seq_len=*/3, &in, &out);
  // Global micro-batch 1 holds samples 2 and 3, starting at 6 and 9.
  EXPECT_TRUE(at::equal(in, at::tensor({'g', 'h', 'i', 'j', 'k', 'l'}, at::kLong).view({2, 3})));
  EXPECT_TRUE(at::equal(out, at::tensor({'h', 'i', 'j', 'k', 'l', 'm'}, at::kLong).view({2, 3})));
}

TEST(TransformerStage, UniformLogitsGiveLogVocabLoss) {
  // With a zero LM head every token gets probability 1/256: the loss is ln 256 exactly.
  const ModelSpec model = preset("tiny-llama");
  ParameterStore store;
  auto head = stage(model, 5, 6, store);
  EXPECT_FALSE(head->takes_tokens());
  EXPECT_TRUE(head->produces_loss());
  {
    at::NoGradGuard no_grad;
    for (auto& p : store.parameters()) {
      if (p.name == "head.weight") p.tensor.zero_();
    }
  }
  at::Tensor hidden = at::randn({2, kSeq, 64});
  at::Tensor targets = at::randint(0, 256, {2, kSeq}, at::kLong);
  EXPECT_NEAR(head->forward(hidden, targets).item<float>(), std::log(256.0), 1e-5);
}

// The presets, and tiny-hybrid with Mamba-1 mixers with and without inner norms.
std::vector<ModelSpec> every_kind_of_model() {
  std::vector<ModelSpec> models;
  for (const char* name : {"tiny-llama", "tiny-moe", "tiny-gemma", "tiny-hybrid"}) {
    models.push_back(preset(name));
  }
  models.push_back(testing::mamba1_hybrid(/*inner_norms=*/true));
  models.push_back(testing::mamba1_hybrid(/*inner_norms=*/false));
  models.push_back(testing::mla_model(0));
  models.push_back(testing::mla_model(24));
  models.push_back(testing::deepseek_v2_lite_miniature());
  return models;
}

TEST(TransformerStage, FreshModelLossIsNearLogVocab) {
  for (const ModelSpec& model : every_kind_of_model()) {
    ParameterStore store;
    auto whole = stage(model, 0, static_cast<int>(model.layers.size()), store);
    at::Tensor in, target;
    batch(0, &in, &target);
    const float loss = whole->forward(in, target).item<float>();
    EXPECT_NEAR(loss, std::log(256.0), 0.1) << model.name;
  }
}

TEST(TransformerStage, AnyPartitionComputesTheSameFunctionFromTheSameWeights) {
  const ModelSpec model = preset("tiny-moe");
  ParameterStore whole_store;
  auto whole = stage(model, 0, 6, whole_store);
  ParameterStore a_store, b_store, c_store;
  auto a = stage(model, 0, 2, a_store);
  auto b = stage(model, 2, 5, b_store);
  auto c = stage(model, 5, 6, c_store);
  // Same names and bits, however the layers are split.
  std::vector<NamedTensor> parts;
  for (auto* s : {&a_store, &b_store, &c_store}) {
    for (auto& p : s->parameters()) parts.push_back(p);
  }
  std::sort(parts.begin(), parts.end(),
            [](const NamedTensor& x, const NamedTensor& y) { return x.name < y.name; });
  const auto reference = whole_store.parameters();
  ASSERT_EQ(parts.size(), reference.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].name, reference[i].name);
    EXPECT_TRUE(at::equal(parts[i].tensor, reference[i].tensor)) << parts[i].name;
  }
  at::Tensor in, target;
  batch(3, &in, &target);
  at::Tensor h1 = a->forward(in, target);
  EXPECT_EQ(h1.sizes().vec(), boundary_shape(model, 1, 2, kSeq));
  const float split = c->forward(b->forward(h1, target), target).item<float>();
  EXPECT_EQ(split, whole->forward(in, target).item<float>());
}

TEST(TransformerStage, SeedsAreDrawnPerLayer) {
  const ModelSpec model = preset("tiny-llama");
  ParameterStore s1, s2;
  stage(model, 0, 6, s1, /*seed=*/5);
  stage(model, 0, 6, s2, /*seed=*/6);
  // Layer i with seed 6 draws what layer i+1 draws with seed 5: decoder blocks have one shape.
  auto find = [](ParameterStore& s, const std::string& name) {
    for (auto& p : s.parameters()) {
      if (p.name == name) return p.tensor;
    }
    return at::Tensor();
  };
  EXPECT_TRUE(at::equal(find(s2, "layers.0.attn.wq"), find(s1, "layers.1.attn.wq")));
  EXPECT_FALSE(at::equal(find(s1, "layers.0.attn.wq"), find(s1, "layers.1.attn.wq")));
}

TEST(TransformerStage, ParameterNamesAndShapes) {
  const ModelSpec model = preset("tiny-moe");
  ParameterStore store;
  auto block = stage(model, 1, 2, store);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& p : block->parameters()) shapes[p.name] = p.tensor.sizes().vec();
  // GQA: 4 query heads, 2 key/value heads of 16.
  EXPECT_EQ(shapes["layers.0.attn.wq"], (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(shapes["layers.0.attn.wk"], (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(shapes["layers.0.attn.wv"], (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(shapes["layers.0.moe.router"], (std::vector<int64_t>{4, 64}));
  EXPECT_EQ(shapes["layers.0.moe.experts.3.w_gate"], (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(shapes["layers.0.moe.shared.0.w_down"], (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(shapes["layers.0.attn_norm.weight"], (std::vector<int64_t>{64}));
  // 4 attention matrices + 2 norms + router + (4 routed + 1 shared) * 3 matrices.
  EXPECT_EQ(shapes.size(), 4u + 2u + 1u + 15u);
}

// Embedding, one attention sub-layer with a window of 4 (or causal only), head.
ModelSpec window_model(int64_t window, bool causal) {
  ModelSpec m;
  m.name = "window";
  Layer e;
  e.name = "embed";
  e.kind = LayerKind::kEmbedding;
  e.embedding = EmbeddingShape{256, 32, 0};
  Layer a;
  a.name = "attn";
  a.kind = LayerKind::kAttention;
  a.attention = AttentionShape{};
  a.attention->hidden = 32;
  a.attention->num_heads = 2;
  a.attention->num_kv_heads = 1;
  a.attention->head_dim = 16;
  a.attention->sliding_window = window;
  a.attention->causal = causal;
  a.num_norms = 1;
  Layer h;
  h.name = "head";
  h.kind = LayerKind::kHead;
  h.head = HeadShape{256, 32, false};
  h.num_norms = 1;
  m.layers = {e, a, h};
  return m;
}

// Which output positions change when the token at position `t` changes.
// `adjust`, when given, changes the fresh parameters first.
std::vector<bool> influenced(const ModelSpec& model, int64_t t,
                             const std::function<void(const NamedTensor&)>& adjust = nullptr) {
  ParameterStore store;
  auto body = stage(model, 0, 2, store);
  if (adjust) {
    at::NoGradGuard no_grad;
    for (const NamedTensor& p : store.parameters()) adjust(p);
  }
  at::Tensor in, target;
  batch(0, &in, &target);
  at::Tensor changed = in.clone();
  changed[0][t] = (in[0][t].item<int64_t>() + 1) % 256;
  at::Tensor a = body->forward(in, target)[0];
  at::Tensor b = body->forward(changed, target)[0];
  std::vector<bool> out;
  for (int64_t i = 0; i < kSeq; ++i) out.push_back(!at::equal(a[i], b[i]));
  return out;
}

TEST(Attention, CausalSlidingWindowSeesOnlyTheLastWTokens) {
  const auto changed = influenced(window_model(4, true), 10);
  for (int64_t i = 0; i < kSeq; ++i) EXPECT_EQ(changed[i], i >= 10 && i < 14) << i;
}

TEST(Attention, CausalWithoutWindowSeesThePast) {
  const auto changed = influenced(window_model(0, true), 10);
  for (int64_t i = 0; i < kSeq; ++i) EXPECT_EQ(changed[i], i >= 10) << i;
}

TEST(Attention, BidirectionalWindowIsSymmetric) {
  const auto changed = influenced(window_model(3, false), 10);
  for (int64_t i = 0; i < kSeq; ++i) EXPECT_EQ(changed[i], i >= 8 && i <= 12) << i;
}

TEST(TransformerStage, TiedHeadSharesTheEmbeddingOnOneRankAndCopiesItOnAnother) {
  const ModelSpec model = preset("tiny-gemma");
  ParameterStore together;
  auto whole = stage(model, 0, 6, together);
  EXPECT_TRUE(together.contains("embed.weight"));
  EXPECT_FALSE(together.contains("head.weight"));
  ParameterStore head_only;
  auto head = stage(model, 5, 6, head_only);
  ASSERT_TRUE(head_only.contains("embed.weight"));
  at::Tensor copy, original;
  for (auto& p : head_only.parameters()) {
    if (p.name == "embed.weight") copy = p.tensor;
  }
  for (auto& p : together.parameters()) {
    if (p.name == "embed.weight") original = p.tensor;
  }
  EXPECT_TRUE(at::equal(copy, original));
  // Both copies know that the embedding (layer 0) and the head (layer 5) read the matrix.
  for (auto& p : head->parameters()) {
    if (p.name == "embed.weight") {
      EXPECT_EQ(p.layers, (std::vector<int>{0, 5}));
    }
    if (p.name == "head.norm.weight") {
      EXPECT_EQ(p.layers, (std::vector<int>{5}));
    }
  }
  for (auto& p : whole->parameters()) {
    if (p.name == "embed.weight") {
      EXPECT_EQ(p.layers, (std::vector<int>{0, 5}));
    }
  }
  // On one rank the head's gradient lands in the embedding matrix too.
  at::Tensor in, target;
  batch(1, &in, &target);
  whole->forward(in, target).backward();
  at::Tensor grad = original.grad();
  ASSERT_TRUE(grad.defined());
  // Rows of bytes that never occur still get gradient through the head.
  EXPECT_GT(grad[0].abs().sum().item<float>(), 0.0f);
}

TEST(TransformerStage, MoeRoutesGradientToRouterAndExperts) {
  const ModelSpec model = preset("tiny-moe");
  ParameterStore store;
  auto whole = stage(model, 0, 6, store);
  at::Tensor in, target;
  batch(2, &in, &target);
  whole->forward(in, target).backward();
  for (auto& p : store.parameters()) {
    if (p.name.find("layers.0.moe.router") == 0 || p.name.find("layers.0.moe.shared") == 0) {
      ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
      EXPECT_GT(p.tensor.grad().abs().sum().item<float>(), 0.0f) << p.name;
    }
  }
}

TEST(TransformerStage, RejectsWhatTheExecutorDoesNotRun) {
  ParameterStore store;
  auto refusal = [&](const ModelSpec& model, int begin, int end, int tensor_parallel = 1) {
    StageModuleOptions options{0, kSeq, {}};
    options.tensor_parallel.size = tensor_parallel;
    auto module = make_transformer_stage(model, begin, end, options, store);
    EXPECT_FALSE(module.is_ok());
    return module.status().message();
  };
  ModelSpec measured = preset("tiny-llama");
  Layer& timed = measured.layers[2];
  timed.kind = LayerKind::kMeasured;
  timed.attention.reset();
  timed.ffn.reset();
  timed.measured = MeasuredLayer{};
  timed.measured->measured_on = "H100-SXM";
  timed.measured->times =
      MeasuredTimes{Seconds(1), Seconds(1), Seconds(1), std::nullopt, std::nullopt};
  EXPECT_EQ(refusal(measured, 0, 3),
            "model 'tiny-llama': layer 2 ('layers.1', measured): the executor does not run "
            "this layer kind yet; it runs embedding, attention, feed_forward, moe, mamba, "
            "decoder_block and head");
  // An inconsistent model is validate_model's to report, whichever stage is built.
  ModelSpec mamba1 = preset("tiny-hybrid");
  mamba1.layers[1].mamba->version = 1;  // with tiny-hybrid's dt_rank of 0
  for (int begin : {1, 2}) {
    EXPECT_EQ(refusal(mamba1, begin, begin + 1),
              "model 'tiny-hybrid': layer 'layers.0.mamba' (layers[1]): mamba.dt_rank must be "
              "positive, got 0");
  }
  EXPECT_EQ(refusal(mamba1, 3, 3), "model 'tiny-hybrid': no layers [3, 3) in a model of 8 layers");
  // Token ids enter at layer 0 and the loss leaves the last layer.
  ModelSpec headless = preset("tiny-llama");
  headless.layers.pop_back();
  EXPECT_EQ(refusal(headless, 4, 5),
            "model 'tiny-llama': layer 4 ('layers.3', decoder_block): the executor computes the "
            "loss in the last layer, which must be the model's only head");
  ModelSpec no_embedding = preset("tiny-llama");
  no_embedding.layers.erase(no_embedding.layers.begin());
  EXPECT_EQ(refusal(no_embedding, 0, 1),
            "model 'tiny-llama': layer 0 ('layers.0', decoder_block): the executor feeds token "
            "ids to layer 0, which must be the model's only embedding");
  ModelSpec latent_qk_norm = testing::mla_model(0);
  latent_qk_norm.layers[1].attention->qk_norm = true;
  EXPECT_EQ(refusal(latent_qk_norm, 1, 2),
            "model 'tiny-mla': layer 1 ('layers.0', decoder_block): the executor runs "
            "multi-head latent attention without qk_norm");
  ModelSpec odd_heads = preset("tiny-llama");
  odd_heads.layers[3].attention->head_dim = 15;
  EXPECT_EQ(refusal(odd_heads, 3, 4),
            "model 'tiny-llama': layer 3 ('layers.2', decoder_block): the executor's rotary "
            "embedding turns whole heads and needs an even head_dim");
  ModelSpec latent_moe = preset("tiny-moe");
  latent_moe.layers[1].moe->latent_size = 16;
  EXPECT_EQ(refusal(latent_moe, 1, 2),
            "model 'tiny-moe': layer 1 ('layers.0', decoder_block): the executor runs MoE "
            "without latent_size");
  ModelSpec short_positions = window_model(0, true);
  short_positions.layers[0].embedding->learned_positions = 8;
  EXPECT_EQ(refusal(short_positions, 0, 1),
            "model 'window': layer 0 ('embed', embedding): 8 learned positions cannot cover "
            "sequences of 24 tokens");
  // tiny-llama's 2 key/value heads split over 1 or 2 ranks, not 4.
  EXPECT_EQ(refusal(preset("tiny-llama"), 1, 2, 4),
            "model 'tiny-llama': layer 1 ('layers.0', decoder_block): tensor parallelism over 4 "
            "devices splits it evenly, but num_kv_heads (2) is not a multiple of 4");
  EXPECT_EQ(refusal(preset("tiny-llama"), 1, 2, 0),
            "model 'tiny-llama': layer 1 ('layers.0', decoder_block): tensor-parallel degree 0");
}

TEST(TransformerStage, ParameterCountsAreTheModelsAnalyticCounts) {
  // Every tensor the executor creates is one the model module counts, and no more.
  for (const ModelSpec& model : every_kind_of_model()) {
    ParameterStore store;
    stage(model, 0, static_cast<int>(model.layers.size()), store);
    int64_t count = 0;
    for (const NamedTensor& p : store.parameters()) count += p.tensor.numel();
    EXPECT_EQ(count, model_totals(model, Workload{}).total_params) << model.name;
  }
}

TEST(LatentAttention, ParameterCountsAreTheModelsAnalyticCounts) {
  for (int64_t q_lora_rank : {0, 24}) {
    for (bool bias : {false, true}) {
      for (bool sinks : {false, true}) {
        ModelSpec model = testing::mla_model(q_lora_rank, bias);
        for (int i = 1; i <= 4; ++i) model.layers[i].attention->sinks = sinks;
        ParameterStore store;
        stage(model, 0, static_cast<int>(model.layers.size()), store);
        int64_t count = 0;
        for (const NamedTensor& p : store.parameters()) count += p.tensor.numel();
        EXPECT_EQ(count, model_totals(model, Workload{}).total_params)
            << "q_lora_rank " << q_lora_rank << " bias " << bias << " sinks " << sinks;
      }
    }
  }
  const ModelSpec miniature = testing::deepseek_v2_lite_miniature();
  ParameterStore store;
  stage(miniature, 0, static_cast<int>(miniature.layers.size()), store);
  int64_t count = 0;
  for (const NamedTensor& p : store.parameters()) count += p.tensor.numel();
  EXPECT_EQ(count, model_totals(miniature, Workload{}).total_params) << miniature.name;
}

TEST(LatentAttention, ParameterNamesAndShapes) {
  ParameterStore store;
  auto block = stage(testing::mla_model(24, /*bias=*/true), 1, 2, store);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& p : block->parameters()) {
    if (p.name.rfind("layers.0.attn.", 0) == 0) shapes[p.name.substr(14)] = p.tensor.sizes().vec();
  }
  // 4 heads; queries of 16 + 8 through a bottleneck of 24; a latent of 32 plus the rope key.
  const std::map<std::string, std::vector<int64_t>> expected = {
      {"wq_a", {24, 64}},  {"bq_a", {24}},  {"q_a_norm", {24}},  {"wq_b", {96, 24}},
      {"wkv_a", {40, 64}}, {"bkv_a", {40}}, {"kv_a_norm", {32}}, {"wkv_b", {128, 32}},
      {"wo", {64, 64}},    {"bo", {64}}};
  EXPECT_EQ(shapes, expected);
}

// Rotates interleaved pairs (2i, 2i + 1) of x [..., s, d] by position * 10000^(-2i/d), as
// DeepSeek's checkpoints do.
at::Tensor interleaved_rope(const at::Tensor& x) {
  const int64_t s = x.size(-2);
  const int64_t d = x.size(-1);
  at::Tensor inv_freq =
      at::pow(10000.0, at::arange(0, d, 2, at::kDouble) / static_cast<double>(d)).reciprocal();
  at::Tensor angles = at::outer(at::arange(s, at::kDouble), inv_freq).to(at::kFloat);
  at::Tensor even = x.slice(-1, 0, d, 2);
  at::Tensor odd = x.slice(-1, 1, d, 2);
  at::Tensor rotated_even = even * angles.cos() - odd * angles.sin();
  at::Tensor rotated_odd = even * angles.sin() + odd * angles.cos();
  return at::stack({rotated_even, rotated_odd}, -1).flatten(-2);
}

// The rows (or entries) of `w` at [base, base + d) reordered from halves (i, i + d/2) to
// interleaved pairs (2i, 2i + 1): the weights a DeepSeek checkpoint would hold for the same
// function.
at::Tensor interleave_rows(const at::Tensor& w, int64_t base, int64_t d) {
  at::Tensor out = w.clone();
  for (int64_t i = 0; i < d / 2; ++i) {
    out[base + 2 * i] = w[base + i];
    out[base + 2 * i + 1] = w[base + i + d / 2];
  }
  return out;
}

at::Tensor rms(const at::Tensor& x, const at::Tensor& weight) {
  return x * at::rsqrt(x.pow(2).mean({-1}, true) + 1e-5) * weight;
}

// The attention sub-layer against Hugging Face's DeepseekV2Attention written out head by head,
// with its interleaved rotary embedding on the permuted weights: the same outputs.
TEST(LatentAttention, IsDeepSeekAttentionUpToARopePermutation) {
  for (int64_t q_lora_rank : {0, 24}) {
    SCOPED_TRACE("q_lora_rank " + std::to_string(q_lora_rank));
    const ModelSpec model = testing::mla_model(q_lora_rank, /*bias=*/true);
    const AttentionShape& a = *model.layers[1].attention;
    ParameterStore store;
    auto block = stage(model, 1, 2, store);
    std::map<std::string, at::Tensor> w;
    {
      // Weights well away from their initial values, so every one of them shows in the output.
      at::NoGradGuard no_grad;
      at::manual_seed(3);
      for (auto& p : store.parameters()) {
        p.tensor.copy_(p.tensor.dim() == 1 ? 1.0 + 0.3 * at::randn_like(p.tensor)
                                           : 0.3 * at::randn_like(p.tensor));
        const std::string prefix = "layers.0.attn.";
        if (p.name.rfind(prefix, 0) == 0) w[p.name.substr(prefix.size())] = p.tensor.clone();
        if (p.name == "layers.0.attn_norm.weight") w["norm"] = p.tensor.clone();
      }
    }
    const int64_t b = 2, nh = a.num_heads, nope = a.qk_nope_head_dim, rope = a.qk_rope_head_dim;
    const int64_t qk = nope + rope, vd = a.v_head_dim, c = a.kv_lora_rank;
    at::Tensor h = at::randn({b, kSeq, a.hidden});
    // The sub-layer's output: the block's minus its input, with the feed-forward sub-layer's
    // down projection zeroed.
    at::Tensor out;
    {
      at::NoGradGuard no_grad;
      for (auto& p : store.parameters()) {
        if (p.name == "layers.0.mlp.w_down") p.tensor.zero_();
      }
      out = block->forward(h, at::Tensor()) - h;
    }
    at::Tensor x = rms(h, w["norm"]);
    at::Tensor wq = q_lora_rank > 0 ? w["wq_b"] : w["wq"];
    for (int64_t head = 0; head < nh; ++head) wq = interleave_rows(wq, head * qk + nope, rope);
    const at::Tensor wkv_a = interleave_rows(w["wkv_a"], c, rope);
    const at::Tensor bkv_a = interleave_rows(w["bkv_a"], c, rope);
    at::Tensor q = q_lora_rank > 0
                       ? at::linear(rms(at::linear(x, w["wq_a"], w["bq_a"]), w["q_a_norm"]), wq)
                       : at::linear(x, wq);
    const at::Tensor kv_a = at::linear(x, wkv_a, bkv_a);
    const at::Tensor kv = at::linear(rms(kv_a.narrow(-1, 0, c), w["kv_a_norm"]), w["wkv_b"]);
    const at::Tensor k_pe = interleaved_rope(kv_a.narrow(-1, c, rope));
    const at::Tensor causal = at::ones({kSeq, kSeq}, at::kBool).triu(1).logical_not();
    std::vector<at::Tensor> heads;
    for (int64_t head = 0; head < nh; ++head) {
      const at::Tensor qh = q.narrow(-1, head * qk, qk);
      const at::Tensor kvh = kv.narrow(-1, head * (nope + vd), nope + vd);
      const at::Tensor query =
          at::cat({qh.narrow(-1, 0, nope), interleaved_rope(qh.narrow(-1, nope, rope))}, -1);
      const at::Tensor key = at::cat({kvh.narrow(-1, 0, nope), k_pe}, -1);
      at::Tensor scores = at::matmul(query, key.transpose(-2, -1)) * std::pow(qk, -0.5);
      scores = scores.masked_fill(causal.logical_not(), -INFINITY);
      heads.push_back(at::matmul(at::softmax(scores, -1), kvh.narrow(-1, nope, vd)));
    }
    const at::Tensor reference = at::linear(at::cat(heads, -1), w["wo"], w["bo"]);
    EXPECT_LT(testing::relative_difference(out, reference), 1e-5);
    EXPECT_GT(reference.abs().max().item<float>(), 1.0f);
  }
}

TEST(Mamba, StateCarriesEveryEarlierTokenForwardButNothingBackward) {
  ModelSpec m = window_model(0, true);
  const ModelSpec hybrid = preset("tiny-hybrid");
  Layer mixer = hybrid.layers[1];
  mixer.mamba->hidden = 32;
  mixer.mamba->d_inner = 64;
  mixer.mamba->n_heads = 4;
  mixer.mamba->head_dim = 16;
  m.layers[1] = mixer;
  const auto changed = influenced(m, 10);
  for (int64_t i = 0; i < kSeq; ++i) EXPECT_EQ(changed[i], i >= 10) << i;
}

TEST(Mamba1, StateCarriesEveryEarlierTokenForwardButNothingBackward) {
  for (bool inner_norms : {true, false}) {
    SCOPED_TRACE(inner_norms ? "inner norms" : "no inner norms");
    ModelSpec m = window_model(0, true);
    Layer mixer = testing::mamba1_hybrid(inner_norms).layers[1];
    mixer.mamba->hidden = 32;
    mixer.mamba->d_inner = 64;
    m.layers[1] = mixer;
    // Without the norms, B and C start so small (x_proj's weights of 0.02 on the convolution's
    // small outputs) that the state's share of the output, about 1e-8 of it, vanishes in fp32
    // rounding: larger x_proj weights make it visible.
    const auto changed = influenced(m, 10, [](const NamedTensor& p) {
      if (p.name == "layers.0.mamba.mixer.x_proj") p.tensor.mul_(100.0);
    });
    for (int64_t i = 0; i < kSeq; ++i) EXPECT_EQ(changed[i], i >= 10) << i;
  }
}

std::map<std::string, at::Tensor> by_name(const ParameterStore& store) {
  std::map<std::string, at::Tensor> out;
  for (const NamedTensor& p : store.parameters()) out[p.name] = p.tensor;
  return out;
}

TEST(Mamba1, StartsFromMambasInitialization) {
  ParameterStore store;
  stage(testing::mamba1_hybrid(/*inner_norms=*/true), 1, 2, store);
  const auto p = by_name(store);
  const std::string m = "layers.0.mamba.mixer.";
  // A = -(1..N) in every channel (S4D-real), D ones.
  const at::Tensor a_log = p.at(m + "A_log");
  ASSERT_EQ(a_log.sizes().vec(), (std::vector<int64_t>{128, 8}));
  EXPECT_TRUE(at::allclose(-at::exp(a_log), -at::arange(1, 9, at::kFloat).expand({128, 8})));
  EXPECT_TRUE(at::equal(p.at(m + "D"), at::ones({128})));
  // softplus(dt_proj's bias) is a dt in [1e-3, 1e-1]; dt_proj's weight within dt_rank^-1/2.
  const at::Tensor dt = at::softplus(p.at(m + "dt_proj_bias"));
  EXPECT_GE(dt.min().item<float>(), 1e-3f * 0.999f);
  EXPECT_LE(dt.max().item<float>(), 1e-1f * 1.001f);
  EXPECT_LT(dt.min().item<float>(), 2e-3f);  // spread over the range
  EXPECT_GT(dt.max().item<float>(), 5e-2f);
  const at::Tensor dt_proj = p.at(m + "dt_proj");
  EXPECT_EQ(dt_proj.sizes().vec(), (std::vector<int64_t>{128, 4}));
  EXPECT_LE(dt_proj.abs().max().item<float>(), 0.5f);
  EXPECT_EQ(p.at(m + "x_proj").sizes().vec(), (std::vector<int64_t>{4 + 2 * 8, 128}));
  EXPECT_EQ(p.at(m + "in_proj").sizes().vec(), (std::vector<int64_t>{2 * 128, 64}));
  EXPECT_EQ(p.at(m + "dt_norm").sizes().vec(), (std::vector<int64_t>{4}));
  EXPECT_EQ(p.at(m + "b_norm").sizes().vec(), (std::vector<int64_t>{8}));
  EXPECT_EQ(p.at(m + "c_norm").sizes().vec(), (std::vector<int64_t>{8}));
}

// Hugging Face transformers' MambaMixer.slow_forward (channels first, the whole discretization
// at once, then the scan), with JambaMambaMixer's norms, behind the layer's pre-norm and residual.
at::Tensor hugging_face_mamba1(const std::map<std::string, at::Tensor>& p, const at::Tensor& h,
                               bool inner_norms) {
  const std::string m = "layers.0.mamba.mixer.";
  const int64_t s = h.size(1);
  const int64_t d = 128;
  auto rms = [](const at::Tensor& x, const at::Tensor& w) {
    return x * at::rsqrt(x.pow(2).mean({-1}, true) + 1e-5) * w;
  };
  const at::Tensor normed = rms(h, p.at("layers.0.mamba.norm.weight"));
  const at::Tensor projected = at::linear(normed, p.at(m + "in_proj")).transpose(1, 2);
  const auto chunks = projected.chunk(2, 1);
  const at::Tensor hidden =
      at::silu(at::conv1d(chunks[0], p.at(m + "conv"), p.at(m + "conv_bias"), 1, 3, 1, d)
                   .narrow(-1, 0, s));  // [b, d, s]
  const at::Tensor gate = chunks[1];
  const auto parts =
      at::linear(hidden.transpose(1, 2), p.at(m + "x_proj")).split_with_sizes({4, 8, 8}, -1);
  at::Tensor time_step = parts[0], bmat = parts[1], cmat = parts[2];
  if (inner_norms) {
    time_step = rms(time_step, p.at(m + "dt_norm"));
    bmat = rms(bmat, p.at(m + "b_norm"));
    cmat = rms(cmat, p.at(m + "c_norm"));
  }
  const at::Tensor dt =
      at::softplus(at::linear(time_step, p.at(m + "dt_proj"), p.at(m + "dt_proj_bias")))
          .transpose(1, 2);  // [b, d, s]
  const at::Tensor a = -at::exp(p.at(m + "A_log"));
  const at::Tensor discrete_a = at::exp(a.unsqueeze(0).unsqueeze(2) * dt.unsqueeze(-1));
  const at::Tensor delta_b_u = dt.unsqueeze(-1) * bmat.unsqueeze(1) * hidden.unsqueeze(-1);
  at::Tensor state = at::zeros({h.size(0), d, 8});
  std::vector<at::Tensor> ys;
  for (int64_t i = 0; i < s; ++i) {
    state = discrete_a.select(2, i) * state + delta_b_u.select(2, i);
    ys.push_back(at::matmul(state, cmat.select(1, i).unsqueeze(-1)));  // [b, d, 1]
  }
  at::Tensor y = at::cat(ys, -1) + hidden * p.at(m + "D").view({1, d, 1});
  y = y * at::silu(gate);
  return h + at::linear(y.transpose(1, 2), p.at(m + "out_proj"));
}

TEST(Mamba1, ComputesWhatHuggingFacesMambaMixerComputes) {
  for (bool inner_norms : {true, false}) {
    const ModelSpec model = testing::mamba1_hybrid(inner_norms);
    ParameterStore store;
    auto layer = stage(model, 1, 2, store);
    const auto p = by_name(store);
    {
      // Move every parameter off its initial value (norms of ones, zero biases, D of ones).
      at::NoGradGuard no_grad;
      at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(3);
      for (const auto& [name, tensor] : p) {
        tensor.add_(at::empty_like(tensor).normal_(0.0, 0.1, generator));
      }
    }
    at::NoGradGuard no_grad;
    const at::Tensor h = at::randn({2, kSeq, 64}, at::make_generator<at::CPUGeneratorImpl>(4));
    const at::Tensor mine = layer->forward(h, at::Tensor());
    const at::Tensor theirs = hugging_face_mamba1(p, h, inner_norms);
    EXPECT_LT(testing::relative_difference(mine - h, theirs - h), 1e-5) << inner_norms;
  }
}

}  // namespace
}  // namespace motley
