// Status and Result<T>: how every module boundary reports failure without exceptions or exit().
// A Status carries a code and one human-readable message that already names the file, the
// field and what is allowed. Values; thread-compatible (no shared state).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "motley/core/check.h"

namespace motley {

enum class StatusCode {
  kOk,
  kInvalidArgument,  // the user's input is wrong: bad file, field, value or option (exit 2)
  kNotFound,         // a named thing (file, preset, device type) does not exist (exit 2)
  kInfeasible,       // the input is well formed but cannot be satisfied, e.g. does not fit (exit 2)
  kIoError,          // the operating system refused a read or write (exit 1)
  kInternal,         // a bug in motley (exit 1)
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  // The message stays on one line and prints safely: what user input brings into it that is
  // not a printable character (a newline or a terminal escape in a key or a file name, bytes
  // of a binary file that are not UTF-8) is written as an escape such as \n or \xff.
  Status(StatusCode code, std::string message);

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with context, e.g. the file name: "cluster.yaml: " + message.
  Status with_context(const std::string& context) const;
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status invalid_argument(std::string message);
Status not_found(std::string message);
Status infeasible(std::string message);
Status io_error(std::string message);
Status internal_error(std::string message);

// The process exit code a Status maps to at the command line: 0 ok, 2 bad input, 1 otherwise.
int exit_code_for(const Status& status);

// Either a value or a non-ok Status.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    MOTLEY_CHECK(!std::get<Status>(data_).is_ok(), "a Result built from a Status must be an error");
  }

  bool is_ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return is_ok(); }

  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(data_);
  }
  // REQUIRES: is_ok().
  T& value() & {
    MOTLEY_CHECK(is_ok(), "value() on an error Result: " + std::get<Status>(data_).message());
    return std::get<T>(data_);
  }
  const T& value() const& {
    MOTLEY_CHECK(is_ok(), "value() on an error Result: " + std::get<Status>(data_).message());
    return std::get<T>(data_);
  }
  T&& value() && {
    MOTLEY_CHECK(is_ok(), "value() on an error Result: " + std::get<Status>(data_).message());
    return std::get<T>(std::move(data_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace motley

// Returns the Status of `expr` from the enclosing function when it is an error.
#define MOTLEY_RETURN_IF_ERROR(expr)                    \
  do {                                                  \
    ::motley::Status motley_status_ = (expr);           \
    if (!motley_status_.is_ok()) return motley_status_; \
  } while (false)

#define MOTLEY_CONCAT_INNER_(a, b) a##b
#define MOTLEY_CONCAT_(a, b) MOTLEY_CONCAT_INNER_(a, b)

// `MOTLEY_ASSIGN_OR_RETURN(auto x, f());` binds the value of a Result or returns its Status.
#define MOTLEY_ASSIGN_OR_RETURN(lhs, expr) \
  MOTLEY_ASSIGN_OR_RETURN_IMPL_(MOTLEY_CONCAT_(motley_result_, __LINE__), lhs, expr)
// `lhs` is a declaration and `tmp` a fresh name, neither of which parentheses allow.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define MOTLEY_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.is_ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)
