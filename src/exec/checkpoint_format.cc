#include "motley/exec/checkpoint_format.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>

#include "motley/core/check.h"
#include "motley/core/hash.h"

namespace motley {
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoint files are written in the host's byte order, which must be little-endian");

constexpr char kMagic[8] = {'M', 'O', 'T', 'L', 'E', 'Y', 'T', '1'};
constexpr uint32_t kVersion = 1;

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// Reads fixed-size fields from a byte range, remembering whether it ran past the end.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  template <class T>
  T get() {
    T value{};
    if (!take(sizeof(T))) return value;
    std::memcpy(&value, bytes_.data() + pos_ - sizeof(T), sizeof(T));
    return value;
  }
  std::string_view bytes(uint64_t n) {
    if (!take(n)) return {};
    return bytes_.substr(pos_ - n, n);
  }
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == bytes_.size(); }

 private:
  bool take(uint64_t n) {
    if (!ok_ || n > bytes_.size() - pos_) {
      ok_ = false;
      return false;
    }
    pos_ += n;
    return true;
  }
  std::string_view bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// The number of elements of a tensor of `sizes`; nullopt for a negative size or a count that
// does not fit 64 bits.
std::optional<uint64_t> element_count(const std::vector<int64_t>& sizes) {
  uint64_t count = 1;
  for (int64_t size : sizes) {
    if (size < 0 || __builtin_mul_overflow(count, static_cast<uint64_t>(size), &count)) {
      return std::nullopt;
    }
  }
  return count;
}

// Whether `sizes` of elements of `element_bytes` fill exactly `nbytes`, without overflow.
bool shape_fills(const std::vector<int64_t>& sizes, uint64_t element_bytes, uint64_t nbytes) {
  const std::optional<uint64_t> count = element_count(sizes);
  return count && *count <= nbytes / element_bytes && *count * element_bytes == nbytes;
}

}  // namespace

std::string checkpoint_layer_file(int layer) { return fmt::format("layer-{}.bin", layer); }

bool is_checkpoint_layer_file(std::string_view name) {
  constexpr std::string_view kPrefix = "layer-", kSuffix = ".bin";
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix)) {
    return false;
  }
  const std::string_view number =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  return std::all_of(number.begin(), number.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string encode_tensor_file(int64_t step, const std::vector<TensorRecord>& records) {
  std::string out(kMagic, sizeof(kMagic));
  put<uint32_t>(out, kVersion);
  put<int64_t>(out, step);
  put<uint32_t>(out, static_cast<uint32_t>(records.size()));
  for (const TensorRecord& r : records) {
    MOTLEY_CHECK(shape_fills(r.sizes, dtype_bytes(r.dtype), r.data.size()),
                 "a tensor record's data must fill its shape");
    put<uint32_t>(out, static_cast<uint32_t>(r.name.size()));
    out += r.name;
    put<uint8_t>(out, static_cast<uint8_t>(r.dtype));
    put<uint32_t>(out, static_cast<uint32_t>(r.sizes.size()));
    for (int64_t size : r.sizes) put<int64_t>(out, size);
    put<uint64_t>(out, r.data.size());
    out += r.data;
  }
  put<uint64_t>(out, fnv1a_64(out));
  return out;
}

Result<TensorFileRecords> decode_tensor_file(std::string_view bytes, const std::string& source) {
  auto corrupt = [&source](const std::string& why) {
    return invalid_argument(fmt::format("{}: {}", source, why));
  };
  if (bytes.size() < sizeof(kMagic) + sizeof(uint64_t) ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return corrupt("not a motley tensor file (expected it to start with \"MOTLEYT1\")");
  }
  const std::string_view body = bytes.substr(0, bytes.size() - sizeof(uint64_t));
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + body.size(), sizeof(stored));
  if (stored != fnv1a_64(body)) {
    return corrupt("checksum mismatch: the file is corrupt or truncated");
  }

  Reader r(body.substr(sizeof(kMagic)));
  if (r.get<uint32_t>() != kVersion) return corrupt("unsupported tensor file version");
  TensorFileRecords file;
  file.step = r.get<int64_t>();
  const uint32_t count = r.get<uint32_t>();
  for (uint32_t i = 0; i < count && r.ok(); ++i) {
    TensorRecord t;
    t.name = std::string(r.bytes(r.get<uint32_t>()));
    const uint8_t dtype = r.get<uint8_t>();
    const uint32_t rank = r.get<uint32_t>();
    if (r.ok() && rank > kMaxTensorDimensions) {
      return corrupt(fmt::format("tensor '{}' declares {} dimensions; at most {} are allowed",
                                 t.name, rank, kMaxTensorDimensions));
    }
    for (uint32_t d = 0; d < rank && r.ok(); ++d) t.sizes.push_back(r.get<int64_t>());
    const uint64_t nbytes = r.get<uint64_t>();
    t.data = r.bytes(nbytes);
    if (!r.ok()) break;
    if (dtype > 1) {
      return corrupt(fmt::format("tensor '{}' has dtype code {}; expected 0 (float32) or 1 (int64)",
                                 t.name, dtype));
    }
    t.dtype = static_cast<TensorDtype>(dtype);
    if (!shape_fills(t.sizes, dtype_bytes(t.dtype), nbytes)) {
      return corrupt(fmt::format(
          "tensor '{}' has shape [{}] of {}-byte elements, which does not fill its {} bytes",
          t.name, fmt::join(t.sizes, ", "), dtype_bytes(t.dtype), nbytes));
    }
    file.records.push_back(std::move(t));
  }
  if (!r.ok() || !r.at_end()) return corrupt("the records do not match the file's length");
  return file;
}

Json checkpoint_manifest_to_json(const CheckpointManifest& manifest) {
  return Json{{"format", kCheckpointFormat},
              {"step", manifest.step},
              {"model", {{"name", manifest.model_name}, {"hash", manifest.model_hash}}},
              {"layers", manifest.layers}};
}

Result<CheckpointManifest> checkpoint_manifest_from_json(const Json& json,
                                                         const std::string& source) {
  const JsonField root(json, source);
  if (!root.is_object()) return root.error("expected an object (a checkpoint manifest)");
  MOTLEY_RETURN_IF_ERROR(root.check_keys({"format", "step", "model", "layers"}));
  MOTLEY_ASSIGN_OR_RETURN(std::string format, root.get_string("format"));
  if (format != kCheckpointFormat) {
    return root.child_error("format", fmt::format("expected \"{}\"", kCheckpointFormat));
  }
  CheckpointManifest manifest;
  MOTLEY_ASSIGN_OR_RETURN(manifest.step, root.get_nonnegative_int("step"));
  MOTLEY_ASSIGN_OR_RETURN(JsonField model, root.get("model"));
  if (!model.is_object()) return model.error("expected an object with the model's name and hash");
  MOTLEY_RETURN_IF_ERROR(model.check_keys({"name", "hash"}));
  MOTLEY_ASSIGN_OR_RETURN(manifest.model_name, model.get_string("name"));
  MOTLEY_ASSIGN_OR_RETURN(manifest.model_hash, model.get_string("hash"));
  MOTLEY_ASSIGN_OR_RETURN(manifest.layers, root.get_nonnegative_int("layers"));
  return manifest;
}

}  // namespace motley
