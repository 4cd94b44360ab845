// The one content hash of motley's files: 64-bit FNV-1a (Fowler, Noll, Vo), for plan
// references to their specs and checkpoint checksums. It catches accidents (a wrong spec, a
// truncated file), not deliberate forgery. Thread-safe free functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace motley {

uint64_t fnv1a_64(std::string_view bytes);
// 16 lowercase hex digits.
std::string fnv1a_64_hex(std::string_view bytes);

}  // namespace motley
