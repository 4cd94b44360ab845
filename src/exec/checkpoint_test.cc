#include "motley/exec/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "motley/core/hash.h"
#include "motley/core/json.h"
#include "motley/exec/executor.h"
#include "support/run_binary.h"
#include "test_util.h"

namespace motley {
namespace {

using testing::exec_options;
using testing::preset;
using testing::relative_difference;
using testing::uniform_plan;

// A fresh directory under the system's temporary directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (std::string("motley-") + info->test_suite_name() + "-" + info->name() + "-" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

TEST(TensorFile, RoundTripKeepsNamesStepShapesAndBits) {
  TempDir dir;
  TensorFile file;
  file.step = 42;
  file.tensors = {{"a.weight", at::randn({3, 4})},
                  {"a.weight.step", at::full({1}, int64_t{7}, at::kLong)},
                  {"empty", at::zeros({0}, at::kFloat)}};
  ASSERT_TRUE(write_tensor_file(dir.file("t.bin"), file).is_ok());
  auto back = read_tensor_file(dir.file("t.bin"));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->step, 42);
  ASSERT_EQ(back->tensors.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back->tensors[i].name, file.tensors[i].name);
    EXPECT_TRUE(at::equal(back->tensors[i].tensor, file.tensors[i].tensor));
  }
  // 8 magic + 4 version + 8 step + 4 count, then 4 + 8 + 1 + 4 + 16 + 8 + 48 for a.weight,
  // 4 + 13 + 1 + 4 + 8 + 8 + 8 for the step, 4 + 5 + 1 + 4 + 8 + 8 + 0 for empty, 8 checksum.
  EXPECT_EQ(read_bytes(dir.file("t.bin")).size(), 24u + 89u + 46u + 30u + 8u);
}

TEST(TensorFile, CorruptionAndTruncationAreCaught) {
  TempDir dir;
  const std::string path = dir.file("t.bin");
  ASSERT_TRUE(write_tensor_file(path, TensorFile{1, {{"x", at::ones({16})}}}).is_ok());
  const std::string good = read_bytes(path);

  std::string flipped = good;
  flipped[40] ^= 0x01;
  write_bytes(path, flipped);
  EXPECT_EQ(read_tensor_file(path).status().message(),
            path + ": checksum mismatch: the file is corrupt or truncated");

  write_bytes(path, good.substr(0, good.size() - 3));
  EXPECT_EQ(read_tensor_file(path).status().code(), StatusCode::kInvalidArgument);

  write_bytes(path, "hello world, not a tensor file");
  EXPECT_EQ(read_tensor_file(path).status().message(),
            path + ": not a motley tensor file (expected it to start with \"MOTLEYT1\")");

  EXPECT_EQ(read_tensor_file(dir.file("missing.bin")).status().code(), StatusCode::kNotFound);
}

// The offset of the first size of the only tensor of a file written for one tensor named "x".
constexpr size_t kFirstSizeOffset = 24 + 4 + 1 + 1 + 4;

// `bytes` with its checksum recomputed, as a forger would.
std::string with_checksum(std::string bytes) {
  const std::string body = bytes.substr(0, bytes.size() - sizeof(uint64_t));
  const uint64_t sum = fnv1a_64(body);
  std::memcpy(bytes.data() + body.size(), &sum, sizeof(sum));
  return bytes;
}

// A record whose shape does not fill its bytes — a shape swapped for a larger one, or 2^40
// elements declared over a few bytes — is refused naming the tensor, before any allocation.
TEST(TensorFile, AForgedShapeIsRefusedBeforeAllocating) {
  TempDir dir;
  const std::string path = dir.file("t.bin");
  ASSERT_TRUE(write_tensor_file(path, TensorFile{1, {{"x", at::ones({4, 4})}}}).is_ok());
  const std::string good = read_bytes(path);
  auto forge = [&](int64_t rows, int64_t cols) {
    std::string bytes = good;
    std::memcpy(bytes.data() + kFirstSizeOffset, &rows, sizeof(rows));
    std::memcpy(bytes.data() + kFirstSizeOffset + sizeof(rows), &cols, sizeof(cols));
    write_bytes(path, with_checksum(bytes));
    return read_tensor_file(path).status();
  };
  const Status huge = forge(int64_t{1} << 20, int64_t{1} << 20);
  EXPECT_EQ(huge.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(huge.message(), path +
                                ": tensor 'x' has shape [1048576, 1048576] of 4-byte elements, "
                                "which does not fill its 64 bytes");
  EXPECT_EQ(forge(8, 4).message(),
            path +
                ": tensor 'x' has shape [8, 4] of 4-byte elements, which does not fill its "
                "64 bytes");
  EXPECT_EQ(forge(-4, -4).message(),
            path +
                ": tensor 'x' has shape [-4, -4] of 4-byte elements, which does not fill its "
                "64 bytes");
  // Sizes whose product wraps around 2^64 to 16.
  EXPECT_EQ(forge(int64_t{1} << 62, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(forge(2, 8).is_ok());  // another shape of the same bytes is well formed

  std::string many_dimensions = good;
  const uint32_t rank = 1000;
  std::memcpy(many_dimensions.data() + kFirstSizeOffset - sizeof(rank), &rank, sizeof(rank));
  write_bytes(path, with_checksum(many_dimensions));
  EXPECT_EQ(read_tensor_file(path).status().message(),
            path + ": tensor 'x' declares 1000 dimensions; at most 8 are allowed");
}

// Runs `body(rank, executor)` for every rank of `plan` on its own thread.
void run_executors(const Plan& plan, const ModelSpec& model, const TokenStream& tokens,
                   const std::function<void(int, RankExecutor&)>& body) {
  testing::single_threaded();
  const int world = testing::world_size(plan);
  InProcessNetwork network(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      auto transport = network.endpoint(rank);
      auto executor = RankExecutor::create(exec_options(), plan, model, tokens, *transport);
      ASSERT_TRUE(executor.is_ok()) << executor.status().message();
      body(rank, **executor);
    });
  }
  for (auto& t : threads) t.join();
}

// Replica 0's parameters after running `steps` steps, optionally saving after `save_after` and
// loading from `load_from` first.
std::map<std::string, at::Tensor> train(const Plan& plan, const ModelSpec& model,
                                        const TokenStream& tokens, int steps,
                                        const std::string& save_dir = "", int save_after = -1,
                                        const std::string& load_from = "") {
  std::map<std::string, at::Tensor> params;
  std::mutex mu;
  run_executors(plan, model, tokens, [&](int rank, RankExecutor& executor) {
    if (!load_from.empty()) {
      Status loaded = executor.load_checkpoint(load_from);
      ASSERT_TRUE(loaded.is_ok()) << loaded.message();
    }
    while (executor.steps_done() < steps) {
      auto result = executor.step();
      ASSERT_TRUE(result.is_ok()) << result.status().message();
      if (executor.steps_done() == save_after) {
        Status saved = executor.save_checkpoint(save_dir);
        ASSERT_TRUE(saved.is_ok()) << saved.message();
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    if (rank < static_cast<int>(plan.replicas[0].groups.size())) {
      for (const NamedTensor& p : executor.parameters()) params[p.name] = p.tensor;
    }
  });
  return params;
}

TEST(Checkpoint, ResumeEqualsUninterruptedTraining) {
  const ModelSpec model = preset("tiny-gemma");  // a tied head: one matrix on two ranks
  const Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 3, 1, 3, 2});
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  TempDir dir;
  const auto uninterrupted = train(plan, model, *tokens, 3);
  train(plan, model, *tokens, 2, dir.path(), /*save_after=*/2);
  // The step's own directory, which the pointer names, with one file per layer (embedding, four
  // blocks, the head's norm) and the manifest.
  EXPECT_EQ(read_bytes(dir.file("latest")), "step-00000002\n");
  const std::string saved = dir.file("step-00000002");
  for (int layer = 0; layer < 6; ++layer) {
    EXPECT_TRUE(std::filesystem::exists(saved + "/layer-" + std::to_string(layer) + ".bin"));
  }
  auto manifest = read_json_file(saved + "/manifest.json");
  ASSERT_TRUE(manifest.is_ok());
  EXPECT_EQ((*manifest)["step"], 2);
  EXPECT_EQ((*manifest)["format"], "motley.checkpoint/1");

  const auto resumed = train(plan, model, *tokens, 3, "", -1, dir.path());
  ASSERT_EQ(resumed.size(), uninterrupted.size());
  for (const auto& [name, tensor] : uninterrupted) {
    EXPECT_TRUE(at::equal(resumed.at(name), tensor)) << name;
  }
}

TEST(Checkpoint, ResumesUnderAnotherPlanOfTheSameModel) {
  // Saved by three 1F1B stages in two replicas of 3 micro-batches; resumed by ZB-V on two
  // groups, one replica of 6: the same global batch, another partition and placement.
  const ModelSpec model = preset("tiny-llama");
  const Plan first = uniform_plan(model, {ScheduleKind::k1f1b, 3, 1, 3, 2});
  const Plan second = uniform_plan(model, {ScheduleKind::kZbV, 2, 2, 6, 1});
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  TempDir dir;
  const auto uninterrupted = train(first, model, *tokens, 3);
  train(first, model, *tokens, 2, dir.path(), /*save_after=*/2);
  const auto resumed = train(second, model, *tokens, 3, "", -1, dir.path());
  for (const auto& [name, tensor] : uninterrupted) {
    EXPECT_LT(relative_difference(resumed.at(name), tensor), 1e-5) << name;
  }
}

TEST(Checkpoint, RejectsAnotherModelAndAMixedSave) {
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 1});
  auto tokens = TokenStream::from_text(synthetic_corpus(4096, 3), "corpus");
  TempDir dir;
  train(plan, model, *tokens, 1, dir.path(), /*save_after=*/1);

  // A layer file from another step than the manifest's (files mixed by hand).
  const std::string layer_path = dir.file("step-00000001/layer-2.bin");
  auto layer = read_tensor_file(layer_path);
  ASSERT_TRUE(layer.is_ok());
  layer->step = 7;
  ASSERT_TRUE(write_tensor_file(layer_path, *layer).is_ok());
  run_executors(plan, model, *tokens, [&](int rank, RankExecutor& executor) {
    Status status = executor.load_checkpoint(dir.path());
    if (rank == 0) {
      EXPECT_EQ(status.message(), layer_path +
                                      ": holds step 7 but the manifest says step 1 (an "
                                      "interrupted save?)");
    }
  });

  ModelSpec other = model;
  other.name = "tiny-llama-renamed";
  const Plan other_plan = uniform_plan(other, {ScheduleKind::k1f1b, 2, 1, 2, 1});
  run_executors(other_plan, other, *tokens, [&](int, RankExecutor& executor) {
    Status status = executor.load_checkpoint(dir.path());
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("field 'model.hash': the checkpoint is of another model than "
                                    "'tiny-llama-renamed'"),
              std::string::npos)
        << status.message();
  });
}

// A save removes what an earlier, killed save left, never a checkpoint, and keeps the newest.
TEST(Checkpoint, ASaveRemovesAKilledSavesLeftoversAndKeepsTheNewest) {
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 1});
  auto tokens = TokenStream::from_text(synthetic_corpus(4096, 3), "corpus");
  TempDir dir;
  std::filesystem::create_directory(dir.file(".step-00000005.partial"));
  write_bytes(dir.file(".step-00000005.partial/layer-2.bin"), "half a layer");
  write_bytes(dir.file(".latest.tmp.Ab12Cd"), "step-");
  run_executors(plan, model, *tokens, [&](int, RankExecutor& executor) {
    for (int step = 1; step <= 3; ++step) {
      ASSERT_TRUE(executor.step().is_ok());
      Status saved = executor.save_checkpoint(dir.path(), /*keep=*/2);
      ASSERT_TRUE(saved.is_ok()) << saved.message();
    }
  });
  EXPECT_EQ(test_support::directory_entries(dir.path()),
            (std::vector<std::string>{"latest", "step-00000002", "step-00000003"}));
  for (int layer = 0; layer < 6; ++layer) {
    auto file = read_tensor_file(dir.file("step-00000003/" + checkpoint_layer_file(layer)));
    ASSERT_TRUE(file.is_ok()) << layer;
    EXPECT_EQ(file->step, 3);
  }
  EXPECT_EQ((*read_json_file(dir.file("step-00000003/manifest.json")))["step"], 3);
}

}  // namespace
}  // namespace motley
