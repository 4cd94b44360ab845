#include "motley/core/utf8.h"

#include <cstdint>

namespace motley {

size_t utf8_sequence_length(std::string_view text) {
  const auto byte = [text](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  size_t length = 0;
  uint32_t code = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
    code = lead & 0x1fu;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    code = lead & 0x0fu;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    code = lead & 0x07u;
  } else {
    return 0;  // a continuation byte, or a lead byte no valid sequence starts with
  }
  if (text.size() < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xc0u) != 0x80u) return 0;
    code = (code << 6) | (byte(i) & 0x3fu);
  }
  constexpr uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};  // below: an overlong form
  if (code < kSmallest[length] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return length;
}

bool is_valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_sequence_length(text.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

size_t printable_char_length(std::string_view text) {
  const size_t n = utf8_sequence_length(text);
  const auto lead = static_cast<unsigned char>(text[0]);
  if (n == 1) return (lead < 0x20 || lead == 0x7f) ? 0 : 1;
  // U+0080 to U+009F, the C1 controls, are 0xc2 0x80 to 0xc2 0x9f.
  if (n == 2 && lead == 0xc2 && static_cast<unsigned char>(text[1]) <= 0x9f) return 0;
  return n;
}

}  // namespace motley
