#include "option_checks.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

namespace motley::cli {
namespace {

// The whole of `text` as a T, or nullopt when it is not one (a sign, spaces, a fraction).
template <class T>
std::optional<T> whole_integer(const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end) return std::nullopt;
  return value;
}

std::optional<double> whole_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* stop = nullptr;
  const double value = std::strtod(text.c_str(), &stop);
  if (stop != text.c_str() + text.size()) return std::nullopt;
  return value;
}

// What the message says was given.
std::string given(const std::string& text) { return text.empty() ? "an empty value" : text; }

}  // namespace

CLI::Validator integer_in(int64_t min, int64_t max) {
  const std::string allowed = fmt::format("an integer from {} to {}", min, max);
  return CLI::Validator(
      [min, max, allowed](std::string& text) -> std::string {
        const std::optional<int64_t> value = whole_integer<int64_t>(text);
        if (value && *value >= min && *value <= max) return "";
        return fmt::format("expected {}, got {}", allowed, given(text));
      },
      fmt::format("{}..{}", min, max));
}

CLI::Validator unsigned_integer() {
  const std::string allowed =
      fmt::format("an integer from 0 to {}", std::numeric_limits<uint64_t>::max());
  return CLI::Validator(
      [allowed](std::string& text) -> std::string {
        if (whole_integer<uint64_t>(text)) return "";
        return fmt::format("expected {}, got {}", allowed, given(text));
      },
      "UNSIGNED");
}

CLI::Validator positive_number(double max) {
  const std::string allowed = std::isinf(max) ? std::string("a finite number above 0")
                                              : fmt::format("a number above 0 and at most {}", max);
  return CLI::Validator(
      [max, allowed](std::string& text) -> std::string {
        const std::optional<double> value = whole_number(text);
        if (value && std::isfinite(*value) && *value > 0 && *value <= max) return "";
        return fmt::format("expected {}, got {}", allowed, given(text));
      },
      "POSITIVE");
}

CLI::Validator wait_seconds() {
  const std::string allowed =
      fmt::format("a number of seconds from {} to {}", kMinWaitSeconds, kMaxOptionSeconds);
  return CLI::Validator(
      [allowed](std::string& text) -> std::string {
        const std::optional<double> value = whole_number(text);
        if (value && *value >= kMinWaitSeconds && *value <= kMaxOptionSeconds) return "";
        return fmt::format("expected {}, got {}", allowed, given(text));
      },
      "SECONDS");
}

CLI::Validator fraction_below(double max) {
  const std::string allowed = fmt::format("a number from 0 to below {}", max);
  return CLI::Validator(
      [max, allowed](std::string& text) -> std::string {
        const std::optional<double> value = whole_number(text);
        if (value && std::isfinite(*value) && *value >= 0 && *value < max) return "";
        return fmt::format("expected {}, got {}", allowed, given(text));
      },
      "FRACTION");
}

}  // namespace motley::cli
