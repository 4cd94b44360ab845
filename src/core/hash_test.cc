#include "motley/core/hash.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

// The published FNV-1a 64-bit test vectors (Fowler, Noll, Vo: "FNV hash" reference page).
TEST(Hash, MatchesThePublishedVectors) {
  EXPECT_EQ(fnv1a_64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a_64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a_64("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(fnv1a_64_hex("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(fnv1a_64_hex(""), "cbf29ce484222325");
}

}  // namespace
}  // namespace motley
