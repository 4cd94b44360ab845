// Reading structured user files (JSON as Hugging Face and Python write it, and YAML) into
// nlohmann::json, and typed field access whose errors name the file and the field path.
// Does not know any motley schema; modules build their own from_json on top of JsonField.
// Free functions and a value type; thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motley/core/status.h"

namespace motley {

using Json = nlohmann::json;

// How deep arrays and objects (JSON) or sequences and mappings (YAML) may nest. motley's own
// files nest a handful of levels; the limit is checked before anything recurses into a
// document, so a hostile file cannot exhaust the stack.
inline constexpr int kMaxNestingDepth = 64;
// The largest JSON or YAML file motley reads: far above any plan, model or cluster file, and
// a stop for a device or pipe that never ends (/dev/zero).
inline constexpr int64_t kMaxStructuredFileBytes = int64_t{256} << 20;
// The most values a YAML document may hold once its aliases are expanded (each use of an
// alias counts its anchor's values again), so that a few hundred bytes of nested aliases
// cannot expand to gigabytes. The largest cluster file motley accepts holds far fewer.
inline constexpr int64_t kMaxYamlValues = 1'000'000;

// Parses JSON text. Accepts the non-standard tokens Python's json module writes (NaN,
// Infinity, -Infinity) outside strings; they become NaN and +/-inf doubles.
// `source` names the text in error messages (usually the file name). Rejects, with the line
// and column or the key path: syntax errors, numbers beyond a double's range (1e999), nesting
// deeper than kMaxNestingDepth and a key repeated within one object.
Result<Json> parse_json(std::string_view text, std::string_view source);

// A number as motley's files write it: an integer when `v` is one exactly (below 9e15, where
// doubles still hold every integer), else the double.
Json number_json(double v);

// Reads a whole file; the error names the path and the OS reason.
Result<std::string> read_text_file(const std::string& path);
// At most kMaxStructuredFileBytes, then parse_json.
Result<Json> read_json_file(const std::string& path);
// Reads YAML and converts it to the same Json tree (scalars become integers, floats, booleans,
// null or strings, as YAML 1.2's core schema reads them), so one field reader serves both.
// Anchors and aliases work; an alias inside its own anchor, more than kMaxYamlValues values
// after expansion, nesting deeper than kMaxNestingDepth, a key repeated within one mapping and
// a key that is not a scalar are errors naming the source. At most kMaxStructuredFileBytes.
Result<Json> read_yaml_file(const std::string& path);
Result<Json> parse_yaml(std::string_view text, std::string_view source);

// Writes `contents` to `path` through a temporary file, fsync and rename, so a reader never
// sees a partial file and a failure leaves any previous file untouched.
Status write_file_atomically(const std::string& path, std::string_view contents);

// An inclusive range of integers a field may take; errors state it.
struct IntRange {
  int64_t min = 0;
  int64_t max = 0;
};

// One value inside a parsed document plus where it is, for precise error messages:
// "cluster.yaml: field 'nodes[1].devices.count': expected a positive integer, got -3".
class JsonField {
 public:
  JsonField(const Json& value, std::string source, std::string path = "");

  const Json& json() const { return *value_; }
  const std::string& source() const { return source_; }
  // Dotted path from the document root, e.g. "nodes[1].devices"; empty at the root.
  const std::string& path() const { return path_; }

  bool is_object() const { return value_->is_object(); }
  bool is_array() const { return value_->is_array(); }
  bool is_null() const { return value_->is_null(); }
  // True when `key` is present and not null.
  bool has(std::string_view key) const;

  // Required child; error when missing or null (or when this is not an object).
  Result<JsonField> get(std::string_view key) const;
  // Child when present and not null.
  std::optional<JsonField> find(std::string_view key) const;
  // Elements of an array (error when not an array).
  Result<std::vector<JsonField>> items() const;
  // Element i of an array, with its path (REQUIRES: an array of more than i elements): for a
  // reader that walks a large array through json() and needs a field only to word an error.
  JsonField item(size_t i) const;
  // Keys of an object in document order (error when not an object).
  Result<std::vector<std::string>> keys() const;

  // Conversions of this value. Integers accept integral floats (e.g. 8.0) but not 8.5 or "8".
  Result<int64_t> as_int() const;
  // An integer within `range`: "expected an integer from 1 to 4096, got 5000" (below a minimum
  // of 1 or 0 the message says "a positive" or "a non-negative integer", as the getters do).
  Result<int64_t> as_int_in(IntRange range) const;
  Result<double> as_double() const;  // a finite number: NaN and infinities are errors
  Result<std::string> as_string() const;
  Result<bool> as_bool() const;

  // Required fields of an object.
  Result<int64_t> get_int(std::string_view key) const;
  Result<int64_t> get_positive_int(std::string_view key) const;     // > 0
  Result<int64_t> get_nonnegative_int(std::string_view key) const;  // >= 0
  Result<int64_t> get_int_in(std::string_view key, IntRange range) const;
  Result<double> get_double(std::string_view key) const;
  Result<double> get_nonnegative_double(std::string_view key) const;  // finite, >= 0
  Result<double> get_positive_double(std::string_view key) const;     // finite, > 0
  // A number from `low` to `high` (both included): "expected a number from 1e-06 to 1e+09,
  // got 1e-300".
  Result<double> get_double_in(std::string_view key, double low, double high) const;
  Result<std::string> get_string(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;

  // Optional fields: the default when missing or null, an error when present but wrong.
  Result<int64_t> get_int_or(std::string_view key, int64_t fallback) const;
  Result<int64_t> get_positive_int_or(std::string_view key, int64_t fallback) const;
  Result<int64_t> get_nonnegative_int_or(std::string_view key, int64_t fallback) const;
  Result<int64_t> get_int_in_or(std::string_view key, IntRange range, int64_t fallback) const;
  Result<double> get_double_or(std::string_view key, double fallback) const;
  Result<double> get_nonnegative_double_or(std::string_view key, double fallback) const;
  Result<double> get_positive_double_or(std::string_view key, double fallback) const;
  Result<std::string> get_string_or(std::string_view key, std::string fallback) const;
  Result<bool> get_bool_or(std::string_view key, bool fallback) const;

  // An invalid-argument Status about this field: "<source>: field '<path>': <what>".
  Status error(std::string_view what) const;
  // The same about a child key of this object (which may be missing).
  Status child_error(std::string_view key, std::string_view what) const;

  // Rejects keys not in `allowed`, naming the first unknown one and listing the allowed ones,
  // so a typo in a hand-written file is caught instead of silently ignored.
  Status check_keys(const std::vector<std::string_view>& allowed) const;

 private:
  std::string child_path(std::string_view key) const;

  const Json* value_;
  std::string source_;
  std::string path_;
};

// "a, b or c": a list of allowed values for error messages.
std::string join_alternatives(const std::vector<std::string>& names);

// A short description of a JSON value for error messages: `-3`, `"abc"`, `an object`, and
// `NaN`, `Infinity` or `-Infinity` for the non-finite numbers JSON itself cannot write.
std::string describe_json_value(const Json& value);

}  // namespace motley
