// What every fuzz target of fuzz/ checks beyond "no crash": a refused input is refused with one
// message that names the input first and prints safely on a terminal, and an accepted input
// reads back the same from what motley writes of it. A failed check aborts, which libFuzzer
// (and the replay driver) report as a crash with the input that caused it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "motley/core/json.h"
#include "motley/core/status.h"

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

enum class Syntax { kJson, kYaml };

// The document `data` holds, or nullopt when the parser refused it (the refusal checked).
std::optional<Json> parse_input(const uint8_t* data, size_t size, Syntax syntax);

// The value `read` makes of `document`, or nullopt when it refused (the refusal checked).
// `read` returns a Result.
template <class Read>
auto read_input(const Json& document, Read read)
    -> std::optional<std::decay_t<decltype(*read(document))>> {
  auto value = read(document);
  if (!value) {
    check_refusal(value.status());
    return std::nullopt;
  }
  return std::move(*value);
}

// Aborts unless what `write` makes of `value` reads back (`read`, which returns a Result) to a
// value `write` makes the same of: motley reads every file it writes, and the same again.
template <class T, class Write, class Read>
void check_reads_back(const T& value, Write write, Read read, std::string_view what) {
  const auto written = write(value);
  auto again = read(written);
  if (!again) fail(std::string(what) + " must read back", again.status().message());
  if (write(*again) != written) fail(std::string(what) + " must read back the same", "");
}

// The YAML text motley writes, read back as a document (for check_reads_back's `read`).
Result<Json> reparse_yaml(const std::string& written);

}  // namespace motley::fuzz
