// RankCheckpoint: a checkpoint written by a tensor-parallel group holds whole tensors (and
// moments), so it loads under another degree — each rank keeping its rows — in both directions.
// Ranks run as threads over the in-process transport.
#include "rank_checkpoint.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

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
        saved[p.name] = CheckpointParameter{p.tensor, p.layers[0], p.slice, true};
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
    ASSERT_TRUE(c.save(dir, 7, state_of, t).is_ok());
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
    ASSERT_TRUE(c.save(dir, 1, state_of, t).is_ok());
  });
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files,
            (std::vector<std::string>{"layer-0.bin", "layer-1.bin", "layer-2.bin", "layer-3.bin",
                                      "layer-4.bin", "layer-5.bin", "manifest.json"}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace motley::internal
