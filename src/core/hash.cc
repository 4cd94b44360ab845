#include "motley/core/hash.h"

#include <cstdio>

namespace motley {

uint64_t fnv1a_64(std::string_view bytes) {
  uint64_t h = 14695981039346656037ULL;  // offset basis
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;  // FNV prime
  }
  return h;
}

std::string fnv1a_64_hex(std::string_view bytes) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(fnv1a_64(bytes)));
  return buf;
}

}  // namespace motley
