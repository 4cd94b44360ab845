// The checkpoint directory (checkpoint_store.h): step directories, the pointer, what a killed
// save leaves and how it is cleaned, which checkpoints a save keeps; and the kill matrix: a
// sequence of saves killed (SIGKILL, in a forked child) at each of its crash points in turn,
// after which the pointer always names a whole checkpoint of the last step saved before the
// kill and the directory takes the next save. The saves here write synthetic layer files
// through the same calls as the executor's (rank_checkpoint.cc), without tensors.
#include "motley/exec/checkpoint_store.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "motley/core/crash_point.h"
#include "motley/core/output_files.h"
#include "motley/exec/checkpoint_format.h"
#include "support/run_binary.h"

namespace motley {
namespace {

namespace fs = std::filesystem;
using test_support::directory_entries;
using test_support::TempDir;

constexpr int kLayers = 3;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Layer `layer`'s file of a synthetic checkpoint of `step`: one int64 tensor holding both.
std::string layer_bytes(int64_t step, int layer) {
  const int64_t values[2] = {step, layer};
  const std::string data(reinterpret_cast<const char*>(values), sizeof(values));
  return encode_tensor_file(step, {TensorRecord{"w", TensorDtype::kInt64, {2}, data}});
}

// A save of `step` as the executor's: begun, each layer file written on its own, the manifest,
// finished.
Status save(const std::string& dir, int64_t step, int keep) {
  MOTLEY_RETURN_IF_ERROR(begin_checkpoint_save(dir, step));
  const std::string partial = checkpoint_partial_directory(dir, step);
  for (int layer = 0; layer < kLayers; ++layer) {
    OutputFiles file;
    file.add(partial + "/" + checkpoint_layer_file(layer), layer_bytes(step, layer));
    MOTLEY_RETURN_IF_ERROR(file.commit());
  }
  OutputFiles manifest;
  manifest.add(
      partial + "/" + std::string(kCheckpointManifest),
      checkpoint_manifest_to_json(CheckpointManifest{step, "synthetic", "0", kLayers}).dump(2));
  MOTLEY_RETURN_IF_ERROR(manifest.commit());
  return finish_checkpoint_save(dir, step, keep);
}

// The step of the whole checkpoint at `path`, or a description of what is wrong with it.
Result<int64_t> whole_checkpoint_step(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(Json json, read_json_file(path + "/" + std::string(kCheckpointManifest)));
  MOTLEY_ASSIGN_OR_RETURN(CheckpointManifest manifest,
                          checkpoint_manifest_from_json(json, "manifest"));
  for (int layer = 0; layer < kLayers; ++layer) {
    const std::string file = path + "/" + checkpoint_layer_file(layer);
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    if (bytes != layer_bytes(manifest.step, layer)) {
      return invalid_argument(file + ": not the layer of step " + std::to_string(manifest.step));
    }
  }
  return manifest.step;
}

TEST(CheckpointStore, StepDirectoriesAreNamedAndParsed) {
  EXPECT_EQ(checkpoint_step_name(12), "step-00000012");
  EXPECT_EQ(checkpoint_step_name(123456789012), "step-123456789012");
  EXPECT_EQ(checkpoint_step_of("step-00000012"), 12);
  EXPECT_EQ(checkpoint_step_of("step-7"), 7);
  EXPECT_EQ(checkpoint_step_of("step-123456789012"), 123456789012);
  for (const char* other : {"step-", "step-1a", "step--1", "step-+1", "steps-1", "step-1 ",
                            "step-99999999999999999999", ".step-1.partial", "latest"}) {
    EXPECT_EQ(checkpoint_step_of(other), std::nullopt) << other;
  }
  EXPECT_EQ(checkpoint_partial_directory("/d", 3), "/d/.step-00000003.partial");
}

TEST(CheckpointStore, FindsThePointersCheckpointOrAManifestAndNamesWhatIsWrong) {
  TempDir dir("store-find");
  const std::string d = dir.path();
  Result<std::string> none = find_checkpoint(d);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(),
            d + ": no checkpoint here (no 'latest' pointer and no manifest.json)");
  EXPECT_EQ(find_checkpoint(d + "/missing").status().code(), StatusCode::kNotFound);

  // The layout before step directories: one checkpoint in the directory itself.
  write_text(dir.file("manifest.json"), "{}");
  EXPECT_EQ(find_checkpoint(d).value(), d);

  ASSERT_TRUE(save(d, 4, 2).is_ok());
  EXPECT_EQ(find_checkpoint(d).value(), d + "/step-00000004");  // the pointer comes first
  EXPECT_EQ(whole_checkpoint_step(d + "/step-00000004").value(), 4);

  for (const std::string& text : {std::string("step-4x\n"), std::string(""),
                                  std::string("../elsewhere"), std::string(300, 's')}) {
    write_text(dir.file("latest"), text);
    Result<std::string> bad = find_checkpoint(d);
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(
        bad.status().message().rfind(
            d + "/latest: expected the name of a step directory (such as 'step-00000000')", 0),
        0u)
        << bad.status().message();
  }
  write_text(dir.file("latest"), "step-00000009\n");
  EXPECT_EQ(find_checkpoint(d).status().message(),
            d + "/latest: names 'step-00000009', which is not a directory");
}

TEST(CheckpointStore, ASaveKeepsTheNewestAndLeavesNewerStepsAlone) {
  TempDir dir("store-keep");
  const std::string d = dir.path();
  for (int64_t step = 1; step <= 5; ++step) ASSERT_TRUE(save(d, step, 2).is_ok());
  EXPECT_EQ(checkpoint_steps(d), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(directory_entries(d),
            (std::vector<std::string>{"latest", "step-00000004", "step-00000005"}));
  ASSERT_TRUE(save(d, 6, 3).is_ok());
  EXPECT_EQ(checkpoint_steps(d), (std::vector<int64_t>{4, 5, 6}));
  ASSERT_TRUE(save(d, 7, 1).is_ok());
  EXPECT_EQ(checkpoint_steps(d), (std::vector<int64_t>{7}));
  // Resumed from an older step (a newer one the pointer never named stays), then the same step
  // saved again: the new copy replaces the old one.
  ASSERT_TRUE(save(d, 3, 1).is_ok());
  EXPECT_EQ(checkpoint_steps(d), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(find_checkpoint(d).value(), d + "/step-00000003");
  ASSERT_TRUE(save(d, 3, 1).is_ok());
  EXPECT_EQ(directory_entries(d),
            (std::vector<std::string>{"latest", "step-00000003", "step-00000007"}));
  EXPECT_EQ(whole_checkpoint_step(d + "/step-00000003").value(), 3);
}

TEST(CheckpointStore, CleaningRemovesOnlyAKilledSavesLeftovers) {
  TempDir dir("store-clean");
  const std::string d = dir.path();
  ASSERT_TRUE(save(d, 2, 2).is_ok());
  const std::vector<std::string> leftovers = {
      ".step-00000003.partial", ".step-00000001.removing",   ".step-00000002.replaced",
      ".latest.tmp.Ab12Cd",     ".manifest.json.tmp.zz9ZZ9", ".layer-12.bin.tmp.000000"};
  const std::vector<std::string> kept = {
      "latest",          "notes.txt",    ".notes.txt.tmp.Ab12Cd", ".layer-x.bin.tmp.Ab12Cd",
      ".step-x.partial", "step-00000002"};
  for (const std::string& name : leftovers) {
    if (name.find(".step-") == 0) {
      fs::create_directory(dir.file(name));
      write_text(dir.file(name + "/layer-0.bin"), "half a layer");
    } else {
      write_text(dir.file(name), "x");
    }
  }
  write_text(dir.file("notes.txt"), "x");
  write_text(dir.file(".notes.txt.tmp.Ab12Cd"), "x");
  write_text(dir.file(".layer-x.bin.tmp.Ab12Cd"), "x");
  fs::create_directory(dir.file(".step-x.partial"));
  ASSERT_TRUE(clean_checkpoint_directory(d).is_ok());
  std::vector<std::string> expected = kept;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(directory_entries(d), expected);
  EXPECT_EQ(whole_checkpoint_step(find_checkpoint(d).value()).value(), 2);
  EXPECT_TRUE(clean_checkpoint_directory(d + "/missing").is_ok());

  // A replacement killed between its renames: the pointer's step set aside is found, then put
  // back by cleaning.
  fs::rename(dir.file("step-00000002"), dir.file(".step-00000002.replaced"));
  EXPECT_EQ(find_checkpoint(d).value(), d + "/.step-00000002.replaced");
  ASSERT_TRUE(clean_checkpoint_directory(d).is_ok());
  EXPECT_EQ(find_checkpoint(d).value(), d + "/step-00000002");
  EXPECT_EQ(whole_checkpoint_step(d + "/step-00000002").value(), 2);
}

// --- The kill matrix.

// The saves killed in turn: a first checkpoint, two more (the third prunes the first), and the
// last step saved again (a replacement).
const std::vector<int64_t> kSavedSteps = {1, 2, 3, 3};
constexpr int kKept = 2;

Status save_all(const std::string& dir) {
  for (int64_t step : kSavedSteps) MOTLEY_RETURN_IF_ERROR(save(dir, step, kKept));
  return Status::ok();
}

std::vector<std::string>* recorded_points = nullptr;
void record_point(std::string_view done) { recorded_points->emplace_back(done); }

int points_before_kill = 0;
void kill_at_chosen_point(std::string_view) {
  if (--points_before_kill == 0) std::raise(SIGKILL);
}

TEST(CheckpointStore, AKillAtAnyCrashPointLeavesTheLastSavedCheckpointWhole) {
  // Every crash point of the sequence, in order, and the step of the checkpoint the pointer
  // names after each: a point is passed once its operation is done.
  TempDir dry_run("store-points");
  std::vector<std::string> points;
  recorded_points = &points;
  set_crash_point_hook(&record_point);
  std::vector<std::optional<int64_t>> pointed_after;  // per point
  std::optional<int64_t> pointed;
  for (int64_t step : kSavedSteps) {
    const size_t before = points.size();
    ASSERT_TRUE(save(dry_run.path(), step, kKept).is_ok());
    for (size_t i = before; i < points.size(); ++i) {
      if (points[i] == "renamed " + dry_run.file("latest")) pointed = step;
      pointed_after.push_back(pointed);
    }
  }
  set_crash_point_hook(nullptr);
  ASSERT_GE(points.size(), 40u);  // per save: its directory, 4 files, renames, pointer, prune

  for (size_t kill_at = 1; kill_at <= points.size(); ++kill_at) {
    SCOPED_TRACE("killed after '" + points[kill_at - 1] + "' (crash point " +
                 std::to_string(kill_at) + ")");
    TempDir dir("store-kill");
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      points_before_kill = static_cast<int>(kill_at);
      set_crash_point_hook(&kill_at_chosen_point);
      ::_exit(save_all(dir.path()).is_ok() ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;

    const std::optional<int64_t> expected = pointed_after[kill_at - 1];
    Result<std::string> found = find_checkpoint(dir.path());
    if (!expected) {
      EXPECT_EQ(found.status().code(), StatusCode::kNotFound) << found.status().message();
    } else {
      ASSERT_TRUE(found.is_ok()) << found.status().message();
      Result<int64_t> step = whole_checkpoint_step(*found);
      ASSERT_TRUE(step.is_ok()) << step.status().message();
      EXPECT_EQ(*step, *expected);
    }
    // Cleaned, the directory holds the pointer and whole step directories only, and takes the
    // next save.
    ASSERT_TRUE(clean_checkpoint_directory(dir.path()).is_ok());
    for (const std::string& name : directory_entries(dir.path())) {
      if (name == "latest") continue;
      ASSERT_TRUE(checkpoint_step_of(name).has_value()) << name;
      EXPECT_TRUE(whole_checkpoint_step(dir.file(name)).is_ok()) << name;
    }
    if (expected) {
      EXPECT_EQ(whole_checkpoint_step(find_checkpoint(dir.path()).value()).value(), *expected);
    }
    ASSERT_TRUE(save(dir.path(), 9, kKept).is_ok());
    EXPECT_EQ(whole_checkpoint_step(find_checkpoint(dir.path()).value()).value(), 9);
    EXPECT_LE(checkpoint_steps(dir.path()).size(), static_cast<size_t>(kKept));
  }
}

}  // namespace
}  // namespace motley
