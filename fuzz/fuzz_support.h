// What every fuzz target of fuzz/ checks beyond "no crash": a refused input is refused with one
// message that names the input first and prints safely on a terminal, and an accepted input
// reads back the same from what motley writes of it. A failed check aborts, which libFuzzer
// (and the replay driver) report as a crash with the input that caused it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/model/model.h"

namespace motley::fuzz {

// The name every target gives its input; messages must start with it.
inline const std::string kSource = "fuzz-input";

inline std::string_view text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Prints `what` and `detail` and aborts.
[[noreturn]] void fail(std::string_view what, std::string_view detail);

// Aborts unless `status` is an error of bad input (not an internal error) whose message starts
// with kSource and a colon and holds no control character and no byte outside valid UTF-8.
void check_refusal(const Status& status);

// Aborts, printing both, when `first` and `second` differ: what a writer produced from a value
// and what it produced from that output read back.
void check_same(const Json& first, const Json& second, std::string_view what);

// Aborts unless model_to_json(model) reads back (model_from_json) to a model that writes the
// same JSON.
void check_model_round_trip(const ModelSpec& model);

}  // namespace motley::fuzz
