// Small text helpers for the tables the subcommands print.
#pragma once

#include <cstdio>
#include <string>

namespace gpipe {

/// printf-style formatting of one number, e.g. Format("%.1f%%", 12.34) == "12.3%".
inline std::string Format(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

/// printf-style formatting of any arguments, e.g. Sprintf("step %d/%d", 3, 10).
template <typename... Args>
std::string Sprintf(const char* format, Args... args) {
  const int n = std::snprintf(nullptr, 0, format, args...);
  if (n <= 0) return {};
  std::string text(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(text.data(), text.size(), format, args...);
  text.resize(static_cast<size_t>(n));
  return text;
}

/// `text` padded with spaces to `width`, then one space: a table cell.
inline std::string Pad(std::string text, size_t width) {
  if (text.size() < width) text += std::string(width - text.size(), ' ');
  return text + " ";
}

}  // namespace gpipe
