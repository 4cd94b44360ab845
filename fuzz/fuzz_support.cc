#include "fuzz_support.h"

#include <cstdio>
#include <cstdlib>

#include "motley/core/utf8.h"

namespace motley::fuzz {

void fail(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "fuzz check failed: %.*s\n%.*s\n", static_cast<int>(what.size()),
               what.data(), static_cast<int>(detail.size()), detail.data());
  std::abort();
}

void check_refusal(const Status& status) {
  if (status.is_ok()) fail("an error was expected", "");
  const std::string& message = status.message();
  if (status.code() == StatusCode::kInternal || status.code() == StatusCode::kIoError) {
    fail("bad input must be refused as bad input, not as an internal or I/O error", message);
  }
  if (message.rfind(kSource + ":", 0) != 0) {
    fail("the message must start with the input's name", message);
  }
  for (size_t i = 0; i < message.size();) {
    const size_t n = printable_char_length(std::string_view(message).substr(i));
    if (n == 0) fail("the message must print safely (no control byte, valid UTF-8)", message);
    i += n;
  }
}

std::optional<Json> parse_input(const uint8_t* data, size_t size, Syntax syntax) {
  Result<Json> document = syntax == Syntax::kJson ? parse_json(text(data, size), kSource)
                                                  : parse_yaml(text(data, size), kSource);
  if (!document) {
    check_refusal(document.status());
    return std::nullopt;
  }
  return std::move(*document);
}

Result<Json> reparse_yaml(const std::string& written) { return parse_yaml(written, kSource); }

}  // namespace motley::fuzz
