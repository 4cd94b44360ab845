#include "motley/core/status.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace motley {

namespace internal {
void check_failed(const char* condition, const char* file, int line, const std::string& message) {
  fmt::print(stderr, "motley: internal error: check failed: {} at {}:{}: {}\n", condition, file,
             line, message);
  std::abort();
}
}  // namespace internal

namespace {

bool is_control(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

std::string one_line(std::string message) {
  if (std::none_of(message.begin(), message.end(), is_control)) return message;
  std::string out;
  out.reserve(message.size() + 8);
  for (char c : message) {
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out += is_control(c) ? fmt::format("\\x{:02x}", static_cast<unsigned char>(c))
                             : std::string(1, c);
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
