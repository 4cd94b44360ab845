#include "motley/core/dtype.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace motley {

int64_t dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
  }
  return 4;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "fp32";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat16:
      return "fp16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "fp32" || s == "float32") return DType::kFloat32;
  if (s == "bf16" || s == "bfloat16") return DType::kBFloat16;
  if (s == "fp16" || s == "float16" || s == "half") return DType::kFloat16;
  return std::nullopt;
}

}  // namespace motley
