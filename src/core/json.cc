#include "motley/core/json.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

namespace motley {
namespace {

// Python's json writes NaN, Infinity and -Infinity as bare tokens. nlohmann rejects them, so
// outside string literals they are rewritten to placeholders that parse as numbers, and the
// resulting values are patched back after parsing.
constexpr std::string_view kNanPlaceholder = "1.2345678901234567e308";
constexpr std::string_view kInfPlaceholder = "1.7976931348623157e308";

std::string replace_python_tokens(std::string_view text, bool* replaced) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      out.push_back(c);
      if (c == '\\' && i + 1 < text.size()) {
        out.push_back(text[++i]);
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out.push_back(c);
    } else if (text.substr(i, 8) == "Infinity") {
      out.append(kInfPlaceholder);
      i += 7;
      *replaced = true;
    } else if (text.substr(i, 3) == "NaN") {
      out.append(kNanPlaceholder);
      i += 2;
      *replaced = true;
    } else {
      out.push_back(c);
    }
  }
  return out;
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

Json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      return yaml_scalar_to_json(node);
    case YAML::NodeType::Sequence: {
      Json arr = Json::array();
      for (const auto& item : node) arr.push_back(yaml_to_json(item));
      return arr;
    }
    case YAML::NodeType::Map: {
      Json obj = Json::object();
      for (const auto& kv : node) obj[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return obj;
    }
  }
  return nullptr;
}

bool is_integral_number(const Json& j) {
  if (j.is_number_integer() || j.is_number_unsigned()) return true;
  if (!j.is_number_float()) return false;
  double v = j.get<double>();
  return std::isfinite(v) && std::floor(v) == v && std::fabs(v) < 9.0e15;
}

}  // namespace

Result<Json> parse_json(std::string_view text, std::string_view source) {
  bool replaced = false;
  std::string cleaned = replace_python_tokens(text, &replaced);
  Json j = Json::parse(cleaned, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/false);
  if (j.is_discarded()) {
    // Parse again with exceptions only to obtain the position of the error.
    try {
      Json unused = Json::parse(cleaned);
      (void)unused;
    } catch (const Json::parse_error& e) {
      std::string what = e.what();
      auto pos = what.find("syntax error");
      return invalid_argument(fmt::format("{}: malformed JSON: {}", source,
                                          pos == std::string::npos ? what : what.substr(pos)));
    }
    return invalid_argument(fmt::format("{}: malformed JSON", source));
  }
  if (replaced) restore_special_numbers(j);
  return j;
}

Result<std::string> read_text_file(const std::string& path) {
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
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error(fmt::format("{}: read failed", path));
  return ss.str();
}

Result<Json> read_json_file(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_json(text, path);
}

Result<Json> parse_yaml(std::string_view text, std::string_view source) {
  try {
    YAML::Node root = YAML::Load(std::string(text));
    return yaml_to_json(root);
  } catch (const YAML::Exception& e) {
    return invalid_argument(fmt::format("{}: malformed YAML at line {}, column {}: {}", source,
                                        e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

Result<Json> read_yaml_file(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
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
  std::string s = value.dump();
  if (s.size() > 40) s = fmt::format("{}...", s.substr(0, 37));
  return s;
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
  for (size_t i = 0; i < value_->size(); ++i) {
    out.emplace_back((*value_)[i], source_, fmt::format("{}[{}]", path_, i));
  }
  return out;
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

Result<double> JsonField::as_double() const {
  if (!value_->is_number()) {
    return error(fmt::format("expected a number, got {}", describe_json_value(*value_)));
  }
  return value_->get<double>();
}

Result<std::string> JsonField::as_string() const {
  if (!value_->is_string()) {
    return error(fmt::format("expected a string, got {}", describe_json_value(*value_)));
  }
  return value_->get<std::string>();
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

Result<double> JsonField::get_double(std::string_view key) const {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, get(key));
  return f.as_double();
}

Result<double> JsonField::get_nonnegative_double(std::string_view key) const {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, get(key));
  MOTLEY_ASSIGN_OR_RETURN(double v, f.as_double());
  if (!std::isfinite(v) || v < 0) {
    return f.error(fmt::format("expected a finite non-negative number, got {}", f.json().dump()));
  }
  return v;
}

Result<double> JsonField::get_positive_double(std::string_view key) const {
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, get(key));
  MOTLEY_ASSIGN_OR_RETURN(double v, f.as_double());
  if (!std::isfinite(v) || v <= 0) {
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
Result<double> JsonField::get_double_or(std::string_view key, double fallback) const {
  return has(key) ? get_double(key) : Result<double>(fallback);
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
