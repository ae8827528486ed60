// Status and Result: how every fallible call in the library reports failure.
// The library never throws across its API, never prints and never exits; a
// caller gets a code it can branch on and a message it can show a person.
#pragma once

#include <string>
#include <utility>

namespace flashscope {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller passed something malformed (null, bad stride, bad shape)
  kUnsupported,      // well-formed, but this build or device does not do it (head_dim 96, no CUDA)
  kDeviceError,      // the CUDA runtime reported an error
  kOutOfMemory,      // host or device allocation failed, or a pool is full
  kIoError,          // a file could not be read or written
  kCorruptData,      // a file's contents are inconsistent
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: q.data is null" — for logs and error dialogs.
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status device_error(std::string m) { return {StatusCode::kDeviceError, std::move(m)}; }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design, like std::expected
  Result(Status status) : status_(std::move(status)) {}  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return value_; }
  const T& value() const& { return value_; }
  T&& value() && { return std::move(value_); }
  T& operator*() { return value_; }
  const T& operator*() const { return value_; }
  T* operator->() { return &value_; }
  const T* operator->() const { return &value_; }

 private:
  Status status_;
  T value_{};
};

}  // namespace flashscope

// Propagates a non-OK Status out of the enclosing function.
#define FLASHSCOPE_RETURN_IF_ERROR(expr)             \
  do {                                               \
    ::flashscope::Status fs_status_ = (expr);        \
    if (!fs_status_.ok()) return fs_status_;         \
  } while (0)
