// The layer profiler on the tiny presets, with a short stopping rule. Times are only checked to
// be positive and finite (tests never assert wall-clock values); what is exact is the structure:
// which layers share a measurement, which degrees were measured, what the profile file holds.
#include "motley/profile/layer_profiler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "motley/model/presets.h"
#include "motley/model/profile.h"

namespace motley {
namespace {

ModelSpec tiny(const std::string& name) {
  Result<ModelSpec> m = model_preset(name);
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return *m;
}

LayerProfileOptions quick() {
  LayerProfileOptions o;
  o.seq_len = 16;
  o.micro_batch_size = 2;
  o.warmup = 1;
  o.min_repeats = 2;
  o.max_repeats = 3;
  o.target_rse = 0.5;
  o.max_time = Seconds(5);
  return o;
}

void expect_time(const std::optional<Seconds>& t, const std::string& what) {
  ASSERT_TRUE(t.has_value()) << what;
  EXPECT_TRUE(std::isfinite(t->value()) && t->value() > 0) << what << ": " << t->value();
}

TEST(LayerProfiler, IdenticalLayersShareOneMeasurement) {
  const ModelSpec model = tiny("tiny-llama");
  const std::vector<std::vector<int>> groups = distinct_layer_groups(model);
  // Embedding, four identical decoder blocks, head.
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0], std::vector<int>{0});
  EXPECT_EQ(groups[1], (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(groups[2], std::vector<int>{5});
}

TEST(LayerProfiler, GivesPositiveTimesForEveryDistinctLayer) {
  const ModelSpec model = tiny("tiny-llama");
  int progress = 0;
  LayerProfileOptions o = quick();
  o.on_progress = [&progress](const std::string&) { ++progress; };
  Result<LayerProfile> p = profile_layers(o, model);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->device_type, "cpu");
  EXPECT_EQ(p->threads, 1);
  ASSERT_EQ(p->distinct.size(), 3u);
  EXPECT_EQ(progress, 3);
  for (const DistinctLayer& d : p->distinct) {
    const std::string name = model.layers[d.layers[0]].name;
    ASSERT_EQ(d.measurements.size(), 1u) << name;
    const LayerMeasurement& m = d.measurements[0];
    EXPECT_EQ(m.tp, 1);
    EXPECT_GE(m.samples, 2) << name;
    EXPECT_LE(m.samples, 3) << name;
    expect_time(m.times.forward, name + " F");
    expect_time(m.times.backward_weight, name + " W");
    expect_time(m.times.backward, name + " fused B");
    // The embedding's B is its matrix's gradient (a lookup is no weight product); the others'
    // B their input's gradient and their norms'.
    expect_time(m.times.backward_input, name + " B");
    EXPECT_GT(d.param_bytes.value(), 0) << name;
    EXPECT_GT(d.output_bytes.value(), 0) << name;
  }
  // Only the decoder blocks have an attention core to recompute.
  EXPECT_FALSE(p->distinct[0].measurements[0].times.selective_recompute.has_value());
  expect_time(p->distinct[1].measurements[0].times.selective_recompute, "block R");
  EXPECT_FALSE(p->distinct[2].measurements[0].times.selective_recompute.has_value());
  // fp32 weights of one block: 46,208 parameters; the head's output is its scalar loss.
  EXPECT_EQ(p->distinct[1].param_bytes, Bytes(4.0 * 46208));
  EXPECT_EQ(p->distinct[1].output_bytes, Bytes(4.0 * 2 * 16 * 64));
  EXPECT_EQ(p->distinct[2].output_bytes, Bytes(4));
}

TEST(LayerProfiler, WritesAProfileThatLoadsBackAsMeasuredLayers) {
  const ModelSpec model = tiny("tiny-llama");
  Result<LayerProfile> p = profile_layers(quick(), model);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  const Json written = profile_to_json(p->profile);
  EXPECT_EQ(written["format"], "motley.profile/2");
  EXPECT_EQ(written["layers"].size(), 3u);  // the four blocks fold into one entry
  EXPECT_EQ(written["layers"][1]["repeat"], 4);
  Result<ModelSpec> back = profile_from_json(written, "profile.json");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  ASSERT_EQ(back->layers.size(), model.layers.size());
  EXPECT_EQ(back->default_seq_len, 16);
  EXPECT_EQ(back->dtype, DType::kFloat32);
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const Layer& l = back->layers[i];
    EXPECT_EQ(l.name, model.layers[i].name);
    EXPECT_EQ(l.kind, LayerKind::kMeasured);
    ASSERT_TRUE(l.measured.has_value());
    EXPECT_EQ(l.measured->measured_on, "cpu");
    // W is timed as the executor runs it: the weight products' gradients from what B left.
    EXPECT_EQ(l.measured->weight_pass, WeightPass::kWeightsOnly);
    EXPECT_EQ(l.measured->seq_len, 16);
    EXPECT_EQ(l.measured->micro_batch_size, 2);
    EXPECT_EQ(l.measured->times.forward, back->layers[i == 0 ? 0 : i].measured->times.forward);
  }
  for (int i = 2; i <= 4; ++i) {
    EXPECT_EQ(back->layers[i].measured->times.forward, back->layers[1].measured->times.forward);
    EXPECT_EQ(back->layers[i].measured->times.selective_recompute,
              back->layers[1].measured->times.selective_recompute);
  }
}

TEST(LayerProfiler, MeasuresTensorParallelGroupsWhereTheLayerSplits) {
  const ModelSpec model = tiny("tiny-llama");
  LayerProfileOptions o = quick();
  o.tp_degrees = {2, 4};
  Result<LayerProfile> p = profile_layers(o, model);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  // The embedding and head split their 256-token vocabulary over 2 and 4; the blocks' two
  // key/value heads split over 2 only.
  ASSERT_EQ(p->distinct.size(), 3u);
  EXPECT_EQ(p->distinct[0].measurements.size(), 3u);
  EXPECT_EQ(p->distinct[2].measurements.size(), 3u);
  const DistinctLayer& block = p->distinct[1];
  ASSERT_EQ(block.measurements.size(), 2u);
  EXPECT_EQ(block.measurements[1].tp, 2);
  ASSERT_EQ(block.skipped_tp.size(), 1u);
  EXPECT_EQ(block.skipped_tp[0].first, 4);
  EXPECT_NE(block.skipped_tp[0].second.find("num_kv_heads"), std::string::npos)
      << block.skipped_tp[0].second;
  const MeasuredTimes& tp2 = block.measurements[1].times;
  expect_time(tp2.forward, "block F at TP 2");
  expect_time(tp2.backward_input, "block B at TP 2");
  expect_time(tp2.backward_weight, "block W at TP 2");
  expect_time(tp2.selective_recompute, "block R at TP 2");

  const Json written = profile_to_json(p->profile);
  Result<ModelSpec> back = profile_from_json(written, "profile.json");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  const MeasuredLayer& b = *back->layers[3].measured;
  ASSERT_EQ(b.times_by_tp.count("cpu"), 1u);
  EXPECT_EQ(b.times_by_tp.at("cpu").size(), 1u);
  EXPECT_EQ(b.times_by_tp.at("cpu").at(2).forward, tp2.forward);
  const MeasuredLayer& head = *back->layers[5].measured;
  EXPECT_EQ(head.times_by_tp.at("cpu").size(), 2u);
  expect_time(head.times_by_tp.at("cpu").at(4).backward_weight, "head W at TP 4");
}

TEST(LayerProfiler, RecomputeTimeOnlyWhereThereIsAttention) {
  const ModelSpec model = tiny("tiny-hybrid");  // embedding, M - * M -, head
  Result<LayerProfile> p = profile_layers(quick(), model);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  std::set<std::string> with_core;
  for (const Layer& l : p->profile.layers) {
    if (l.measured->times.selective_recompute) with_core.insert(l.name);
  }
  std::set<std::string> attention;
  for (const Layer& l : model.layers) {
    if (l.attention) attention.insert(l.name);
  }
  EXPECT_EQ(with_core, attention);
  EXPECT_FALSE(attention.empty());
}

TEST(LayerProfiler, RefusesShapesTooLargeForMemoryBeforeAllocating) {
  const ModelSpec model = tiny("tiny-llama");
  LayerProfileOptions o = quick();
  o.seq_len = 1 << 20;
  o.micro_batch_size = 1 << 10;
  o.available_memory = Bytes(64.0 * (1 << 30));
  Result<LayerProfile> p = profile_layers(o, model);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("model 'tiny-llama': layer 0 ('embed') needs about"),
            std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("use a smaller --seq-len or --micro-batch-size"),
            std::string::npos);
}

TEST(LayerProfiler, RefusesBadOptions) {
  const ModelSpec model = tiny("tiny-llama");
  LayerProfileOptions o = quick();
  o.tp_degrees = {1};
  Result<LayerProfile> p = profile_layers(o, model);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().message(),
            "tensor-parallel degree: expected an integer from 2 to 256, got 1");
  o = quick();
  o.max_repeats = 1;
  p = profile_layers(o, model);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().message(), "maximum samples: expected an integer from 2 to 1000000, got 1");
}

}  // namespace
}  // namespace motley
