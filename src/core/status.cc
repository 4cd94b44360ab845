#include "motley/core/status.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "motley/core/utf8.h"

namespace motley {

namespace internal {
void check_failed(const char* condition, const char* file, int line, const std::string& message) {
  fmt::print(stderr, "motley: internal error: check failed: {} at {}:{}: {}\n", condition, file,
             line, message);
  std::abort();
}
}  // namespace internal

namespace {

std::string one_line(std::string message) {
  std::string out;
  for (size_t i = 0; i < message.size();) {
    const size_t n = printable_char_length(std::string_view(message).substr(i));
    if (n > 0) {
      out.append(message, i, n);
      i += n;
      continue;
    }
    const char c = message[i++];
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    }
  }
  return out;
}

}  // namespace

Status::Status(StatusCode code, std::string message)
    : code_(code), message_(one_line(std::move(message))) {}

Status Status::with_context(const std::string& context) const {
  if (is_ok()) return *this;
  return Status(code_, fmt::format("{}: {}", context, message_));
}

std::string Status::to_string() const { return is_ok() ? std::string("ok") : message_; }

Status invalid_argument(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
Status not_found(std::string message) { return Status(StatusCode::kNotFound, std::move(message)); }
Status infeasible(std::string message) {
  return Status(StatusCode::kInfeasible, std::move(message));
}
Status io_error(std::string message) { return Status(StatusCode::kIoError, std::move(message)); }
Status internal_error(std::string message) {
  return Status(StatusCode::kInternal, std::move(message));
}

int exit_code_for(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kInfeasible:
      return 2;
    case StatusCode::kIoError:
    case StatusCode::kInternal:
      return 1;
  }
  return 1;
}

}  // namespace motley
