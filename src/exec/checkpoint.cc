#include "motley/exec/checkpoint.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "motley/core/output_files.h"

namespace motley {

Status write_tensor_file(const std::string& path, const TensorFile& file) {
  std::vector<at::Tensor> contiguous;  // keeps the records' data alive
  std::vector<TensorRecord> records;
  for (const NamedTensor& t : file.tensors) {
    // Written from host memory: a tensor on a GPU is copied to the CPU first.
    const at::Tensor& data = contiguous.emplace_back(t.tensor.detach().to(at::kCPU).contiguous());
    MOTLEY_CHECK(data.scalar_type() == at::kFloat || data.scalar_type() == at::kLong,
                 "checkpoint tensors are float32 or int64");
    records.push_back(TensorRecord{
        t.name, data.scalar_type() == at::kFloat ? TensorDtype::kFloat32 : TensorDtype::kInt64,
        data.sizes().vec(),
        std::string_view(static_cast<const char*>(data.data_ptr()),
                         static_cast<size_t>(data.numel()) * data.element_size())});
  }
  OutputFiles files;
  files.add(path, encode_tensor_file(file.step, records));
  return files.commit();
}

Result<TensorFile> read_tensor_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("{}: cannot open checkpoint file", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  MOTLEY_ASSIGN_OR_RETURN(TensorFileRecords decoded, decode_tensor_file(bytes, path));
  TensorFile file;
  file.step = decoded.step;
  for (const TensorRecord& r : decoded.records) {
    // The shape was checked against the bytes: this allocates no more than the file holds.
    at::Tensor tensor =
        at::empty(r.sizes, r.dtype == TensorDtype::kFloat32 ? at::kFloat : at::kLong);
    std::memcpy(tensor.data_ptr(), r.data.data(), r.data.size());
    file.tensors.push_back(NamedTensor{r.name, std::move(tensor)});
  }
  return file;
}

}  // namespace motley
