// Checkpoint files: named tensors in one binary file with the training step it belongs to and an
// FNV-1a checksum, written atomically (a reader sees the old file or the new one, never a mix).
// RankExecutor::save_checkpoint / load_checkpoint (executor.h) lay a checkpoint out as one such
// file per model layer plus a manifest, so it can be resumed under any plan of the same model,
// in the step directories of checkpoint_store.h. Thread-safe free functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "motley/core/status.h"
#include "motley/exec/checkpoint_format.h"
#include "motley/exec/stage_module.h"

namespace motley {

struct TensorFile {
  int64_t step = 0;
  std::vector<NamedTensor> tensors;  // in the order written
};

// The layout is encode_tensor_file's (checkpoint_format.h). REQUIRES: CPU tensors of float32
// or int64.
Status write_tensor_file(const std::string& path, const TensorFile& file);
// Errors: not_found (no such file), invalid_argument naming the path for a file that is not a
// tensor file, is truncated, or whose checksum does not match, and naming the tensor for a
// record whose shape is not its byte count (checked before anything is allocated).
Result<TensorFile> read_tensor_file(const std::string& path);

}  // namespace motley
