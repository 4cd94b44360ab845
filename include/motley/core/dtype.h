// Numeric formats of weights and activations, shared by the model and the device catalog.
// Plain enum and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace motley {

enum class DType { kFloat32, kBFloat16, kFloat16 };

int64_t dtype_bytes(DType dtype);
const char* dtype_name(DType dtype);  // "fp32", "bf16", "fp16"
// Accepts the names above and "float32", "bfloat16", "float16" (case-insensitive).
std::optional<DType> parse_dtype(std::string_view name);

}  // namespace motley
