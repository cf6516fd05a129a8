// Status and Expected<T>: the error type at gpipe-plan's user-facing boundaries (files, flags,
// budgets). A Status is ok or carries one human-readable line that names the file, the field, the
// bad value and, where one exists, what would fix it, and whether the fault is in the input files
// (Invalid) or in the command line (Usage: a flag's value, or flags that do not go together). The
// CLI maps them to exit codes 1 and 2. Internal invariants use assert instead.
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
  /// The input is wrong: a bad file, field or value in it.
  static Status Invalid(std::string message) { return Status(std::move(message), false); }
  /// The command line is wrong: a flag's value, or flags that cannot go together.
  static Status Usage(std::string message) { return Status(std::move(message), true); }

  bool ok() const { return !message_.has_value(); }
  /// Whether the fault is in the command line (Usage) rather than in the input.
  bool usage() const { return usage_; }
  /// REQUIRES: !ok().
  const std::string& message() const {
    assert(!ok());
    return *message_;
  }
  /// A copy whose message is prefixed with `context + ": "`; ok stays ok.
  Status WithContext(const std::string& context) const {
    return ok() ? *this : Status(context + ": " + *message_, usage_);
  }
  /// The same message, as a fault of the command line (a flag's value that failed to parse).
  Status AsUsage() const { return ok() ? *this : Status(*message_, true); }

 private:
  Status(std::string message, bool usage) : message_(std::move(message)), usage_(usage) {}
  std::optional<std::string> message_;
  bool usage_ = false;
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
