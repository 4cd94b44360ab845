#pragma once

// The names of an enum's values, written once as a table: names[i] names the enumerator of value
// i (motley's enums count 0, 1, 2, ... in declaration order). The name-of, parse and list
// functions of every enum read such a table, so adding an enumerator is one name and the three can
// never disagree. Each table sits next to a static_assert that it names the last enumerator.

#include <cctype>
#include <cstddef>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace motley {

// names[value], or `fallback` for a value past the table.
template <class Enum, size_t N>
constexpr const char* name_in(const char* const (&names)[N], Enum value,
                              const char* fallback = "?") {
  const auto i = static_cast<size_t>(value);
  return i < N ? names[i] : fallback;
}

// Whether two names are the same up to case, with '-', '_' and ' ' counted as one separator:
// "ZB_H1", "zb-h1" and "zb h1" are one name.
inline bool same_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  const auto key = [](unsigned char c) {
    return c == '_' || c == ' ' ? '-' : static_cast<char>(std::tolower(c));
  };
  for (size_t i = 0; i < a.size(); ++i) {
    if (key(a[i]) != key(b[i])) return false;
  }
  return true;
}

// The value `name` names in `names` (see same_name), or nullopt.
template <class Enum, size_t N>
std::optional<Enum> parse_name_in(const char* const (&names)[N], std::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (same_name(name, names[i])) return static_cast<Enum>(i);
  }
  return std::nullopt;
}

// Every name, in order: what a help text or an error lists.
template <size_t N>
std::vector<std::string> names_in(const char* const (&names)[N]) {
  return std::vector<std::string>(std::begin(names), std::end(names));
}

}  // namespace motley
