#include "motley/exec/checkpoint.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <sstream>

#include "motley/core/hash.h"
#include "motley/core/json.h"

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
  return write_file_atomically(path, out);
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
    std::vector<int64_t> sizes;
    for (uint32_t d = 0; d < rank && r.ok(); ++d) sizes.push_back(r.get<int64_t>());
    const uint64_t nbytes = r.get<uint64_t>();
    const std::string_view data = r.bytes(nbytes);
    if (!r.ok()) break;
    if (dtype > 1) return corrupt(fmt::format("tensor '{}' has an unknown dtype", t.name));
    t.tensor = at::empty(sizes, dtype == 0 ? at::kFloat : at::kLong);
    if (static_cast<uint64_t>(t.tensor.numel()) * t.tensor.element_size() != nbytes) {
      return corrupt(
          fmt::format("tensor '{}' has a byte count that does not match its shape", t.name));
    }
    std::memcpy(t.tensor.data_ptr(), data.data(), nbytes);
    file.tensors.push_back(std::move(t));
  }
  if (!r.ok() || !r.at_end()) return corrupt("the records do not match the file's length");
  return file;
}

}  // namespace motley
