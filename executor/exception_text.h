// The message of an exception for a one-line error: LibTorch's c10::Error without the C++ stack
// trace it appends, anything else as it is.
#pragma once

#include <exception>
#include <string>

#include <c10/util/Exception.h>

namespace gpipe::executor {

inline std::string ExceptionText(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

}  // namespace gpipe::executor
