// A checkpoint directory that never loses its last good checkpoint. Each save goes into a
// directory of its own, and a pointer file names the last complete one:
//
//   D/latest               "step-00000008\n", replaced atomically once a save is complete
//   D/step-00000004/       manifest.json and layer-<i>.bin (checkpoint_format.h)
//   D/step-00000008/
//   D/.step-00000012.partial/   a save under way, or one a kill interrupted
//
// A save writes into its partial directory, renames it to its step's name, switches the
// pointer, then removes the checkpoints beyond the last K. A process killed anywhere in that
// sequence leaves the pointer naming a complete checkpoint (the previous one or the new one)
// and leftovers with names of their own, which clean_checkpoint_directory removes. A
// directory holding manifest.json itself (one checkpoint, the layout before step
// directories) is read as that checkpoint. Knows the layout, not the tensors. The directory
// must be on one file system (renames are atomic only there), and only one job may use it at
// a time. Free functions; thread-safe across distinct directories.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motley/core/status.h"

namespace motley {

inline constexpr std::string_view kCheckpointPointer = "latest";
// How many complete checkpoints a save keeps by default: the new one and the one before it.
inline constexpr int kDefaultKeptCheckpoints = 2;

std::string checkpoint_step_name(int64_t step);  // "step-00000012"; REQUIRES: step >= 0
// The step of a step directory's name ("step-" and decimal digits), nullopt for any other.
std::optional<int64_t> checkpoint_step_of(std::string_view name);

// Where a save of `step` into checkpoint directory `dir` writes its files until it is
// complete: "<dir>/.step-00000012.partial".
std::string checkpoint_partial_directory(const std::string& dir, int64_t step);

// The checkpoint to load from `dir`: the step directory the pointer names (or the copy of it a
// killed replacement set aside) or, with no pointer, `dir` itself when it holds a manifest. Errors:
// not_found naming `dir` when it holds neither (or does not exist); invalid_argument naming the
// pointer file when it does not name a step directory of `dir` that exists.
Result<std::string> find_checkpoint(const std::string& dir);

// The complete step directories of `dir`, by increasing step (none for a missing directory).
std::vector<int64_t> checkpoint_steps(const std::string& dir);

// Removes what killed saves left in `dir`: partial directories, directories a prune had begun
// to remove, the pointer's temporaries and (from the layout before step directories) the
// temporaries of a manifest or a layer file; restores a step directory a kill left renamed
// aside while it was being replaced. Nothing else changes. A missing directory has nothing.
// REQUIRES: no save into `dir` is under way. Errors: io_error naming the entry.
Status clean_checkpoint_directory(const std::string& dir);

// Starts a save of `step`: creates `dir` if missing, cleans it, and creates an empty partial
// directory (checkpoint_partial_directory) for the save's files. Errors: io_error.
Status begin_checkpoint_save(const std::string& dir, int64_t step);

// Completes a save of `step` whose files are all in its partial directory: makes them durable,
// renames the directory to its step's name (replacing an older save of the same step), switches
// the pointer to it, and removes all but the `keep` newest step directories at or below `step`
// (newer ones, which the pointer never named, stay). Errors: io_error; a kill leaves the
// pointer naming a complete checkpoint. REQUIRES: keep >= 1.
Status finish_checkpoint_save(const std::string& dir, int64_t step, int keep);

}  // namespace motley
