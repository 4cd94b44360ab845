#include "motley/core/json.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unordered_map>

#include "motley/core/utf8.h"

namespace motley {
namespace {

// Python's json writes NaN, Infinity and -Infinity as bare tokens. nlohmann rejects them, so
// outside string literals they are rewritten to placeholders that parse as numbers, and the
// resulting values are patched back after parsing.
constexpr std::string_view kNanPlaceholder = "1.2345678901234567e308";
constexpr std::string_view kInfPlaceholder = "1.7976931348623157e308";

// One token rewritten to a placeholder, so that an error position in the rewritten text can
// be given in the user's text.
struct Rewrite {
  size_t offset = 0;       // of the token in the original text
  size_t token_size = 0;   // in the original text
  size_t placeholder = 0;  // size of what replaced it
};

struct CleanedJson {
  std::string_view original;
  std::string rewritten;          // the whole text again where either token occurs; else empty
  std::vector<Rewrite> rewrites;  // in text order
  std::string_view text() const {
    return rewritten.empty() ? original : std::string_view(rewritten);
  }
};

CleanedJson replace_python_tokens(std::string_view text) {
  CleanedJson out;
  out.original = text;
  // Most documents have neither token anywhere: nothing to copy.
  if (text.find("NaN") == std::string_view::npos &&
      text.find("Infinity") == std::string_view::npos) {
    return out;
  }
  std::string& copy = out.rewritten;
  copy.reserve(text.size());
  bool in_string = false;
  auto rewrite = [&](size_t i, std::string_view token, std::string_view placeholder) {
    copy.append(placeholder);
    out.rewrites.push_back(Rewrite{i, token.size(), placeholder.size()});
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      copy.push_back(c);
      if (c == '\\' && i + 1 < text.size()) {
        copy.push_back(text[++i]);
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      copy.push_back(c);
    } else if (text.substr(i, 8) == "Infinity") {
      rewrite(i, "Infinity", kInfPlaceholder);
      i += 7;
    } else if (text.substr(i, 3) == "NaN") {
      rewrite(i, "NaN", kNanPlaceholder);
      i += 2;
    } else {
      copy.push_back(c);
    }
  }
  return out;
}

// The offset in the original text of `offset` in the rewritten one (inside a placeholder: the
// start of its token).
size_t original_offset(const CleanedJson& cleaned, size_t offset) {
  size_t growth = 0;
  for (const Rewrite& r : cleaned.rewrites) {
    const size_t start = r.offset + growth;
    if (offset < start) break;
    if (offset < start + r.placeholder) return r.offset;
    growth += r.placeholder - r.token_size;
  }
  return offset - growth;
}

// "line 3, column 14" (both from 1) of a byte offset.
std::string line_and_column(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  const std::string_view before = text.substr(0, offset);
  const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
  const size_t line_start =
      before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1;
  return fmt::format("line {}, column {}", line, offset - line_start + 1);
}

// The offset of the first '[' or '{' outside strings that opens more than kMaxNestingDepth
// levels. nlohmann parses and frees without recursion, but copies, comparisons and dump()
// recurse, and so do motley's walks over a tree: too deep a document is refused first.
std::optional<size_t> too_deep_at(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNestingDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

// "list[2].name": a key path in JsonField's notation.
std::string key_path(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
}

std::string index_path(std::string_view parent, size_t index) {
  return fmt::format("{}[{}]", parent, index);
}

// nlohmann's exception id for a number beyond a double's range.
constexpr int kNumberOverflow = 406;

// What nlohmann's own message says after its "[json.exception...] parse error at ...:" prefix.
std::string parse_error_reason(const std::string& last_token, const Json::exception& e) {
  if (e.id == kNumberOverflow) {
    return fmt::format("the number {} is beyond the range of a double (about 1.8e308)", last_token);
  }
  const std::string what = e.what();
  const size_t reason = what.find("syntax error");
  if (reason != std::string::npos) return what.substr(reason);
  const size_t bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

// The parse of the text into a Json, as SAX events: it builds the tree as nlohmann's DOM parser
// does and also stops at the first key repeated within one object (which the DOM parser would
// resolve silently by keeping the last value), and words a syntax error with its position in
// the user's text. One pass: a plan of millions of actions is tens of megabytes.
class CheckedJsonBuilder {
 public:
  CheckedJsonBuilder(const CleanedJson& cleaned, std::string_view source)
      : cleaned_(cleaned), source_(source) {}

  const Status& status() const { return status_; }
  Json take() { return std::move(root_); }

  bool null() { return put(Json(nullptr)); }
  bool boolean(bool value) { return put(Json(value)); }
  bool number_integer(int64_t value) { return put(Json(value)); }
  bool number_unsigned(uint64_t value) { return put(Json(value)); }
  bool number_float(double value, const std::string& /*text*/) { return put(Json(value)); }
  bool string(std::string& value) { return put(Json(std::move(value))); }
  bool binary(Json::binary_t& value) { return put(Json::binary(std::move(value))); }
  bool start_object(size_t /*size*/) { return open(Json::object(), /*object=*/true); }
  bool start_array(size_t /*size*/) { return open(Json::array(), /*object=*/false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& key);
  bool parse_error(size_t position, const std::string& last_token, const Json::exception& e);

 private:
  struct Level {
    Json* node = nullptr;
    bool object = false;
    std::string key;   // objects: the key whose value comes next
    size_t index = 0;  // arrays: the index of the next element
  };

  // Places `value` where the next value goes; returns where it went.
  Json* place(Json&& value) {
    if (levels_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Level& level = levels_.back();
    if (level.object) {
      Json& slot = (*level.node)[level.key];
      slot = std::move(value);
      return &slot;
    }
    level.node->push_back(std::move(value));
    return &level.node->back();
  }
  bool put(Json&& value) {
    place(std::move(value));
    return done();
  }
  // A value is complete: an array's next one has the next index.
  bool done() {
    if (!levels_.empty() && !levels_.back().object) ++levels_.back().index;
    return true;
  }
  // (A container's parent does not grow until it is closed, so the pointer stays good.)
  bool open(Json&& empty, bool object) {
    Json* node = place(std::move(empty));
    levels_.push_back(Level{node, object, {}, 0});
    return true;
  }
  bool close() {
    levels_.pop_back();
    return done();
  }
  // The key path of the value about to be read.
  std::string path() const;

  const CleanedJson& cleaned_;
  std::string_view source_;
  Json root_;
  std::vector<Level> levels_;
  Status status_;
};

std::string CheckedJsonBuilder::path() const {
  std::string out;
  for (const Level& level : levels_) {
    out = level.object ? key_path(out, level.key) : index_path(out, level.index);
  }
  return out;
}

bool CheckedJsonBuilder::key(std::string& key) {
  Level& level = levels_.back();
  level.key = key;
  if (!level.node->contains(key)) return true;
  status_ = invalid_argument(fmt::format(
      "{}: field '{}': duplicate key; a key may appear only once in an object", source_, path()));
  return false;
}

bool CheckedJsonBuilder::parse_error(size_t position, const std::string& last_token,
                                     const Json::exception& e) {
  // A number out of range is reported once read: point at its start instead.
  if (e.id == kNumberOverflow && position >= last_token.size()) position -= last_token.size();
  status_ = invalid_argument(
      fmt::format("{}: malformed JSON at {}: {}", source_,
                  line_and_column(cleaned_.original, original_offset(cleaned_, position)),
                  parse_error_reason(last_token, e)));
  return false;
}

void restore_special_numbers(Json& j) {
  if (j.is_structured()) {
    for (auto& child : j) restore_special_numbers(child);
  } else if (j.is_number_float()) {
    double v = j.get<double>();
    double a = std::fabs(v);
    if (a == std::stod(std::string(kInfPlaceholder))) {
      j = v > 0 ? std::numeric_limits<double>::infinity()
                : -std::numeric_limits<double>::infinity();
    } else if (a == std::stod(std::string(kNanPlaceholder))) {
      j = std::numeric_limits<double>::quiet_NaN();
    }
  }
}

Json yaml_scalar_to_json(const YAML::Node& node) {
  const std::string& s = node.Scalar();
  // A quoted scalar is always a string.
  if (node.Tag() == "!") return s;
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  // Integers and floats: the whole scalar must be consumed.
  {
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (errno == 0 && end != s.c_str() && *end == '\0') return static_cast<int64_t>(v);
  }
  {
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    bool hexlike = s.find_first_of("xX") != std::string::npos;
    if (end != s.c_str() && *end == '\0' && !hexlike && std::isfinite(v)) return v;
  }
  if (s == ".inf" || s == ".Inf" || s == "+.inf") return std::numeric_limits<double>::infinity();
  if (s == "-.inf" || s == "-.Inf") return -std::numeric_limits<double>::infinity();
  if (s == ".nan" || s == ".NaN") return std::numeric_limits<double>::quiet_NaN();
  return s;
}

// Where a YAML value sits: a chain of steps up to the root, spelled out only for a message.
struct YamlPath {
  const YamlPath* parent = nullptr;  // null at the root
  const std::string* key = nullptr;  // the mapping key of this step, or
  size_t index = 0;                  // the sequence index when `key` is null

  std::string str() const {
    if (parent == nullptr) return "";
    return key != nullptr ? key_path(parent->str(), *key) : index_path(parent->str(), index);
  }
};

// yaml-cpp's node graph into Json. An alias is another reference to its anchor's node, so the
// graph can contain itself (`a: &a [*a]`) or fan out exponentially (nested aliases, "billion
// laughs"): the walk refuses a node inside itself and stops at kMaxNestingDepth levels and at
// kMaxYamlValues values. Before it starts, `check_size` counts what the document expands to
// without expanding it, so that a bomb is refused in the time its distinct nodes take.
class YamlToJson {
 public:
  explicit YamlToJson(std::string_view source) : source_(source) {}
  // The error convert() would stop at when `root` expands to more than kMaxYamlValues values.
  Status check_size(const YAML::Node& root);
  Result<Json> convert(const YAML::Node& node, const YamlPath& path);

 private:
  Status enter(const YAML::Node& node, const YamlPath& path);
  Result<Json> sequence(const YAML::Node& node, const YamlPath& path);
  Result<Json> mapping(const YAML::Node& node, const YamlPath& path);
  Status error_at(const YAML::Node& node, const YamlPath& path, std::string_view what) const;
  Status too_many_values(const YAML::Node& node, const YamlPath& path) const;
  // The values `node` stands for once its aliases are expanded, as enter() counts them (every
  // node once; a mapping's keys are not values), at most kMaxYamlValues + 1. Each sequence and
  // mapping is counted once and remembered, so a nest of aliases costs its distinct nodes. A
  // node met inside itself or below kMaxNestingDepth counts 1: convert() refuses it there.
  int64_t expanded_values(const YAML::Node& node, int depth);
  // The value that takes the count past kMaxYamlValues, `allowed` values before it from `node`
  // on (node included): where enter() would stop.
  Status locate_excess(const YAML::Node& node, const YamlPath& path, int64_t allowed, int depth);

  struct Counted {
    YAML::Node node;
    int64_t values = -1;  // -1 while its members are being counted
  };

  std::string_view source_;
  std::vector<YAML::Node> open_;  // the sequences and mappings being converted, outermost first
  int64_t values_ = 0;
  std::unordered_multimap<size_t, Counted> counted_;  // by the node's offset in the text
};

Status YamlToJson::too_many_values(const YAML::Node& node, const YamlPath& path) const {
  return error_at(node, path,
                  fmt::format("the document holds more than {} values once its aliases are "
                              "expanded; every use of an alias counts its anchor's values again",
                              kMaxYamlValues));
}

int64_t YamlToJson::expanded_values(const YAML::Node& node, int depth) {
  if (!node.IsSequence() && !node.IsMap()) return 1;
  if (depth >= kMaxNestingDepth) return 1;
  const int pos = node.Mark().pos;
  Counted* memo = nullptr;
  if (pos >= 0) {
    auto [begin, end] = counted_.equal_range(static_cast<size_t>(pos));
    for (auto it = begin; it != end; ++it) {
      if (!it->second.node.is(node)) continue;
      if (it->second.values < 0) return 1;  // inside itself
      return it->second.values;
    }
    memo = &counted_.emplace(static_cast<size_t>(pos), Counted{node, -1})->second;
  }
  int64_t values = 1;
  for (const auto& member : node) {
    const YAML::Node& value = node.IsMap() ? member.second : member;
    values = std::min(values + expanded_values(value, depth + 1), kMaxYamlValues + 1);
  }
  if (memo != nullptr) memo->values = values;
  return values;
}

Status YamlToJson::locate_excess(const YAML::Node& node, const YamlPath& path, int64_t allowed,
                                 int depth) {
  if (allowed == 0 || (!node.IsSequence() && !node.IsMap())) return too_many_values(node, path);
  --allowed;
  if (node.IsSequence()) {
    YamlPath item_path{&path, nullptr, 0};
    for (const YAML::Node& item : node) {
      const int64_t n = expanded_values(item, depth + 1);
      if (n > allowed) return locate_excess(item, item_path, allowed, depth + 1);
      allowed -= n;
      ++item_path.index;
    }
  } else {
    for (const auto& kv : node) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
      const int64_t n = expanded_values(kv.second, depth + 1);
      if (n > allowed)
        return locate_excess(kv.second, YamlPath{&path, &key, 0}, allowed, depth + 1);
      allowed -= n;
    }
  }
  return too_many_values(node, path);  // not reached while the counts are exact
}

Status YamlToJson::check_size(const YAML::Node& root) {
  if (expanded_values(root, 0) <= kMaxYamlValues) return Status::ok();
  return locate_excess(root, YamlPath{}, kMaxYamlValues, 0);
}

Status YamlToJson::error_at(const YAML::Node& node, const YamlPath& path,
                            std::string_view what) const {
  const std::string where = fmt::format("line {}", node.Mark().line + 1);
  const std::string field = path.str();
  if (field.empty()) return invalid_argument(fmt::format("{}: {}: {}", source_, where, what));
  return invalid_argument(fmt::format("{}: field '{}' ({}): {}", source_, field, where, what));
}

Status YamlToJson::enter(const YAML::Node& node, const YamlPath& path) {
  if (++values_ > kMaxYamlValues) return too_many_values(node, path);
  if (!node.IsSequence() && !node.IsMap()) return Status::ok();
  for (const YAML::Node& outer : open_) {
    if (outer.is(node)) {
      return error_at(node, path,
                      "an alias refers to a node that contains it; YAML aliases must not be "
                      "recursive");
    }
  }
  if (static_cast<int>(open_.size()) >= kMaxNestingDepth) {
    return error_at(node, YamlPath{},
                    fmt::format("nested deeper than {} levels", kMaxNestingDepth));
  }
  return Status::ok();
}

Result<Json> YamlToJson::convert(const YAML::Node& node, const YamlPath& path) {
  MOTLEY_RETURN_IF_ERROR(enter(node, path));
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return Json(nullptr);
    case YAML::NodeType::Scalar:
      if (!is_valid_utf8(node.Scalar())) {
        return error_at(node, path, "not UTF-8 text; a YAML file must be UTF-8");
      }
      return yaml_scalar_to_json(node);
    case YAML::NodeType::Sequence:
      return sequence(node, path);
    case YAML::NodeType::Map:
      return mapping(node, path);
  }
  return Json(nullptr);
}

Result<Json> YamlToJson::sequence(const YAML::Node& node, const YamlPath& path) {
  open_.push_back(node);
  Json arr = Json::array();
  YamlPath item_path{&path, nullptr, 0};
  for (const YAML::Node& item : node) {
    MOTLEY_ASSIGN_OR_RETURN(Json value, convert(item, item_path));
    arr.push_back(std::move(value));
    ++item_path.index;
  }
  open_.pop_back();
  return arr;
}

Result<Json> YamlToJson::mapping(const YAML::Node& node, const YamlPath& path) {
  open_.push_back(node);
  Json obj = Json::object();
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) {
      return error_at(kv.first, path,
                      "a mapping key must be a plain string, not a sequence, mapping or null");
    }
    const std::string& key = kv.first.Scalar();
    if (!is_valid_utf8(key)) {
      return error_at(kv.first, path,
                      "a mapping key that is not UTF-8 text; a YAML file must be UTF-8");
    }
    const YamlPath child{&path, &key, 0};
    if (obj.contains(key)) {
      return error_at(kv.first, child, "duplicate key; a key may appear only once in a mapping");
    }
    MOTLEY_ASSIGN_OR_RETURN(Json value, convert(kv.second, child));
    obj[key] = std::move(value);
  }
  open_.pop_back();
  return obj;
}

bool is_integral_number(const Json& j) {
  if (j.is_number_integer() || j.is_number_unsigned()) return true;
  if (!j.is_number_float()) return false;
  double v = j.get<double>();
  return std::isfinite(v) && std::floor(v) == v && std::fabs(v) < 9.0e15;
}

}  // namespace

Result<Json> parse_json(std::string_view text, std::string_view source) {
  if (std::optional<size_t> at = too_deep_at(text)) {
    return invalid_argument(fmt::format("{}: malformed JSON at {}: nested deeper than {} levels",
                                        source, line_and_column(text, *at), kMaxNestingDepth));
  }
  const CleanedJson cleaned = replace_python_tokens(text);
  CheckedJsonBuilder builder(cleaned, source);
  const std::string_view input = cleaned.text();
  if (!Json::sax_parse(input.begin(), input.end(), &builder)) {
    if (!builder.status().is_ok()) return builder.status();
    return invalid_argument(fmt::format("{}: malformed JSON", source));
  }
  Json j = builder.take();
  if (!cleaned.rewrites.empty()) restore_special_numbers(j);
  return j;
}

namespace {

// The whole file, or an error as soon as it passes `max_bytes`.
Result<std::string> read_at_most(const std::string& path, size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return invalid_argument(fmt::format("{}: is a directory, expected a file", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    std::string why = err != 0 ? std::strerror(err) : "cannot open";
    if (err == ENOENT) return not_found(fmt::format("{}: no such file", path));
    return io_error(fmt::format("{}: cannot read: {}", path, why));
  }
  std::string text;
  std::vector<char> chunk(size_t{1} << 16);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (got > max_bytes - text.size()) {
      return invalid_argument(
          fmt::format("{}: larger than {} MiB, the most motley reads as a "
                      "JSON or YAML file",
                      path, max_bytes >> 20));
    }
    text.append(chunk.data(), got);
  }
  if (in.bad()) return io_error(fmt::format("{}: read failed", path));
  return text;
}

}  // namespace

Result<std::string> read_text_file(const std::string& path) {
  return read_at_most(path, std::numeric_limits<size_t>::max());
}

Result<Json> read_json_file(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(std::string text,
                          read_at_most(path, static_cast<size_t>(kMaxStructuredFileBytes)));
  return parse_json(text, path);
}

Result<Json> parse_yaml(std::string_view text, std::string_view source) {
  try {
    YAML::Node root = YAML::Load(std::string(text));
    YamlToJson converter(source);
    MOTLEY_RETURN_IF_ERROR(converter.check_size(root));
    return converter.convert(root, YamlPath{});
  } catch (const YAML::DeepRecursion&) {
    // yaml-cpp's own guard, far above kMaxNestingDepth; its mark is not where the nesting is.
    return invalid_argument(
        fmt::format("{}: malformed YAML: nested deeper than {} levels", source, kMaxNestingDepth));
  } catch (const YAML::Exception& e) {
    return invalid_argument(fmt::format("{}: malformed YAML at line {}, column {}: {}", source,
                                        e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

Result<Json> read_yaml_file(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(std::string text,
                          read_at_most(path, static_cast<size_t>(kMaxStructuredFileBytes)));
  return parse_yaml(text, path);
}

Status write_file_atomically(const std::string& path, std::string_view contents) {
  std::filesystem::path target(path);
  std::filesystem::path dir = target.parent_path().empty() ? "." : target.parent_path();
  std::string tmp_name = ".";
  tmp_name += target.filename().string();
  tmp_name += ".tmp.XXXXXX";
  std::string tmp = (dir / tmp_name).string();
  int fd = mkstemp(tmp.data());
  if (fd < 0) {
    return io_error(
        fmt::format("{}: cannot create temporary file: {}", path, std::strerror(errno)));
  }
  const char* p = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return io_error(fmt::format("{}: write failed: {}", path, std::strerror(err)));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return io_error(fmt::format("{}: fsync failed: {}", path, std::strerror(err)));
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return io_error(fmt::format("{}: rename failed: {}", path, std::strerror(err)));
  }
  // Make the rename itself durable.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::ok();
}

std::string join_alternatives(const std::vector<std::string>& names) {
  if (names.size() < 2) return names.empty() ? std::string() : names.front();
  return fmt::format("{} or {}", fmt::join(names.begin(), names.end() - 1, ", "), names.back());
}

std::string describe_json_value(const Json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  if (value.is_null()) return "null";
  // Json::dump writes null for these.
  if (value.is_number_float() && std::isnan(value.get<double>())) return "NaN";
  if (value.is_number_float() && std::isinf(value.get<double>())) {
    return value.get<double>() > 0 ? "Infinity" : "-Infinity";
  }
  // A document read from YAML may hold text that is not UTF-8, which dump() would refuse.
  std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() <= 40) return s;
  size_t cut = 37;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0u) == 0x80u) --cut;  // whole chars
  return fmt::format("{}...", s.substr(0, cut));
}

JsonField::JsonField(const Json& value, std::string source, std::string path)
    : value_(&value), source_(std::move(source)), path_(std::move(path)) {}

std::string JsonField::child_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

bool JsonField::has(std::string_view key) const {
  if (!value_->is_object()) return false;
  auto it = value_->find(key);
  return it != value_->end() && !it->is_null();
}

Status JsonField::error(std::string_view what) const {
  if (path_.empty()) return invalid_argument(fmt::format("{}: {}", source_, what));
  return invalid_argument(fmt::format("{}: field '{}': {}", source_, path_, what));
}

Status JsonField::child_error(std::string_view key, std::string_view what) const {
  return invalid_argument(fmt::format("{}: field '{}': {}", source_, child_path(key), what));
}

Result<JsonField> JsonField::get(std::string_view key) const {
  if (!value_->is_object()) {
    return error(fmt::format("expected an object, got {}", describe_json_value(*value_)));
  }
  auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return child_error(key, "is missing");
  return JsonField(*it, source_, child_path(key));
}

std::optional<JsonField> JsonField::find(std::string_view key) const {
  if (!value_->is_object()) return std::nullopt;
  auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return std::nullopt;
  return JsonField(*it, source_, child_path(key));
}

Result<std::vector<JsonField>> JsonField::items() const {
  if (!value_->is_array()) {
    return error(fmt::format("expected an array, got {}", describe_json_value(*value_)));
  }
  std::vector<JsonField> out;
  out.reserve(value_->size());
  for (size_t i = 0; i < value_->size(); ++i) out.push_back(item(i));
  return out;
}

JsonField JsonField::item(size_t i) const {
  return JsonField((*value_)[i], source_, fmt::format("{}[{}]", path_, i));
}

Result<std::vector<std::string>> JsonField::keys() const {
  if (!value_->is_object()) {
    return error(fmt::format("expected an object, got {}", describe_json_value(*value_)));
  }
  std::vector<std::string> out;
  for (auto it = value_->begin(); it != value_->end(); ++it) out.push_back(it.key());
  return out;
}

Result<int64_t> JsonField::as_int() const {
  if (!is_integral_number(*value_)) {
    return error(fmt::format("expected an integer, got {}", describe_json_value(*value_)));
  }
  if (value_->is_number_float()) return static_cast<int64_t>(value_->get<double>());
  if (value_->is_number_unsigned() &&
      value_->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return error(fmt::format("integer {} is too large", value_->dump()));
  }
  return value_->get<int64_t>();
}

Result<int64_t> JsonField::as_int_in(IntRange range) const {
  // An integral number beyond int64_t (1e19, 2^64) is out of range rather than no integer.
  const double v = value_->is_number() ? value_->get<double>() : 0.0;
  const bool integral = value_->is_number() && std::isfinite(v) && std::floor(v) == v;
  const bool outside = v < static_cast<double>(range.min) || v > static_cast<double>(range.max);
  if (!(integral && outside)) {
    MOTLEY_ASSIGN_OR_RETURN(int64_t exact, as_int());
    if (exact >= range.min && exact <= range.max) return exact;
  }
  std::string expected = fmt::format("an integer from {} to {}", range.min, range.max);
  if (v < static_cast<double>(range.min) && (range.min == 0 || range.min == 1)) {
    expected = range.min == 1 ? "a positive integer" : "a non-negative integer";
  }
  return error(fmt::format("expected {}, got {}", expected, describe_json_value(*value_)));
}

Result<double> JsonField::as_double() const {
  if (!value_->is_number()) {
    return error(fmt::format("expected a number, got {}", describe_json_value(*value_)));
  }
  if (!std::isfinite(value_->get<double>())) {
    return error(fmt::format("expected a finite number, got {}", describe_json_value(*value_)));
  }
  return value_->get<double>();
}

Result<std::string> JsonField::as_string() const {
  if (!value_->is_string()) {
    return error(fmt::format("expected a string, got {}", describe_json_value(*value_)));
  }
  // Every string motley reads is a name, a kind or a label that ends up in a table or a
  // file name, where a newline or a terminal escape would do harm.
  const std::string& text = value_->get_ref<const std::string&>();
  for (size_t i = 0; i < text.size();) {
    const size_t n = printable_char_length(std::string_view(text).substr(i));
    if (n == 0) {
      return error(fmt::format("expected printable text (no control characters), got {}",
                               describe_json_value(*value_)));
    }
    i += n;
  }
  return text;
}

Result<bool> JsonField::as_bool() const {
  if (!value_->is_boolean()) {
    return error(fmt::format("expected true or false, got {}", describe_json_value(*value_)));
  }
  return value_->get<bool>();
}

Result<int64_t> JsonField::get_int(std::string_view key) const {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, get(key));
  return f.as_int();
}

Result<int64_t> JsonField::get_positive_int(std::string_view key) const {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, get(key));
  MOTLEY_ASSIGN_OR_RETURN(int64_t v, f.as_int());
  if (v <= 0) return f.error(fmt::format("expected a positive integer, got {}", v));
  return v;
}

Result<int64_t> JsonField::get_nonnegative_int(std::string_view key) const {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, get(key));
  MOTLEY_ASSIGN_OR_RETURN(int64_t v, f.as_int());
  if (v < 0) return f.error(fmt::format("expected a non-negative integer, got {}", v));
  return v;
}

Result<int64_t> JsonField::get_int_in(std::string_view key, IntRange range) const {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, get(key));
  return f.as_int_in(range);
}

Result<double> JsonField::get_double(std::string_view key) const {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, get(key));
  return f.as_double();
}

Result<double> JsonField::get_nonnegative_double(std::string_view key) const {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, get(key));
  if (f.json().is_number() && !std::isfinite(f.json().get<double>())) {
    return f.error(fmt::format("expected a finite non-negative number, got {}",
                               describe_json_value(f.json())));
  }
  MOTLEY_ASSIGN_OR_RETURN(double v, f.as_double());
  if (v < 0) {
    return f.error(fmt::format("expected a finite non-negative number, got {}", f.json().dump()));
  }
  return v;
}

Result<double> JsonField::get_positive_double(std::string_view key) const {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, get(key));
  if (f.json().is_number() && !std::isfinite(f.json().get<double>())) {
    return f.error(
        fmt::format("expected a finite positive number, got {}", describe_json_value(f.json())));
  }
  MOTLEY_ASSIGN_OR_RETURN(double v, f.as_double());
  if (v <= 0) {
    return f.error(fmt::format("expected a finite positive number, got {}", f.json().dump()));
  }
  return v;
}

Result<std::string> JsonField::get_string(std::string_view key) const {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, get(key));
  return f.as_string();
}

Result<bool> JsonField::get_bool(std::string_view key) const {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, get(key));
  return f.as_bool();
}

Result<int64_t> JsonField::get_int_or(std::string_view key, int64_t fallback) const {
  return has(key) ? get_int(key) : Result<int64_t>(fallback);
}
Result<int64_t> JsonField::get_positive_int_or(std::string_view key, int64_t fallback) const {
  return has(key) ? get_positive_int(key) : Result<int64_t>(fallback);
}
Result<int64_t> JsonField::get_nonnegative_int_or(std::string_view key, int64_t fallback) const {
  return has(key) ? get_nonnegative_int(key) : Result<int64_t>(fallback);
}
Result<int64_t> JsonField::get_int_in_or(std::string_view key, IntRange range,
                                         int64_t fallback) const {
  return has(key) ? get_int_in(key, range) : Result<int64_t>(fallback);
}
Result<double> JsonField::get_double_or(std::string_view key, double fallback) const {
  return has(key) ? get_double(key) : Result<double>(fallback);
}
Result<double> JsonField::get_double_in(std::string_view key, double low, double high) const {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, get(key));
  const std::string expected = fmt::format("expected a number from {:g} to {:g}", low, high);
  if (f.json().is_number() && !std::isfinite(f.json().get<double>())) {
    return f.error(fmt::format("{}, got {}", expected, describe_json_value(f.json())));
  }
  MOTLEY_ASSIGN_OR_RETURN(double v, f.as_double());
  if (!(v >= low && v <= high)) return f.error(fmt::format("{}, got {:g}", expected, v));
  return v;
}

Result<double> JsonField::get_nonnegative_double_or(std::string_view key, double fallback) const {
  return has(key) ? get_nonnegative_double(key) : Result<double>(fallback);
}
Result<double> JsonField::get_positive_double_or(std::string_view key, double fallback) const {
  return has(key) ? get_positive_double(key) : Result<double>(fallback);
}
Result<std::string> JsonField::get_string_or(std::string_view key, std::string fallback) const {
  return has(key) ? get_string(key) : Result<std::string>(std::move(fallback));
}
Result<bool> JsonField::get_bool_or(std::string_view key, bool fallback) const {
  return has(key) ? get_bool(key) : Result<bool>(fallback);
}

Status JsonField::check_keys(const std::vector<std::string_view>& allowed) const {
  if (!value_->is_object()) {
    return error(fmt::format("expected an object, got {}", describe_json_value(*value_)));
  }
  for (auto it = value_->begin(); it != value_->end(); ++it) {
    bool known = false;
    for (auto a : allowed) known = known || a == it.key();
    if (!known) {
      std::vector<std::string> names(allowed.begin(), allowed.end());
      return child_error(it.key(), fmt::format("unknown field; allowed fields here: {}",
                                               join_alternatives(names)));
    }
  }
  return Status::ok();
}

// Byte counts are doubles in memory but integers in every real file; writing them as integers
// keeps files readable and still round-trips exactly.
Json number_json(double v) {
  if (std::isfinite(v) && std::floor(v) == v && std::fabs(v) < 9.0e15) {
    return static_cast<int64_t>(v);
  }
  return v;
}

}  // namespace motley
