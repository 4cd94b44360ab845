// The bytes of a checkpoint, without tensors: the tensor file's binary records and the
// manifest's JSON, encoded and decoded here so that the executor (checkpoint.h, which turns
// records into libtorch tensors) and the fuzz targets share one reader. Every count and size a
// file declares is checked against the file's own length before anything is allocated.
// Free functions and values; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "motley/core/json.h"
#include "motley/core/status.h"

namespace motley {

inline constexpr const char* kCheckpointFormat = "motley.checkpoint/1";

// The files of a checkpoint directory: the manifest and one tensor file per model layer.
inline constexpr std::string_view kCheckpointManifest = "manifest.json";
std::string checkpoint_layer_file(int layer);  // "layer-3.bin"
// Whether `name` is a layer file's: "layer-", a decimal number, ".bin".
bool is_checkpoint_layer_file(std::string_view name);

enum class TensorDtype : uint8_t { kFloat32 = 0, kInt64 = 1 };
inline constexpr uint64_t dtype_bytes(TensorDtype dtype) {
  return dtype == TensorDtype::kFloat32 ? 4 : 8;
}
// More dimensions than any parameter or moment has; a record declaring more is not one of ours.
inline constexpr uint32_t kMaxTensorDimensions = 8;

// One named tensor's record: its dtype, shape and raw little-endian contiguous elements, a
// view into the bytes it was decoded from or is encoded from.
struct TensorRecord {
  std::string name;
  TensorDtype dtype = TensorDtype::kFloat32;
  std::vector<int64_t> sizes;
  std::string_view data;  // exactly product(sizes) * dtype_bytes(dtype) bytes
};

// Layout (little-endian): "MOTLEYT1", u32 format version (1), i64 step, u32 count, then per
// tensor: u32 name length, name bytes, u8 dtype (0 float32, 1 int64), u32 rank, i64 sizes,
// u64 byte count, raw data; last, u64 FNV-1a of every byte before it.
// REQUIRES: each record's data fills its shape.
std::string encode_tensor_file(int64_t step, const std::vector<TensorRecord>& records);

struct TensorFileRecords {
  int64_t step = 0;
  std::vector<TensorRecord> records;  // views into the decoded bytes, in the order written
};
// Errors (invalid_argument, naming `source`): not a tensor file, another version, a checksum
// that does not match, records that do not match the length, more than kMaxTensorDimensions,
// an unknown dtype, and (naming the tensor) a shape that does not fill its byte count.
Result<TensorFileRecords> decode_tensor_file(std::string_view bytes, const std::string& source);

// What manifest.json records: the step, the model it is of, and its layer count.
struct CheckpointManifest {
  int64_t step = 0;
  std::string model_name;
  std::string model_hash;
  int64_t layers = 0;
};
Json checkpoint_manifest_to_json(const CheckpointManifest& manifest);
// Errors name `source` and the field: another format, a missing or mistyped field, a negative
// step or layer count, an unknown key.
Result<CheckpointManifest> checkpoint_manifest_from_json(const Json& json,
                                                         const std::string& source);

}  // namespace motley
