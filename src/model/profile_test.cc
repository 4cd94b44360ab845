#include "motley/model/profile.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "model_test_util.h"
#include "motley/model/model_json.h"

namespace motley {
namespace {

using model_testing::kData;
using model_testing::parse_or_die;

const std::string kSource = MOTLEY_SOURCE_DIR;

std::vector<std::string> names(const ModelSpec& m) {
  std::vector<std::string> out;
  for (const Layer& l : m.layers) out.push_back(l.name);
  return out;
}

// The error message profile_from_json gives for `text`, "" when it parses.
std::string error_for(const std::string& text) {
  Result<ModelSpec> m = profile_from_json(parse_or_die(text), "p.json");
  return m.is_ok() ? "" : m.status().message();
}

constexpr const char* kExample = R"({
  "format": "motley.profile/1", "name": "hybrid", "measured_on": "H100-SXM",
  "seq_len": 4096, "micro_batch_size": 1,
  "layers": [
    {"name": "embedding", "forward_s": 0.00135},
    {"name": "mamba", "repeat": 4, "forward_s": 0.00373, "backward_input_s": 0.00568,
     "backward_weight_s": 0.00162, "param_bytes": 0, "activation_bytes": 0, "output_bytes": 0,
     "times_by_device": {"A100-80GB": {"forward_s": 0.009}}},
    {"name": "head", "measured_on": "A100-80GB", "seq_len": 2048, "micro_batch_size": 2,
     "forward_s": 0.01035, "backward_input_s": 0.0121, "backward_weight_s": 0.00294,
     "param_bytes": 1048576, "activation_bytes": 4096, "output_bytes": 8}
  ]})";

TEST(Profile, ExpandsRepeatIntoNumberedMeasuredLayers) {
  Result<ModelSpec> m = profile_from_json(parse_or_die(kExample), "p.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->name, "hybrid");
  EXPECT_EQ(m->family, "profile");
  EXPECT_EQ(m->default_seq_len, 4096);
  EXPECT_EQ(names(*m), (std::vector<std::string>{"embedding", "mamba.0", "mamba.1", "mamba.2",
                                                 "mamba.3", "head"}));
  for (const Layer& l : m->layers) {
    EXPECT_EQ(l.kind, LayerKind::kMeasured);
    ASSERT_TRUE(l.measured.has_value());
  }
  const MeasuredLayer& mamba = *m->layers[3].measured;
  EXPECT_EQ(mamba.measured_on, "H100-SXM");  // the top-level default
  EXPECT_EQ(mamba.times.forward, Seconds(0.00373));
  EXPECT_EQ(mamba.times.backward_input, Seconds(0.00568));
  EXPECT_EQ(mamba.times.backward_weight, Seconds(0.00162));
  EXPECT_EQ(mamba.seq_len, 4096);
  EXPECT_EQ(mamba.micro_batch_size, 1);
  ASSERT_EQ(mamba.times_by_device.size(), 1u);
  EXPECT_EQ(mamba.times_by_device.at("A100-80GB").forward, Seconds(0.009));
  EXPECT_FALSE(mamba.times_by_device.at("A100-80GB").backward_input.has_value());

  // Backward times left out count as zero.
  const MeasuredLayer& embedding = *m->layers[0].measured;
  EXPECT_EQ(embedding.times.backward_input, Seconds(0));
  EXPECT_EQ(embedding.times.backward_weight, Seconds(0));
  EXPECT_EQ(embedding.param_bytes, Bytes(0));

  // Per-layer values override the top level.
  const MeasuredLayer& head = *m->layers[5].measured;
  EXPECT_EQ(head.measured_on, "A100-80GB");
  EXPECT_EQ(head.seq_len, 2048);
  EXPECT_EQ(head.micro_batch_size, 2);
  EXPECT_EQ(head.param_bytes, Bytes(1048576));
  EXPECT_EQ(head.output_bytes, Bytes(8));
}

TEST(Profile, SequenceLengthAndMicroBatchDefaultTo4096And1) {
  Result<ModelSpec> m =
      profile_from_json(parse_or_die(R"({"format": "motley.profile/1", "measured_on": "L40S",
                       "layers": [{"name": "x", "forward_s": 1}]})"),
                        "p.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->name, "profile");
  EXPECT_EQ(m->default_seq_len, 4096);
  EXPECT_EQ(m->layers[0].measured->seq_len, 4096);
  EXPECT_EQ(m->layers[0].measured->micro_batch_size, 1);
  EXPECT_EQ(m->dtype, DType::kBFloat16);
}

// Interleaved hybrids name each kind once per entry; the layers are numbered across the file.
TEST(Profile, EntriesSharingANameAreNumberedInFileOrder) {
  Result<ModelSpec> m = profile_from_json(parse_or_die(R"({
      "format": "motley.profile/1", "measured_on": "H100-SXM", "layers": [
        {"name": "mamba", "forward_s": 1}, {"name": "mlp", "forward_s": 2},
        {"name": "mamba", "repeat": 2, "forward_s": 1}, {"name": "mlp", "forward_s": 2},
        {"name": "attention", "forward_s": 3}]})"),
                                          "p.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(names(*m), (std::vector<std::string>{"mamba.0", "mlp.0", "mamba.1", "mamba.2", "mlp.1",
                                                 "attention"}));
}

TEST(Profile, RoundTripFoldsRepeatsBack) {
  Result<ModelSpec> m = profile_from_json(parse_or_die(kExample), "p.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  Json written = profile_to_json(*m);
  ASSERT_EQ(written["layers"].size(), 3u);
  EXPECT_EQ(written["layers"][1]["name"], "mamba");
  EXPECT_EQ(written["layers"][1]["repeat"], 4);
  // Written as version 2, every entry stating its device and shape.
  EXPECT_EQ(written["format"], "motley.profile/2");
  EXPECT_EQ(written["layers"][1]["measured_on"], "H100-SXM");
  EXPECT_EQ(written["layers"][1]["seq_len"], 4096);
  EXPECT_EQ(written["layers"][1]["micro_batch_size"], 1);
  EXPECT_EQ(written["layers"][2]["measured_on"], "A100-80GB");
  EXPECT_EQ(written["layers"][2]["seq_len"], 2048);
  Result<ModelSpec> back = profile_from_json(written, "written.json");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(model_to_json(*back), model_to_json(*m));
  EXPECT_EQ(profile_to_json(*back), written);
}

TEST(Profile, FoldsOnlyWhatReadsBackToTheSameNames) {
  ModelSpec m;
  m.name = "odd";
  m.family = "profile";
  auto add = [&m](const std::string& name, double forward) {
    Layer l;
    l.name = name;
    l.kind = LayerKind::kMeasured;
    l.measured = MeasuredLayer{};
    l.measured->measured_on = "H100-SXM";
    l.measured->times = {Seconds(forward), Seconds(0), Seconds(0), std::nullopt, std::nullopt};
    l.measured->seq_len = 4096;
    l.measured->micro_batch_size = 1;
    m.layers.push_back(l);
  };
  add("a.0", 1);  // a.0, a.1: foldable, but the times differ: two entries named "a"
  add("a.1", 2);
  add("b.1", 1);  // starts at 1: kept as is
  add("b.2", 1);
  add("c.0", 1);  // alone: kept as is
  add("d", 1);    // plain name
  add("d.0", 1);  // "d" exists, so d.0 and d.1 are kept as is
  add("d.1", 1);
  Json written = profile_to_json(m);
  std::vector<std::string> entry_names;
  for (const Json& e : written["layers"]) entry_names.push_back(e["name"]);
  EXPECT_EQ(entry_names,
            (std::vector<std::string>{"a", "a", "b.1", "b.2", "c.0", "d", "d.0", "d.1"}));
  Result<ModelSpec> back = profile_from_json(written, "written.json");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(names(*back), names(m));
  EXPECT_EQ(model_to_json(*back), model_to_json(m));
}

// ---- version 2: selective recompute and times per tensor-parallel degree ----

constexpr const char* kV2Example = R"({
  "format": "motley.profile/2", "name": "tiny", "seq_len": 128, "dtype": "fp32",
  "layers": [
    {"name": "embed", "measured_on": "cpu", "seq_len": 128, "micro_batch_size": 2,
     "forward_s": 0.0001, "backward_input_s": 0, "backward_weight_s": 0.0002,
     "param_bytes": 65536, "activation_bytes": 0, "output_bytes": 65536,
     "times_by_tp": {"cpu": {"2": {"forward_s": 0.00008, "backward_weight_s": 0.0001}}}},
    {"name": "layers", "repeat": 3, "measured_on": "cpu", "seq_len": 128, "micro_batch_size": 2,
     "forward_s": 0.003, "backward_input_s": 0.004, "backward_weight_s": 0.002,
     "selective_recompute_s": 0.0007, "backward_s": 0.005, "param_bytes": 184832,
     "activation_bytes": 1e6,
     "output_bytes": 65536,
     "times_by_device": {"H100-SXM": {"forward_s": 0.00001, "selective_recompute_s": 0.000002}},
     "times_by_tp": {"cpu": {"2": {"forward_s": 0.002, "backward_input_s": 0.0025,
                                   "backward_weight_s": 0.0011, "selective_recompute_s": 0.0004,
                                   "backward_s": 0.003},
                             "4": {"forward_s": 0.0015}},
                     "H100-SXM": {"8": {"forward_s": 0.000002}}}},
    {"name": "head", "measured_on": "cpu", "seq_len": 128, "micro_batch_size": 2,
     "forward_s": 0.001, "backward_input_s": 0.001, "backward_weight_s": 0.0005,
     "param_bytes": 65792, "activation_bytes": 0, "output_bytes": 4}
  ]})";

// A profile with one layer entry `entry` (a JSON object's members) in version `format`.
std::string one_entry(const std::string& entry, const std::string& format = "motley.profile/2") {
  return R"({"format": ")" + format + R"(", "measured_on": "cpu", "layers": [{"name": "x", )" +
         entry + "}]}";
}

TEST(ProfileV2, ReadsSelectiveRecomputeAndTimesPerDegree) {
  Result<ModelSpec> m = profile_from_json(parse_or_die(kV2Example), "p.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->dtype, DType::kFloat32);
  EXPECT_EQ(m->default_seq_len, 128);
  ASSERT_EQ(names(*m),
            (std::vector<std::string>{"embed", "layers.0", "layers.1", "layers.2", "head"}));
  const MeasuredLayer& block = *m->layers[2].measured;
  EXPECT_EQ(block.measured_on, "cpu");
  EXPECT_EQ(block.seq_len, 128);
  EXPECT_EQ(block.micro_batch_size, 2);
  EXPECT_EQ(block.times.selective_recompute, Seconds(0.0007));
  EXPECT_EQ(block.times.backward, Seconds(0.005));
  EXPECT_EQ(block.times_by_device.at("H100-SXM").selective_recompute, Seconds(0.000002));
  ASSERT_EQ(block.times_by_tp.size(), 2u);
  const std::map<int, MeasuredTimes>& cpu = block.times_by_tp.at("cpu");
  ASSERT_EQ(cpu.size(), 2u);
  EXPECT_EQ(cpu.at(2).forward, Seconds(0.002));
  EXPECT_EQ(cpu.at(2).backward_input, Seconds(0.0025));
  EXPECT_EQ(cpu.at(2).backward_weight, Seconds(0.0011));
  EXPECT_EQ(cpu.at(2).selective_recompute, Seconds(0.0004));
  EXPECT_EQ(cpu.at(2).backward, Seconds(0.003));
  EXPECT_FALSE(cpu.at(4).backward.has_value());
  EXPECT_EQ(cpu.at(4).forward, Seconds(0.0015));
  EXPECT_FALSE(cpu.at(4).backward_input.has_value());
  EXPECT_EQ(block.times_by_tp.at("H100-SXM").at(8).forward, Seconds(0.000002));
  // Without an attention core the field is absent, not zero.
  EXPECT_FALSE(m->layers[0].measured->times.selective_recompute.has_value());
  EXPECT_EQ(m->layers[0].measured->times_by_tp.at("cpu").at(2).forward, Seconds(0.00008));
  EXPECT_TRUE(m->layers[4].measured->times_by_tp.empty());
}

TEST(ProfileV2, RoundTripsExactly) {
  Result<ModelSpec> m = profile_from_json(parse_or_die(kV2Example), "p.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  Json written = profile_to_json(*m);
  EXPECT_EQ(written, parse_or_die(kV2Example));  // the example is in canonical form
  Result<ModelSpec> back = profile_from_json(written, "written.json");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(model_to_json(*back), model_to_json(*m));
  EXPECT_EQ(profile_to_json(*back), written);
  // The model format carries the same fields, so a plan's embedded model keeps them.
  Result<ModelSpec> via_model = model_from_json(model_to_json(*m), "m.json");
  ASSERT_TRUE(via_model.is_ok()) << via_model.status().message();
  EXPECT_EQ(profile_to_json(*via_model), written);
}

// A measured head may state its vocabulary, which vocabulary parallelism splits; it survives
// the profile and the model format (a plan's embedded model), and only the last layer's counts.
TEST(ProfileV2, AMeasuredHeadStatesItsVocabulary) {
  const std::string text = R"({
  "format": "motley.profile/2", "name": "headed", "measured_on": "H100-SXM",
  "seq_len": 4096, "micro_batch_size": 1,
  "layers": [
    {"name": "block", "repeat": 2, "forward_s": 0.002, "backward_input_s": 0.002,
     "backward_weight_s": 0.001, "output_bytes": 1024},
    {"name": "head", "forward_s": 0.01, "backward_input_s": 0.01, "backward_weight_s": 0.001,
     "param_bytes": 1048576, "vocab": 32000}
  ]})";
  Result<ModelSpec> m = profile_from_json(parse_or_die(text), "p.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(head_vocab(*m), 32000);
  const Json written = profile_to_json(*m);
  EXPECT_EQ(written["layers"][1]["vocab"], 32000);
  Result<ModelSpec> via_model = model_from_json(model_to_json(*m), "m.json");
  ASSERT_TRUE(via_model.is_ok()) << via_model.status().message();
  EXPECT_EQ(head_vocab(*via_model), 32000);
  ModelSpec blocks_last = *m;
  std::swap(blocks_last.layers.front(), blocks_last.layers.back());
  EXPECT_EQ(head_vocab(blocks_last), 0);
  EXPECT_NE(error_for(R"({"format": "motley.profile/2", "name": "x", "measured_on": "H100-SXM",
    "layers": [{"name": "head", "forward_s": 1, "vocab": 0}]})"),
            "");
}

// Profiles converted from other tools seldom state the vocabulary. A last layer whose output is
// a loss and a first layer that keeps only the token ids are the head and the embedding; their
// rows are their weights over one token's hidden state (less the head's final norm).
TEST(ProfileV2, AnUnstatedVocabularyIsReadFromTheLayersBytes) {
  // bf16, 4,096 tokens a micro-batch, hidden 64: a hidden state of 4096 x 64 x 2 bytes.
  const std::string text = R"({
  "format": "motley.profile/2", "name": "unstated", "measured_on": "H100-SXM",
  "seq_len": 4096, "micro_batch_size": 1,
  "layers": [
    {"name": "embed", "forward_s": 0.001, "param_bytes": 128000, "activation_bytes": 32768,
     "output_bytes": 524288},
    {"name": "block", "repeat": 2, "forward_s": 0.002, "backward_input_s": 0.002,
     "backward_weight_s": 0.001, "param_bytes": 1000000, "activation_bytes": 100000000,
     "output_bytes": 524288},
    {"name": "head", "forward_s": 0.01, "backward_input_s": 0.01, "backward_weight_s": 0.001,
     "param_bytes": 128128, "output_bytes": 4}
  ]})";
  Result<ModelSpec> m = profile_from_json(parse_or_die(text), "p.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(head_vocab(*m), 1000);
  EXPECT_EQ(embedding_vocab(*m), 1000);
  // Read, not written: the file round-trips as it was.
  EXPECT_FALSE(profile_to_json(*m)["layers"][2].contains("vocab"));
  // A stated vocabulary wins.
  ModelSpec stated = *m;
  stated.layers.back().measured->vocab = 999;
  EXPECT_EQ(head_vocab(stated), 999);
  // A last layer handing on a hidden state is no head.
  ModelSpec hidden_out = *m;
  hidden_out.layers.back().measured->output_bytes = Bytes(524288);
  EXPECT_EQ(head_vocab(hidden_out), 0);
  // Nor is one after a layer whose output is not whole bytes per token.
  ModelSpec ragged = *m;
  ragged.layers[ragged.layers.size() - 2].measured->output_bytes = Bytes(1000);
  EXPECT_EQ(head_vocab(ragged), 0);
  // A first layer keeping more than the token ids is no lookup table.
  ModelSpec kept = *m;
  kept.layers.front().measured->activation_bytes = Bytes(100000000);
  EXPECT_EQ(embedding_vocab(kept), 0);
  // Nor one whose activation bytes are not stated.
  kept.layers.front().measured->activation_bytes = Bytes(0);
  EXPECT_EQ(embedding_vocab(kept), 0);
  // Weights of less than two rows are no vocabulary.
  ModelSpec tiny = *m;
  tiny.layers.back().measured->param_bytes = Bytes(256);
  EXPECT_EQ(head_vocab(tiny), 0);
  // A profile that does not state its shape gives no tokens to read a width from.
  ModelSpec shapeless = *m;
  for (Layer& l : shapeless.layers) l.measured->micro_batch_size = 0;
  EXPECT_EQ(head_vocab(shapeless), 0);
  EXPECT_EQ(embedding_vocab(shapeless), 0);
}

TEST(ProfileV2, LayersDifferingOnlyInTimesPerDegreeAreNotFolded) {
  Result<ModelSpec> m = profile_from_json(parse_or_die(kV2Example), "p.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  m->layers[2].measured->times_by_tp["cpu"][2].forward = Seconds(1);
  Json written = profile_to_json(*m);
  ASSERT_EQ(written["layers"].size(), 5u);  // layers.0, layers.1, layers.2 each on their own
  EXPECT_EQ(written["layers"][2]["name"], "layers");
  EXPECT_FALSE(written["layers"][2].contains("repeat"));
  m->layers[2].measured->times_by_tp["cpu"].erase(2);
  m->layers[2].measured->times.selective_recompute.reset();
  EXPECT_EQ(profile_to_json(*m)["layers"].size(), 5u);
}

// A version 1 file reads exactly as before: the new fields are absent, the old ones unchanged.
TEST(ProfileV2, VersionOneFilesLoadUnchanged) {
  Result<ModelSpec> m = profile_from_json(parse_or_die(kExample), "p.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  for (const Layer& l : m->layers) {
    EXPECT_FALSE(l.measured->times.selective_recompute.has_value()) << l.name;
    EXPECT_TRUE(l.measured->times_by_tp.empty()) << l.name;
  }
  // The model as version 1 always gave it (model_to_json writes every field).
  EXPECT_EQ(model_to_json(*m)["layers"][3]["measured"],
            parse_or_die(R"({"measured_on": "H100-SXM", "forward_s": 0.00373,
                "backward_input_s": 0.00568, "backward_weight_s": 0.00162,
                "times_by_device": {"A100-80GB": {"forward_s": 0.009}}, "seq_len": 4096,
                "micro_batch_size": 1, "param_bytes": 0, "activation_bytes": 0,
                "output_bytes": 0})"));
  // Version 2's fields are not part of version 1.
  EXPECT_EQ(
      error_for(one_entry(R"("forward_s": 1, "selective_recompute_s": 1)", "motley.profile/1"))
          .rfind("p.json: field 'layers[0].selective_recompute_s': unknown field", 0),
      0u);
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "times_by_tp": {})", "motley.profile/1"))
                .rfind("p.json: field 'layers[0].times_by_tp': unknown field", 0),
            0u);
}

// How W was timed: "full_backward" at the top level applies to every entry that does not say
// otherwise; it survives the profile and the model format; the default is "weights_only", which
// neither writes.
TEST(ProfileV2, WeightPassIsReadAtTheTopOrPerEntryAndRoundTrips) {
  const std::string text = R"({
  "format": "motley.profile/2", "name": "walked", "measured_on": "T4",
  "weight_pass": "full_backward",
  "layers": [
    {"name": "embed", "forward_s": 0.001, "backward_weight_s": 0.001},
    {"name": "block", "repeat": 2, "forward_s": 0.002, "backward_input_s": 0.002,
     "backward_weight_s": 0.003},
    {"name": "head", "weight_pass": "weights_only", "forward_s": 0.001,
     "backward_input_s": 0.001, "backward_weight_s": 0.001}
  ]})";
  Result<ModelSpec> m = profile_from_json(parse_or_die(text), "p.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  std::vector<WeightPass> passes;
  for (const Layer& l : m->layers) passes.push_back(l.measured->weight_pass);
  EXPECT_EQ(passes, (std::vector<WeightPass>{WeightPass::kFullBackward, WeightPass::kFullBackward,
                                             WeightPass::kFullBackward, WeightPass::kWeightsOnly}));
  const Json written = profile_to_json(*m);
  EXPECT_EQ(written["layers"][0]["weight_pass"], "full_backward");
  EXPECT_FALSE(written["layers"][2].contains("weight_pass"));
  Result<ModelSpec> back = profile_from_json(written, "written.json");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(profile_to_json(*back), written);
  Result<ModelSpec> via_model = model_from_json(model_to_json(*m), "m.json");
  ASSERT_TRUE(via_model.is_ok()) << via_model.status().message();
  EXPECT_EQ(profile_to_json(*via_model), written);
  // Without the key every layer is "weights_only", as profiles were read before.
  Result<ModelSpec> old = profile_from_json(parse_or_die(kV2Example), "p.json");
  ASSERT_TRUE(old.is_ok());
  for (const Layer& l : old->layers) EXPECT_EQ(l.measured->weight_pass, WeightPass::kWeightsOnly);
}

// A measured optimizer step survives the profile and the model format, and is refused when
// negative or in a version 1 file.
TEST(ProfileV2, OptimizerStepRoundTrips) {
  Result<ModelSpec> m = profile_from_json(
      parse_or_die(one_entry(R"("forward_s": 1, "optimizer_s": 0.25)")), "p.json");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  ASSERT_TRUE(m->layers[0].measured->optimizer_step.has_value());
  EXPECT_EQ(m->layers[0].measured->optimizer_step->value(), 0.25);
  const Json written = profile_to_json(*m);
  EXPECT_EQ(written["layers"][0]["optimizer_s"], 0.25);
  Result<ModelSpec> via_model = model_from_json(model_to_json(*m), "m.json");
  ASSERT_TRUE(via_model.is_ok()) << via_model.status().message();
  EXPECT_EQ(profile_to_json(*via_model), written);
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "optimizer_s": -1)")),
            "p.json: field 'layers[0].optimizer_s': expected a finite non-negative number, got -1");
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "optimizer_s": 1)", "motley.profile/1"))
                .rfind("p.json: field 'layers[0].optimizer_s': unknown field", 0),
            0u);
}

TEST(ProfileV2Errors, UnknownWeightPassNamesTheChoices) {
  const std::string expected =
      "unknown weight pass \"fused\"; expected \"weights_only\" (W computes only the weights' "
      "gradients) or \"full_backward\" (W walks the layer's whole backward again)";
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "weight_pass": "fused")")),
            "p.json: field 'layers[0].weight_pass': " + expected);
  EXPECT_EQ(error_for(R"({"format": "motley.profile/2", "measured_on": "T4",
    "weight_pass": "fused", "layers": [{"name": "x", "forward_s": 1}]})"),
            "p.json: field 'weight_pass': " + expected);
  EXPECT_EQ(
      error_for(one_entry(R"("forward_s": 1, "weight_pass": "weights_only")", "motley.profile/1"))
          .rfind("p.json: field 'layers[0].weight_pass': unknown field", 0),
      0u);
}

TEST(ProfileV2Errors, DegreesOutsideTwoTo65536) {
  for (const char* degree : {"1", "0", "65537", "-2", "02", "2.0", "two", ""}) {
    EXPECT_EQ(error_for(one_entry(std::string(R"("forward_s": 1, "times_by_tp": {"cpu": {")") +
                                  degree + R"(": {"forward_s": 1}}})")),
              fmt::format("p.json: field 'layers[0].times_by_tp.cpu': tensor-parallel degree "
                          "\"{}\": expected an integer from 2 to 65536",
                          degree));
  }
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "times_by_tp": {"cpu": {"65536":
      {"forward_s": 1}}})")),
            "");
}

TEST(ProfileV2Errors, NegativeOrNonFiniteTimes) {
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "selective_recompute_s": -1)")),
            "p.json: field 'layers[0].selective_recompute_s': expected a finite non-negative "
            "number, got -1");
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "times_by_tp": {"cpu": {"2":
      {"backward_input_s": -0.5}}})")),
            "p.json: field 'layers[0].times_by_tp.cpu.2.backward_input_s': expected a finite "
            "non-negative number, got -0.5");
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "times_by_tp": {"cpu": {"2":
      {"forward_s": NaN}}})")),
            "p.json: field 'layers[0].times_by_tp.cpu.2.forward_s': expected a finite "
            "non-negative number, got NaN");
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "selective_recompute_s": Infinity)")),
            "p.json: field 'layers[0].selective_recompute_s': expected a finite non-negative "
            "number, got Infinity");
}

TEST(ProfileV2Errors, WrongTypesAndUnknownKeys) {
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "times_by_tp": [])")),
            "p.json: field 'layers[0].times_by_tp': expected an object of device type names, got "
            "an array");
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "times_by_tp": {"cpu": 2})")),
            "p.json: field 'layers[0].times_by_tp.cpu': expected an object of tensor-parallel "
            "degrees (\"2\", \"4\", ...), got 2");
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "times_by_tp": {"cpu": {}})")),
            "p.json: field 'layers[0].times_by_tp.cpu': expected at least one tensor-parallel "
            "degree");
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "times_by_tp": {"cpu": {"2": {}}})")),
            "p.json: field 'layers[0].times_by_tp.cpu.2': expected at least one of forward_s, "
            "backward_input_s, backward_weight_s, selective_recompute_s or backward_s");
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "times_by_tp": {"cpu": {"2": 0.1}})")),
            "p.json: field 'layers[0].times_by_tp.cpu.2': expected an object, got 0.1");
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "selective_recompute_s": "0.1")")),
            "p.json: field 'layers[0].selective_recompute_s': expected a number, got \"0.1\"");
  const std::string unknown =
      error_for(one_entry(R"("forward_s": 1, "times_by_tp": {"cpu": {"2": {"forward_ms": 1}}})"));
  EXPECT_EQ(
      unknown.rfind("p.json: field 'layers[0].times_by_tp.cpu.2.forward_ms': unknown field", 0), 0u)
      << unknown;
}

// ---- errors: each names the file and the field ----

TEST(ProfileErrors, WrongFormatSaysWhichIsExpected) {
  EXPECT_EQ(error_for(R"({"format": "motley.model/1", "layers": []})"),
            "p.json: field 'format': expected \"motley.profile/2\" or \"motley.profile/1\", got "
            "\"motley.model/1\"");
}

TEST(ProfileErrors, NegativeTime) {
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "x", "forward_s": 1, "backward_input_s": -0.5}]})"),
            "p.json: field 'layers[0].backward_input_s': expected a finite non-negative number, "
            "got -0.5");
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "x", "forward_s": 1,
                  "times_by_device": {"T4": {"forward_s": -2}}}]})"),
            "p.json: field 'layers[0].times_by_device.T4.forward_s': expected a finite "
            "non-negative number, got -2");
}

TEST(ProfileErrors, NonIntegerOrNonPositiveRepeat) {
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "x", "repeat": 2.5, "forward_s": 1}]})"),
            "p.json: field 'layers[0].repeat': expected an integer, got 2.5");
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "x", "repeat": 0, "forward_s": 1}]})"),
            "p.json: field 'layers[0].repeat': expected a positive integer, got 0");
}

TEST(ProfileErrors, RepeatsAreCappedBeforeLayersAreMade) {
  // 2^63 - 1 and 10^9 repeats used to end in std::bad_alloc.
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "x", "repeat": 9223372036854775807, "forward_s": 1}]})"),
            "p.json: field 'layers[0].repeat': expected an integer from 1 to 100000, got "
            "9223372036854775807");
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "x", "repeat": 60000, "forward_s": 1},
                 {"name": "y", "repeat": 60000, "forward_s": 1}]})"),
            "p.json: field 'layers[1].repeat': brings the profile to 120000 layers; at most "
            "100000 are supported");
}

TEST(ProfileErrors, SequenceLengthAndMicroBatchSizeAreCapped) {
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "seq_len": 1e9, "layers": [{"name": "x", "forward_s": 1}]})"),
            "p.json: field 'seq_len': expected an integer from 1 to 1048576, got 1000000000.0");
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "x", "micro_batch_size": 4611686018427387905, "forward_s": 1}]})"),
            "p.json: field 'layers[0].micro_batch_size': expected an integer from 1 to 65536, got "
            "4611686018427387905");
}

TEST(ProfileErrors, HugeByteCountsAreRejected) {
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "x", "forward_s": 1, "param_bytes": 1e300}]})"),
            "p.json: layer 'x' (layers[0]): measured.param_bytes must be at most 1e+18 bytes, got "
            "1e+300");
}

TEST(ProfileErrors, HugeTimesAreRejected) {
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "x", "forward_s": 1e300}]})"),
            "p.json: layer 'x' (layers[0]): measured.forward_s must be at most 1e+06 seconds, got "
            "1e+300");
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "x", "forward_s": 1, "times_by_device": {"A100-80GB":
      {"backward_input_s": 2e6}}}]})"),
            "p.json: layer 'x' (layers[0]): measured.times_by_device.A100-80GB.backward_input_s "
            "must be at most 1e+06 seconds, got 2e+06");
  EXPECT_EQ(error_for(one_entry(R"("forward_s": 1, "optimizer_s": 1e7)")),
            "p.json: layer 'x' (layers[0]): measured.optimizer_s must be at most 1e+06 seconds, "
            "got 1e+07");
}

TEST(ProfileErrors, DuplicateKeysAreRejected) {
  Result<Json> j = parse_json(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "x", "forward_s": 1, "forward_s": 2}]})",
                              "p.json");
  ASSERT_FALSE(j.is_ok());
  EXPECT_EQ(j.status().message(),
            "p.json: field 'layers[0].forward_s': duplicate key; a key may appear only once in an "
            "object");
}

TEST(ProfileErrors, MissingForwardTime) {
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "x", "forward_s": 1}, {"name": "y", "backward_input_s": 1}]})"),
            "p.json: field 'layers[1].forward_s': is missing");
}

TEST(ProfileErrors, MissingDevice) {
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1",
      "layers": [{"name": "x", "forward_s": 1}]})"),
            "p.json: field 'layers[0].measured_on': is missing: name the device type the times "
            "were measured on, here or once at the top level");
}

TEST(ProfileErrors, UnknownKey) {
  std::string message = error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "x", "forward_ms": 1}]})");
  EXPECT_EQ(message.rfind("p.json: field 'layers[0].forward_ms': unknown field; allowed fields "
                          "here: name, repeat, ",
                          0),
            0u)
      << message;
}

TEST(ProfileErrors, EmptyDeviceTimes) {
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "x", "forward_s": 1, "times_by_device": {"T4": {}}}]})"),
            "p.json: field 'layers[0].times_by_device.T4': expected at least one of forward_s, "
            "backward_input_s or backward_weight_s");
}

TEST(ProfileErrors, NamesThatCollideAfterExpansion) {
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM",
      "layers": [{"name": "mamba", "repeat": 2, "forward_s": 1},
                 {"name": "mamba.1", "forward_s": 1}]})"),
            "p.json: field 'layers[1].name': gives a layer the name 'mamba.1', which layers[0] "
            "also produces; entries sharing a name are numbered name.0, name.1, ..., so rename "
            "one of them");
}

TEST(ProfileErrors, NoLayers) {
  EXPECT_EQ(error_for(R"({"format": "motley.profile/1", "measured_on": "H100-SXM", "layers": []})"),
            "p.json: field 'layers': expected at least one layer");
}

// ---- the Nemotron-H-47B fixture (per-layer times published with AdaPtis) ----

class NemotronH47bProfile : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<Json> j = read_json_file(kData + "/profile/nemotron-h-47b.json");
    ASSERT_TRUE(j.is_ok()) << j.status().message();
    json_ = *j;
    Result<ModelSpec> m = profile_from_json(json_, "nemotron-h-47b.json");
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    model_ = *m;
  }
  Json json_;
  ModelSpec model_;
};

TEST_F(NemotronH47bProfile, HasTheHybridLayout) {
  ASSERT_EQ(model_.layers.size(), 100u);  // embedding + 98 hybrid layers + head
  EXPECT_EQ(model_.layers.front().name, "embedding");
  EXPECT_EQ(model_.layers.back().name, "head");
  std::map<std::string, int> kinds;
  std::string pattern;
  for (size_t i = 1; i + 1 < model_.layers.size(); ++i) {
    const std::string& name = model_.layers[i].name;
    std::string kind = name.substr(0, name.find('.'));
    ++kinds[kind];
    pattern += kind == "mamba" ? 'M' : kind == "mlp" ? '-' : '*';
  }
  EXPECT_EQ(kinds["mamba"], 45);
  EXPECT_EQ(kinds["mlp"], 48);
  EXPECT_EQ(kinds["attention"], 5);
  EXPECT_EQ(pattern,
            "M-M-M-M-M-M-M-M-M*-M-M-M-M-M-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-M-M---MM---"
            "M-M*-M-M-M-M-M-");
  EXPECT_EQ(model_.layers[1].name, "mamba.0");
  EXPECT_EQ(model_.layers[98].name, "mlp.47");
}

TEST_F(NemotronH47bProfile, CarriesThePublishedTimes) {
  double forward = 0, backward_input = 0, backward_weight = 0;
  for (const Layer& l : model_.layers) {
    EXPECT_EQ(l.measured->measured_on, "H100-SXM");
    forward += l.measured->times.forward->value();
    backward_input += l.measured->times.backward_input->value();
    backward_weight += l.measured->times.backward_weight->value();
  }
  // ms: embedding 1.35 F; 45 Mamba 3.73/5.68/1.62; 48 MLP 2.43/3.52/3.13; 5 attention
  // 1.12/0.68/0; head 10.35/12.10/2.94.
  EXPECT_NEAR(forward, 1e-3 * (1.35 + 45 * 3.73 + 48 * 2.43 + 5 * 1.12 + 10.35), 1e-12);
  EXPECT_NEAR(backward_input, 1e-3 * (45 * 5.68 + 48 * 3.52 + 5 * 0.68 + 12.10), 1e-12);
  EXPECT_NEAR(backward_weight, 1e-3 * (45 * 1.62 + 48 * 3.13 + 2.94), 1e-12);
  EXPECT_EQ(model_.layers[0].measured->times.backward_input, Seconds(0));
  // bf16 weights of one Mamba-2 layer of the published shape (438,432,512 parameters).
  EXPECT_EQ(model_.layers[1].measured->param_bytes, Bytes(2.0 * 438432512));
}

// The fixture stays in version 1 (that form must keep loading); the shipped example is the same
// profile as profile_to_json writes it now, in version 2.
TEST_F(NemotronH47bProfile, RoundTripsAndIsWrittenInCanonicalForm) {
  EXPECT_EQ(json_["format"], "motley.profile/1");
  Json written = profile_to_json(model_);
  EXPECT_EQ(written["format"], "motley.profile/2");
  EXPECT_EQ(written["layers"].size(), json_["layers"].size());  // folded the same way
  Result<ModelSpec> back = profile_from_json(written, "written.json");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(model_to_json(*back), model_to_json(model_));
  EXPECT_EQ(profile_to_json(*back), written);
}

TEST_F(NemotronH47bProfile, ShippedExampleIsTheSameProfile) {
  Result<Json> example = read_json_file(kSource + "/examples/profiles/nemotron-h-47b.json");
  ASSERT_TRUE(example.is_ok()) << example.status().message();
  EXPECT_EQ(*example, profile_to_json(model_));
}

}  // namespace
}  // namespace motley
