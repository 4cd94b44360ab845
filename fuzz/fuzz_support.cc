#include "fuzz_support.h"

#include <cstdio>
#include <cstdlib>

#include "motley/core/utf8.h"
#include "motley/model/model_json.h"

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
  if (message.rfind(kSource + ":", 0) != 0)
    fail("the message must start with the input's name", message);
  for (size_t i = 0; i < message.size();) {
    const size_t n = printable_char_length(std::string_view(message).substr(i));
    if (n == 0) fail("the message must print safely (no control byte, valid UTF-8)", message);
    i += n;
  }
}

void check_same(const Json& first, const Json& second, std::string_view what) {
  constexpr auto kReplace = Json::error_handler_t::replace;
  if (first != second) {
    fail(what, first.dump(-1, ' ', false, kReplace) + "\n" + second.dump(-1, ' ', false, kReplace));
  }
}

void check_model_round_trip(const ModelSpec& model) {
  const Json written = model_to_json(model);
  Result<ModelSpec> read = model_from_json(written, kSource);
  if (!read) fail("a written model must read back", read.status().message());
  check_same(written, model_to_json(*read), "a written model must read back the same");
}

}  // namespace motley::fuzz
