// A checkpoint's bytes without tensors (checkpoint_format.h): the tensor file's records and the
// manifest, encoded and decoded; the executor's tensor-level tests are in checkpoint_test.cc.
#include "motley/exec/checkpoint_format.h"

#include <gtest/gtest.h>

#include <cstring>

#include "motley/core/hash.h"

namespace motley {
namespace {

std::string float_bytes(std::initializer_list<float> values) {
  std::string out(values.size() * sizeof(float), '\0');
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

TEST(CheckpointFormat, RecordsDecodeToWhatWasEncodedAndReencodeToTheSameBytes) {
  const std::string weights = float_bytes({1.5f, -2.0f, 0.25f, 8.0f, 0.0f, -0.0f});
  const int64_t steps = 9;
  const std::string step_bytes(reinterpret_cast<const char*>(&steps), sizeof(steps));
  const std::vector<TensorRecord> records = {
      {"w", TensorDtype::kFloat32, {2, 3}, weights},
      {"w.step", TensorDtype::kInt64, {1}, step_bytes},
      {"empty", TensorDtype::kFloat32, {0, 4}, ""},
  };
  const std::string bytes = encode_tensor_file(17, records);
  auto decoded = decode_tensor_file(bytes, "layer-0.bin");
  ASSERT_TRUE(decoded.is_ok()) << decoded.status().message();
  EXPECT_EQ(decoded->step, 17);
  ASSERT_EQ(decoded->records.size(), 3u);
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(decoded->records[i].name, records[i].name);
    EXPECT_EQ(decoded->records[i].dtype, records[i].dtype);
    EXPECT_EQ(decoded->records[i].sizes, records[i].sizes);
    EXPECT_EQ(decoded->records[i].data, records[i].data);
  }
  EXPECT_EQ(encode_tensor_file(decoded->step, decoded->records), bytes);
}

TEST(CheckpointFormat, AnUnknownDtypeAndATrailingByteAreRefused) {
  std::string bytes = encode_tensor_file(1, {{"x", TensorDtype::kFloat32, {1}, float_bytes({1})}});
  const size_t body = bytes.size() - sizeof(uint64_t);
  auto reseal = [](std::string b) {  // the checksum recomputed, as a forger would
    const uint64_t h = fnv1a_64(std::string_view(b).substr(0, b.size() - sizeof(uint64_t)));
    std::memcpy(b.data() + b.size() - sizeof(h), &h, sizeof(h));
    return b;
  };
  std::string dtype = bytes;
  dtype[8 + 4 + 8 + 4 + 4 + 1] = 7;  // magic, version, step, count, name length, name
  EXPECT_EQ(decode_tensor_file(reseal(dtype), "f").status().message(),
            "f: tensor 'x' has dtype code 7; expected 0 (float32) or 1 (int64)");
  std::string longer = bytes.substr(0, body) + "!" + bytes.substr(body);
  EXPECT_EQ(decode_tensor_file(reseal(longer), "f").status().message(),
            "f: the records do not match the file's length");
  EXPECT_EQ(decode_tensor_file("", "f").status().message(),
            "f: not a motley tensor file (expected it to start with \"MOTLEYT1\")");
}

TEST(CheckpointFormat, ManifestRoundTripsAndNamesWhatIsWrong) {
  const CheckpointManifest manifest{12, "tiny-llama", "0123abcd", 6};
  const Json json = checkpoint_manifest_to_json(manifest);
  EXPECT_EQ(json["format"], kCheckpointFormat);
  auto back = checkpoint_manifest_from_json(json, "m.json");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->step, 12);
  EXPECT_EQ(back->model_name, "tiny-llama");
  EXPECT_EQ(back->model_hash, "0123abcd");
  EXPECT_EQ(back->layers, 6);

  auto error = [](Json j) { return checkpoint_manifest_from_json(j, "m.json").status().message(); };
  Json other = json;
  other["format"] = "motley.checkpoint/2";
  EXPECT_EQ(error(other), "m.json: field 'format': expected \"motley.checkpoint/1\"");
  Json negative = json;
  negative["step"] = -1;
  EXPECT_NE(error(negative).find("m.json: field 'step': "), std::string::npos);
  Json extra = json;
  extra["model"]["size"] = 3;
  EXPECT_NE(error(extra).find("m.json: field 'model.size': unknown field"), std::string::npos);
  EXPECT_EQ(error(Json::array()), "m.json: expected an object (a checkpoint manifest)");
}

TEST(CheckpointFormat, LayerFileNames) {
  EXPECT_EQ(checkpoint_layer_file(3), "layer-3.bin");
  EXPECT_TRUE(is_checkpoint_layer_file("layer-12.bin"));
  EXPECT_FALSE(is_checkpoint_layer_file("layer-.bin"));
  EXPECT_FALSE(is_checkpoint_layer_file("layer-x.bin"));
  EXPECT_FALSE(is_checkpoint_layer_file("manifest.json"));
}

}  // namespace
}  // namespace motley
