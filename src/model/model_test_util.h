// What the model module's test files share. Header only; tests only.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "motley/core/json.h"

namespace motley::model_testing {

inline const std::string kData = MOTLEY_TEST_DATA_DIR;

// `text` parsed as JSON; a failed test and null when it does not parse.
inline Json parse_or_die(const std::string& text) {
  Result<Json> j = parse_json(text, "test");
  EXPECT_TRUE(j.is_ok()) << j.status().message();
  return j.is_ok() ? j.value() : Json();
}

// |computed - published| / published, for parameter counts against published ones.
inline double relative_error(int64_t computed, double published) {
  return std::fabs(static_cast<double>(computed) - published) / published;
}

}  // namespace motley::model_testing
