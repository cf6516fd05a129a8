// Status and Expected<T>: the error type at gpipe-plan's user-facing boundaries (files, flags,
// budgets). A Status is ok or carries one human-readable line that names the file, the field, the
// bad value and, where one exists, what would fix it. Internal invariants use assert instead.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace gpipe {

/// The outcome of an operation that can fail because of its input.
class Status {
 public:
  /// An ok status.
  Status() = default;

  static Status Ok() { return Status(); }
  /// The input is wrong: a bad field, value, flag or file.
  static Status Invalid(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !message_.has_value(); }
  /// REQUIRES: !ok().
  const std::string& message() const {
    assert(!ok());
    return *message_;
  }
  /// A copy whose message is prefixed with `context + ": "`; ok stays ok.
  Status WithContext(const std::string& context) const {
    return ok() ? *this : Status(context + ": " + *message_);
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

/// A value of type T, or the Status that explains why there is none.
template <typename T>
class Expected {
 public:
  Expected(T value) : data_(std::move(value)) {}  // NOLINT: implicit by design
  Expected(Status status) : data_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(data_).ok());
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return ok(); }

  /// REQUIRES: ok().
  T& value() & {
    assert(ok());
    return std::get<T>(data_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<T>(data_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(data_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  /// The error; REQUIRES: !ok().
  const Status& status() const {
    assert(!ok());
    return std::get<Status>(data_);
  }

 private:
  std::variant<T, Status> data_;
};

}  // namespace gpipe

/// Returns from the enclosing function when `expr` (a Status) is not ok.
#define GPIPE_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::gpipe::Status gpipe_status_ = (expr);  \
    if (!gpipe_status_.ok()) return gpipe_status_; \
  } while (0)
