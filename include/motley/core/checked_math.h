// Overflow-checked int64_t arithmetic for sums and products of counts read from user files
// (micro-batches x micro-batch size, nodes x devices per node, layers x repeat): the result,
// or nothing where the exact result does not fit, instead of a silently wrapped number.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>

namespace motley {

inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

}  // namespace motley
