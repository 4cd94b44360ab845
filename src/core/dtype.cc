#include "motley/core/dtype.h"

#include "motley/core/enum_names.h"

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

// Indexed by DType, in declaration order; the long names are the aliases parse_dtype accepts.
constexpr const char* kDtypeNames[] = {"fp32", "bf16", "fp16"};
constexpr const char* kDtypeLongNames[] = {"float32", "bfloat16", "float16"};
static_assert(std::size(kDtypeNames) == static_cast<size_t>(DType::kFloat16) + 1);

const char* dtype_name(DType dtype) { return name_in(kDtypeNames, dtype); }

std::optional<DType> parse_dtype(std::string_view name) {
  if (same_name(name, "half")) return DType::kFloat16;
  if (auto dtype = parse_name_in<DType>(kDtypeNames, name)) return dtype;
  return parse_name_in<DType>(kDtypeLongNames, name);
}

}  // namespace motley
