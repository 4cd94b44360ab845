// UTF-8 as motley's messages and files need it: whether text is valid UTF-8, and which of its
// characters print safely on a terminal. Free functions; thread-safe.
#pragma once

#include <cstddef>
#include <string_view>

namespace motley {

// The length in bytes of the valid UTF-8 sequence `text` starts with (1 for ASCII), or 0 when
// it starts with none: a continuation byte, a truncated sequence, an overlong form, a UTF-16
// surrogate or a code point past U+10FFFF. REQUIRES: !text.empty().
size_t utf8_sequence_length(std::string_view text);

// Whether all of `text` is valid UTF-8.
bool is_valid_utf8(std::string_view text);

// The length in bytes of the printable character `text` starts with: a valid UTF-8 sequence
// of a character that is not a C0 or C1 control or DEL; 0 when `text` starts otherwise.
// REQUIRES: !text.empty().
size_t printable_char_length(std::string_view text);

}  // namespace motley
