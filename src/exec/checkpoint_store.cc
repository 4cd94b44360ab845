#include "motley/exec/checkpoint_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>

#include "motley/core/crash_point.h"
#include "motley/core/output_files.h"
#include "motley/exec/checkpoint_format.h"

namespace motley {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kStepPrefix = "step-";
// The hidden names of a step directory on its way in or out.
constexpr std::string_view kPartialSuffix = ".partial";    // a save writing into it
constexpr std::string_view kReplacedSuffix = ".replaced";  // set aside while a save replaces it
constexpr std::string_view kRemovingSuffix = ".removing";  // a prune removing it
// A pointer longer than this is not one of ours; it is not read further.
constexpr size_t kMaxPointerBytes = 256;

std::string hidden_name(int64_t step, std::string_view suffix) {
  return fmt::format(".{}{}", checkpoint_step_name(step), suffix);
}

// The step of a hidden name ".step-N<suffix>", nullopt for any other.
std::optional<int64_t> hidden_step(std::string_view name, std::string_view suffix) {
  if (name.size() < 1 + suffix.size() || name.front() != '.' ||
      name.substr(name.size() - suffix.size()) != suffix) {
    return std::nullopt;
  }
  return checkpoint_step_of(name.substr(1, name.size() - 1 - suffix.size()));
}

std::string pointer_path(const std::string& dir) {
  return (fs::path(dir) / kCheckpointPointer).string();
}

Status io_failure(const fs::path& path, std::string_view what, const std::error_code& error) {
  return io_error(fmt::format("{}: cannot {}: {}", path.string(), what, error.message()));
}

Status rename_entry(const fs::path& from, const fs::path& to) {
  std::error_code error;
  fs::rename(from, to, error);
  if (error) return io_failure(from, fmt::format("rename it to '{}'", to.string()), error);
  crash_point("renamed " + from.string() + " to " + to.string());
  return Status::ok();
}

Status remove_tree(const fs::path& path) {
  std::error_code error;
  fs::remove_all(path, error);
  if (error) return io_failure(path, "remove it", error);
  crash_point("removed " + path.string());
  return Status::ok();
}

// Removes a complete step directory so that no kill leaves half of it under its own name:
// renamed aside first, then deleted.
Status remove_step_directory(const fs::path& dir, int64_t step) {
  const fs::path aside = dir / hidden_name(step, kRemovingSuffix);
  MOTLEY_RETURN_IF_ERROR(rename_entry(dir / checkpoint_step_name(step), aside));
  return remove_tree(aside);
}

// The step the pointer of `dir` names (nullopt: no pointer). Errors: invalid_argument naming
// the pointer for contents that are not a step directory's name.
Result<std::optional<int64_t>> read_pointer(const std::string& dir) {
  const std::string path = pointer_path(dir);
  std::error_code error;
  if (!fs::exists(fs::symlink_status(path, error))) return std::optional<int64_t>();
  std::ifstream in(path, std::ios::binary);
  std::string text(kMaxPointerBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad() || (!in && !in.eof())) {
    return invalid_argument(fmt::format("{}: cannot read the checkpoint pointer", path));
  }
  text.resize(static_cast<size_t>(in.gcount()));
  std::string_view name(text);
  if (!name.empty() && name.back() == '\n') name.remove_suffix(1);
  const std::optional<int64_t> step =
      text.size() > kMaxPointerBytes ? std::nullopt : checkpoint_step_of(name);
  if (!step) {
    const std::string shown = text.size() > 64 ? text.substr(0, 64) + "..." : text;
    return invalid_argument(
        fmt::format("{}: expected the name of a step directory (such as '{}'), got '{}'", path,
                    checkpoint_step_name(0), shown));
  }
  return step;
}

bool is_a_directory(const fs::path& path) {
  std::error_code error;
  return fs::is_directory(fs::symlink_status(path, error));
}

// Points the pointer of `dir` at `step`, atomically.
Status write_pointer(const std::string& dir, int64_t step) {
  OutputFiles files;
  files.add(pointer_path(dir), checkpoint_step_name(step) + "\n");
  return files.commit();
}

}  // namespace

std::string checkpoint_step_name(int64_t step) {
  return fmt::format("{}{:08d}", kStepPrefix, step);
}

std::optional<int64_t> checkpoint_step_of(std::string_view name) {
  if (name.size() <= kStepPrefix.size() || name.substr(0, kStepPrefix.size()) != kStepPrefix) {
    return std::nullopt;
  }
  const std::string_view digits = name.substr(kStepPrefix.size());
  if (!std::all_of(digits.begin(), digits.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    return std::nullopt;
  }
  int64_t step = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return step;
}

std::string checkpoint_partial_directory(const std::string& dir, int64_t step) {
  return (fs::path(dir) / hidden_name(step, kPartialSuffix)).string();
}

Result<std::string> find_checkpoint(const std::string& dir) {
  MOTLEY_ASSIGN_OR_RETURN(const std::optional<int64_t> step, read_pointer(dir));
  if (step) {
    const fs::path target = fs::path(dir) / checkpoint_step_name(*step);
    if (is_a_directory(target)) return target.string();
    // A save replacing this step was killed between its renames; the old copy is whole.
    const fs::path aside = fs::path(dir) / hidden_name(*step, kReplacedSuffix);
    if (is_a_directory(aside)) return aside.string();
    return invalid_argument(fmt::format("{}: names '{}', which is not a directory",
                                        pointer_path(dir), checkpoint_step_name(*step)));
  }
  std::error_code error;
  if (fs::exists(fs::path(dir) / kCheckpointManifest, error)) return dir;
  return not_found(fmt::format("{}: no checkpoint here (no '{}' pointer and no {})", dir,
                               kCheckpointPointer, kCheckpointManifest));
}

std::vector<int64_t> checkpoint_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::optional<int64_t> step = checkpoint_step_of(it->path().filename().string());
    if (step && is_a_directory(it->path())) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Status clean_checkpoint_directory(const std::string& dir) {
  std::error_code error;
  if (!is_a_directory(dir)) return Status::ok();
  // A replacement killed between its two renames: the pointer names a directory set aside.
  const Result<std::optional<int64_t>> pointed = read_pointer(dir);
  if (pointed.is_ok() && *pointed &&
      !is_a_directory(fs::path(dir) / checkpoint_step_name(**pointed))) {
    const fs::path aside = fs::path(dir) / hidden_name(**pointed, kReplacedSuffix);
    if (is_a_directory(aside)) {
      MOTLEY_RETURN_IF_ERROR(rename_entry(aside, fs::path(dir) / checkpoint_step_name(**pointed)));
    }
  }
  std::vector<fs::path> leftovers;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    const std::optional<std::string> target = temporary_target(name);
    const bool temporary =
        target && (*target == kCheckpointPointer || *target == kCheckpointManifest ||
                   is_checkpoint_layer_file(*target));
    if (temporary || hidden_step(name, kPartialSuffix) || hidden_step(name, kReplacedSuffix) ||
        hidden_step(name, kRemovingSuffix)) {
      leftovers.push_back(it->path());
    }
  }
  if (error) return io_failure(dir, "list the checkpoint directory", error);
  for (const fs::path& path : leftovers) {
    MOTLEY_RETURN_IF_ERROR(remove_tree(path).with_context("a killed save's leftover"));
  }
  if (!leftovers.empty()) sync_directory(dir);
  return Status::ok();
}

Status begin_checkpoint_save(const std::string& dir, int64_t step) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) return io_failure(dir, "create the checkpoint directory", error);
  MOTLEY_RETURN_IF_ERROR(clean_checkpoint_directory(dir));
  const std::string partial = checkpoint_partial_directory(dir, step);
  fs::create_directory(partial, error);
  if (error) return io_failure(partial, "create the directory", error);
  crash_point("created " + partial);
  return Status::ok();
}

Status finish_checkpoint_save(const std::string& dir, int64_t step, int keep) {
  const fs::path root(dir);
  const std::string partial = checkpoint_partial_directory(dir, step);
  sync_directory(partial);
  const fs::path target = root / checkpoint_step_name(step);
  if (is_a_directory(target)) {
    // An older save of this step; while the pointer may name it, it is only ever renamed, so a
    // kill leaves it findable (clean_checkpoint_directory restores it).
    const fs::path aside = root / hidden_name(step, kReplacedSuffix);
    MOTLEY_RETURN_IF_ERROR(rename_entry(target, aside));
    MOTLEY_RETURN_IF_ERROR(rename_entry(partial, target));
    MOTLEY_RETURN_IF_ERROR(remove_tree(aside));
  } else {
    MOTLEY_RETURN_IF_ERROR(rename_entry(partial, target));
  }
  sync_directory(dir);
  MOTLEY_RETURN_IF_ERROR(write_pointer(dir, step));
  // The newest `keep` at or below this step stay.
  std::vector<int64_t> older;
  for (int64_t s : checkpoint_steps(dir)) {
    if (s <= step) older.push_back(s);
  }
  const size_t kept = static_cast<size_t>(std::max(keep, 1));
  if (older.size() > kept) {
    for (size_t i = 0; i + kept < older.size(); ++i) {
      MOTLEY_RETURN_IF_ERROR(remove_step_directory(root, older[i]));
    }
    sync_directory(dir);
  }
  return Status::ok();
}

}  // namespace motley
