#include "motley/exec/checkpoint.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "motley/core/hash.h"
#include "motley/core/output_files.h"

namespace motley {
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoint files are written in the host's byte order, which must be little-endian");

constexpr char kMagic[8] = {'M', 'O', 'T', 'L', 'E', 'Y', 'T', '1'};
constexpr uint32_t kVersion = 1;
// More dimensions than any parameter or moment has; a record declaring more is not one of ours.
constexpr uint32_t kMaxDimensions = 8;

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
  std::string_view bytes(size_t n) {
    if (!take(n)) return {};
    return bytes_.substr(pos_ - n, n);
  }
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == bytes_.size(); }

 private:
  bool take(size_t n) {
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

std::string shape_text(const std::vector<int64_t>& sizes) {
  return fmt::format("[{}]", fmt::join(sizes, ", "));
}

// Whether `sizes` of elements of `element_bytes` fill exactly `nbytes`, without overflow.
bool shape_fills(const std::vector<int64_t>& sizes, uint64_t element_bytes, uint64_t nbytes) {
  const std::optional<uint64_t> count = element_count(sizes);
  return count && *count <= nbytes / element_bytes && *count * element_bytes == nbytes;
}

// Whether `name` is a layer file's: "layer-" and a decimal number, then ".bin".
bool is_layer_file(std::string_view name) {
  constexpr std::string_view kPrefix = "layer-", kSuffix = ".bin";
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix)) {
    return false;
  }
  const std::string_view number =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  return std::all_of(number.begin(), number.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Status write_tensor_file(const std::string& path, const TensorFile& file) {
  std::string out(kMagic, sizeof(kMagic));
  put<uint32_t>(out, kVersion);
  put<int64_t>(out, file.step);
  put<uint32_t>(out, static_cast<uint32_t>(file.tensors.size()));
  for (const NamedTensor& t : file.tensors) {
    const at::Tensor data = t.tensor.detach().contiguous();
    MOTLEY_CHECK(data.scalar_type() == at::kFloat || data.scalar_type() == at::kLong,
                 "checkpoint tensors are float32 or int64");
    put<uint32_t>(out, static_cast<uint32_t>(t.name.size()));
    out += t.name;
    put<uint8_t>(out, data.scalar_type() == at::kFloat ? 0 : 1);
    put<uint32_t>(out, static_cast<uint32_t>(data.dim()));
    for (int64_t size : data.sizes()) put<int64_t>(out, size);
    const uint64_t nbytes = static_cast<uint64_t>(data.numel()) * data.element_size();
    put<uint64_t>(out, nbytes);
    out.append(static_cast<const char*>(data.data_ptr()), nbytes);
  }
  put<uint64_t>(out, fnv1a_64(out));
  OutputFiles files;
  files.add(path, std::move(out));
  return files.commit();
}

Result<TensorFile> read_tensor_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("{}: cannot open checkpoint file", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  auto corrupt = [&](const std::string& why) {
    return invalid_argument(fmt::format("{}: {}", path, why));
  };
  if (bytes.size() < sizeof(kMagic) + sizeof(uint64_t) ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return corrupt("not a motley tensor file (expected it to start with \"MOTLEYT1\")");
  }
  const std::string_view body(bytes.data(), bytes.size() - sizeof(uint64_t));
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + body.size(), sizeof(stored));
  if (stored != fnv1a_64(body))
    return corrupt("checksum mismatch: the file is corrupt or truncated");

  Reader r(body.substr(sizeof(kMagic)));
  if (r.get<uint32_t>() != kVersion) return corrupt("unsupported tensor file version");
  TensorFile file;
  file.step = r.get<int64_t>();
  const uint32_t count = r.get<uint32_t>();
  for (uint32_t i = 0; i < count && r.ok(); ++i) {
    NamedTensor t;
    t.name = std::string(r.bytes(r.get<uint32_t>()));
    const uint8_t dtype = r.get<uint8_t>();
    const uint32_t rank = r.get<uint32_t>();
    if (r.ok() && rank > kMaxDimensions) {
      return corrupt(fmt::format("tensor '{}' declares {} dimensions; at most {} are allowed",
                                 t.name, rank, kMaxDimensions));
    }
    std::vector<int64_t> sizes;
    for (uint32_t d = 0; d < rank && r.ok(); ++d) sizes.push_back(r.get<int64_t>());
    const uint64_t nbytes = r.get<uint64_t>();
    const std::string_view data = r.bytes(nbytes);
    if (!r.ok()) break;
    if (dtype > 1) {
      return corrupt(fmt::format("tensor '{}' has dtype code {}; expected 0 (float32) or 1 (int64)",
                                 t.name, dtype));
    }
    // Checked before allocating: a forged shape must not become a huge allocation.
    const at::ScalarType type = dtype == 0 ? at::kFloat : at::kLong;
    const uint64_t element_bytes = dtype == 0 ? sizeof(float) : sizeof(int64_t);
    if (!shape_fills(sizes, element_bytes, nbytes)) {
      return corrupt(fmt::format(
          "tensor '{}' has shape {} of {}-byte elements, which does not fill its {} bytes", t.name,
          shape_text(sizes), element_bytes, nbytes));
    }
    t.tensor = at::empty(sizes, type);
    std::memcpy(t.tensor.data_ptr(), data.data(), nbytes);
    file.tensors.push_back(std::move(t));
  }
  if (!r.ok() || !r.at_end()) return corrupt("the records do not match the file's length");
  return file;
}

std::string checkpoint_layer_file(int layer) { return fmt::format("layer-{}.bin", layer); }

Status remove_stale_checkpoint_temporaries(const std::string& dir) {
  std::error_code error;
  std::filesystem::directory_iterator entries(dir, error);
  if (error) return Status::ok();  // no directory, no temporaries
  for (const std::filesystem::directory_entry& entry : entries) {
    const std::optional<std::string> target = temporary_target(entry.path().filename().string());
    if (!target || (*target != kCheckpointManifest && !is_layer_file(*target))) continue;
    if (!std::filesystem::remove(entry.path(), error) && error) {
      return io_error(fmt::format("{}: cannot remove a killed save's temporary file: {}",
                                  entry.path().string(), error.message()));
    }
  }
  return Status::ok();
}

}  // namespace motley
