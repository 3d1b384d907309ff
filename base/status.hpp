// Status and StatusOr: errors as values.
//
// A Status is either ok or carries a code and a lower-case message that names
// the subject and the measured fact ("open /tmp/x: permission denied"). The
// callee reports the bare cause; each caller adds what it was doing with
// Annotate(): `rendezvous: connect node3:29500: connection refused`.
// Library code returns these; only launcher/main.cpp maps them to exit codes.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace ddprun {

enum class StatusCode {
  kOk,
  kInvalidArgument,   // the user gave something wrong (exit 2 at the CLI)
  kNotFound,          // a file, program or key that does not exist
  kPermissionDenied,  // exists but cannot be used
  kUnimplemented,     // a torchrun option that ddprun does not support yet
  kUnavailable,       // a resource limit, a port, a device not there
  kDeadlineExceeded,
  kAborted,   // the job was closed by another agent (see the message)
  kInternal,  // a system call failed unexpectedly
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns this status with `context: ` put in front of the message.
  Status Annotate(std::string_view context) const {
    if (ok()) return *this;
    return Status(code_, std::string(context) + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Builds a kInternal status from a failed system call: "what: strerror(err)".
Status ErrnoStatus(std::string_view what, int err);

namespace internal {
// Ends the process (abort) after writing "ddprun: <what>: <status's code and
// message>" to stderr. For programming errors only: a StatusOr read without
// checking ok(), or built from an ok Status.
[[noreturn]] void StatusOrFailure(const char* what, const Status& status);
}  // namespace internal

// A value or the Status that explains why there is none.
//
// Reading the value (value(), *, ->) of a StatusOr that holds an error is a
// checked failure, in every build type: the process aborts with a message that
// names the error. Check ok() first, or use value_or(). Constructing one from
// an ok Status is the same failure (there would be neither value nor error).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) internal::StatusOrFailure("StatusOr constructed from an ok Status", status_);
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    Checked();
    return *value_;
  }
  const T& value() const& {
    Checked();
    return *value_;
  }
  T&& value() && {
    Checked();
    return std::move(*value_);
  }
  T value_or(T fallback) const { return ok() ? *value_ : std::move(fallback); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void Checked() const {
    if (!status_.ok()) internal::StatusOrFailure("value of a StatusOr holding an error", status_);
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace ddprun
