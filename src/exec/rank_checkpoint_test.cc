// RankCheckpoint: a checkpoint written by a tensor-parallel group holds whole tensors (and
// moments), so it loads under another degree — each rank keeping its rows — in both directions.
// Ranks run as threads over the in-process transport.
#include "rank_checkpoint.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "motley/core/json.h"
#include "motley/exec/checkpoint.h"
#include "test_util.h"

namespace motley::internal {
namespace {

constexpr int64_t kSeqLen = 16;

// One tensor-parallel group of `degree` ranks holding every layer of `model`.
struct Group {
  explicit Group(int degree) : network(degree), stores(degree), params(degree) {}
  InProcessNetwork network;
  std::vector<ParameterStore> stores;
  std::vector<std::vector<StageParameter>> params;  // per rank
};

// Runs `body(rank, checkpoint, transport)` on every rank of a group of `degree` that built
// `model` from seed 5 and multiplied every weight by `scale`.
void on_group(const ModelSpec& model, int degree, float scale,
              const std::function<void(int, const RankCheckpoint&, Transport&, Group&)>& body) {
  Group g(degree);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < degree; ++rank) {
    threads.emplace_back([&, rank] {
      auto transport = g.network.endpoint(rank);
      const std::vector<int> ranks = [degree] {
        std::vector<int> r(degree);
        for (int i = 0; i < degree; ++i) r[i] = i;
        return r;
      }();
      StageModuleOptions options{5, kSeqLen, {}};
      options.tensor_parallel = {rank, degree, [&](at::Tensor& t) {
                                   ASSERT_TRUE(transport->all_reduce_sum({t}, ranks).is_ok());
                                 }};
      auto stage = make_transformer_stage(model, 0, static_cast<int>(model.layers.size()), options,
                                          g.stores[rank]);
      ASSERT_TRUE(stage.is_ok()) << stage.status().message();
      std::map<std::string, CheckpointParameter> saved;
      for (const StageParameter& p : (*stage)->parameters()) {
        at::NoGradGuard no_grad;
        p.tensor.mul_(scale);
        saved[p.name] = CheckpointParameter{p.tensor, p.layers[0], p.slice, true, {}};
        g.params[rank].push_back(p);
      }
      const RankCheckpoint checkpoint(model, rank, RankPlace{0, 0, rank, degree, rank}, ranks,
                                      std::move(saved));
      body(rank, checkpoint, *transport, g);
    });
  }
  for (auto& t : threads) t.join();
}

std::string temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("motley-rank-checkpoint-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// The state saved with every parameter: step 4, moments derived from its value.
std::optional<AdamWStep::State> state_of(const at::Tensor& p) {
  return AdamWStep::State{4, p.detach() * 0.5, p.detach() * p.detach()};
}

// Saves from a group of `from` ranks (weights x 3) and loads into one of `to` ranks (fresh
// weights): every rank must end with 3 x its fresh rows, and their moments.
void round_trip(int from, int to) {
  testing::single_threaded();
  const ModelSpec model = testing::preset("tiny-llama");
  const std::string dir = temp_dir(std::to_string(from) + "-" + std::to_string(to));
  on_group(model, from, 3.0f, [&](int, const RankCheckpoint& c, Transport& t, Group&) {
    ASSERT_TRUE(c.save(dir, 7, /*keep=*/1, state_of, t).is_ok());
  });
  on_group(model, to, 1.0f, [&](int rank, const RankCheckpoint& c, Transport&, Group& g) {
    std::map<const at::TensorImpl*, AdamWStep::State> restored;
    std::vector<at::Tensor> fresh;
    for (const StageParameter& p : g.params[rank]) fresh.push_back(p.tensor.detach().clone());
    auto step = c.load(dir, [&](const at::Tensor& p, const AdamWStep::State& s) {
      restored[p.unsafeGetTensorImpl()] = s;
    });
    ASSERT_TRUE(step.is_ok()) << step.status().message();
    EXPECT_EQ(*step, 7);
    for (size_t i = 0; i < fresh.size(); ++i) {
      const StageParameter& p = g.params[rank][i];
      const at::Tensor want = fresh[i] * 3.0f;
      EXPECT_TRUE(at::equal(p.tensor, want)) << p.name << " on rank " << rank;
      const auto s = restored.find(p.tensor.unsafeGetTensorImpl());
      ASSERT_NE(s, restored.end()) << p.name;
      EXPECT_EQ(s->second.step, 4);
      EXPECT_TRUE(at::equal(s->second.exp_avg, want * 0.5)) << p.name;
      EXPECT_TRUE(at::equal(s->second.exp_avg_sq, want * want)) << p.name;
    }
  });
  std::filesystem::remove_all(dir);
}

TEST(RankCheckpoint, RoundTripsBetweenDegreesInOneFilePerLayer) {
  round_trip(2, 1);  // a tensor-parallel save loads unsplit
  round_trip(1, 2);  // and an unsplit one into a tensor-parallel group
  // The group's first rank writes each layer's file, rank 0 the manifest.
  const ModelSpec model = testing::preset("tiny-llama");
  const std::string dir = temp_dir("files");
  on_group(model, 2, 1.0f, [&](int, const RankCheckpoint& c, Transport& t, Group&) {
    ASSERT_TRUE(c.save(dir, 1, /*keep=*/1, state_of, t).is_ok());
  });
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/step-00000001")) {
    files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files,
            (std::vector<std::string>{"layer-0.bin", "layer-1.bin", "layer-2.bin", "layer-3.bin",
                                      "layer-4.bin", "layer-5.bin", "manifest.json"}));
  std::filesystem::remove_all(dir);
}

// The message loading `dir` into a fresh single-rank group gives, or "" when it loads; a load
// that fails must leave every parameter as it was.
std::string load_refusal(const ModelSpec& model, const std::string& dir) {
  std::string message;
  on_group(model, 1, 1.0f, [&](int, const RankCheckpoint& c, Transport&, Group& g) {
    std::vector<at::Tensor> before;
    for (const StageParameter& p : g.params[0]) before.push_back(p.tensor.detach().clone());
    auto step = c.load(dir, [](const at::Tensor&, const AdamWStep::State&) {});
    message = step.is_ok() ? "" : step.status().message();
    for (size_t i = 0; !step.is_ok() && i < before.size(); ++i) {
      EXPECT_TRUE(at::equal(g.params[0][i].tensor, before[i])) << g.params[0][i].name;
    }
  });
  return message;
}

// A layer file with a checksum that matches but tensors that are not the model's — a moment of
// another shape, a step count of another dtype, a moment missing — is refused naming the file
// and the tensor, and before any parameter is overwritten.
TEST(RankCheckpoint, ForgedTensorsAreRefusedNamingTheFileAndTheTensor) {
  testing::single_threaded();
  const ModelSpec model = testing::preset("tiny-llama");
  const std::string dir = temp_dir("forged");
  on_group(model, 1, 3.0f, [&](int, const RankCheckpoint& c, Transport& t, Group&) {
    ASSERT_TRUE(c.save(dir, 7, /*keep=*/1, state_of, t).is_ok());
  });
  const std::string path = dir + "/step-00000007/layer-1.bin";
  const Result<TensorFile> good = read_tensor_file(path);
  ASSERT_TRUE(good.is_ok()) << good.status().message();
  ASSERT_GE(good->tensors.size(), 4u);
  const std::string param = good->tensors[0].name;
  auto forged = [&](const std::function<void(TensorFile&)>& edit) {
    TensorFile file = *good;
    edit(file);
    EXPECT_TRUE(write_tensor_file(path, file).is_ok());
    return load_refusal(model, dir);
  };
  const std::vector<int64_t> shape = good->tensors[0].tensor.sizes().vec();
  const std::string expected = fmt::format("float32 of shape [{}]", fmt::join(shape, ", "));
  EXPECT_EQ(forged([](TensorFile& f) { f.tensors[1].tensor = at::zeros({3}); }),
            fmt::format("{}: tensor '{}.exp_avg': expected {}, found float32 of shape [3]", path,
                        param, expected));
  const int64_t elements = good->tensors[0].tensor.numel();
  EXPECT_EQ(forged([](TensorFile& f) {
              f.tensors[0].tensor = f.tensors[0].tensor.reshape({-1, 1});
            }),
            fmt::format("{}: tensor '{}': expected {}, found float32 of shape [{}, 1]", path, param,
                        expected, elements));
  EXPECT_EQ(forged([](TensorFile& f) { f.tensors[3].tensor = at::ones({1}); }),
            fmt::format("{}: tensor '{}.step': expected int64 of shape [1], found float32 of "
                        "shape [1]",
                        path, param));
  EXPECT_EQ(forged([](TensorFile& f) { f.tensors[3].tensor = at::full({1}, -2, at::kLong); }),
            fmt::format("{}: tensor '{}.step': expected a step count >= 0, found -2", path, param));
  EXPECT_EQ(forged([](TensorFile& f) { f.tensors.erase(f.tensors.begin() + 2); }),
            fmt::format("{}: no tensor '{}.exp_avg_sq' ({} expected)", path, param, expected));
  EXPECT_EQ(forged([](TensorFile& f) { f.tensors.erase(f.tensors.begin()); }),
            fmt::format("{}: no tensor '{}' ({} expected)", path, param, expected));
  std::filesystem::remove_all(dir);
}

// The manifest's layer count must be the model's.
TEST(RankCheckpoint, AManifestOfAnotherLayerCountIsRefused) {
  testing::single_threaded();
  const ModelSpec model = testing::preset("tiny-llama");
  const std::string dir = temp_dir("manifest");
  on_group(model, 1, 1.0f, [&](int, const RankCheckpoint& c, Transport& t, Group&) {
    ASSERT_TRUE(c.save(dir, 2, /*keep=*/1, state_of, t).is_ok());
  });
  const std::string path = dir + "/step-00000002/manifest.json";
  Result<Json> manifest = read_json_file(path);
  ASSERT_TRUE(manifest.is_ok());
  (*manifest)["layers"] = 99;
  std::ofstream(path) << manifest->dump(2) << "\n";
  EXPECT_EQ(load_refusal(model, dir),
            path + ": field 'layers': model 'tiny-llama' has 6 layers, the manifest says 99");
  // A manifest of another step than its directory's (files moved by hand).
  (*manifest)["layers"] = 6;
  (*manifest)["step"] = 3;
  std::ofstream(path) << manifest->dump(2) << "\n";
  EXPECT_EQ(load_refusal(model, dir),
            path + ": field 'step': the manifest says 3, its directory is step 2's");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace motley::internal
