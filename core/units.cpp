#include "core/units.h"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace gpipe {
namespace {

struct Suffix {
  std::string_view name;
  double factor;
};

constexpr std::array<Suffix, 10> kSuffixes = {{
    {"B", 1.0},
    {"KiB", 1024.0},
    {"MiB", 1024.0 * 1024},
    {"GiB", 1024.0 * 1024 * 1024},
    {"TiB", 1024.0 * 1024 * 1024 * 1024},
    {"KB", 1e3},
    {"MB", 1e6},
    {"GB", 1e9},
    {"TB", 1e12},
    {"", 1.0},
}};

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

Expected<int64_t> ParseBytes(std::string_view text) {
  const std::string owned(text);
  const char* begin = owned.c_str();
  char* end = nullptr;
  const double number = std::strtod(begin, &end);
  std::string_view suffix(end);
  while (!suffix.empty() && suffix.front() == ' ') suffix.remove_prefix(1);
  const auto bad = [&] {
    return Status::Invalid("\"" + owned +
                           "\" is not a byte size; write a number with an optional suffix: "
                           "B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB "
                           "(powers of 1000), e.g. 80GiB");
  };
  if (end == begin || !std::isfinite(number) || number < 0) return bad();
  for (const Suffix& s : kSuffixes) {
    if (EqualsIgnoreCase(suffix, s.name)) {
      const double bytes = number * s.factor;
      if (bytes > 9.0e18) return bad();
      return static_cast<int64_t>(std::llround(bytes));
    }
  }
  return bad();
}

std::string FormatBytes(double bytes) {
  static constexpr std::array<const char*, 5> kNames = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  double value = bytes;
  while (std::fabs(value) >= 1024.0 && unit + 1 < kNames.size()) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[64];
  if (unit == 0) {
    std::snprintf(buffer, sizeof buffer, "%.0f B", value);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.2f %s", value, kNames[unit]);
  }
  return buffer;
}

std::string FormatMemoryLimit(double bytes) {
  static constexpr std::array<std::pair<double, const char*>, 3> kDecimal = {
      {{1e12, "TB"}, {1e9, "GB"}, {1e6, "MB"}}};
  const bool binary = std::fmod(bytes, 1024.0 * 1024.0) == 0.0;
  if (!binary) {
    for (const auto& [unit, name] : kDecimal) {
      if (bytes >= unit && std::fmod(bytes, unit) == 0.0) {
        char buffer[48];
        std::snprintf(buffer, sizeof buffer, "%.0f %s = ", bytes / unit, name);
        return buffer + FormatBytes(bytes);
      }
    }
  }
  return FormatBytes(bytes);
}

std::string FormatMs(double ms) {
  char buffer[64];
  if (std::fabs(ms) >= 10000.0) {
    std::snprintf(buffer, sizeof buffer, "%.2f s", ms / 1000.0);
  } else if (std::fabs(ms) >= 100.0) {
    std::snprintf(buffer, sizeof buffer, "%.1f ms", ms);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.3f ms", ms);
  }
  return buffer;
}

}  // namespace gpipe
