// "Did you mean": the closest of a set of names to a misspelt one, by edit distance.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace gpipe {

/// Levenshtein distance, case-insensitive.
int EditDistance(const std::string& a, const std::string& b);

/// The names joined for an error ("gpipe, 1f1b, zb-h1"), followed by `; did you mean "x"?` when
/// one name is within a third of `wrong`'s length (at least 2 edits) of it.
std::string ChoicesAndSuggestion(const std::string& wrong, const std::vector<std::string>& names);

/// A name table for an enum: {{value, "name"}, ...}.
template <typename Enum, size_t N>
using NameTable = std::array<std::pair<Enum, const char*>, N>;

/// The name of `value` in `table` ("?" when absent).
template <typename Enum, size_t N>
const char* NameOf(const NameTable<Enum, N>& table, Enum value) {
  for (const auto& [entry, text] : table) {
    if (entry == value) return text;
  }
  return "?";
}

/// The value named `name`; the error says `unknown <what> "x"; known: ...; did you mean "y"?`.
template <typename Enum, size_t N>
Expected<Enum> ParseName(const NameTable<Enum, N>& table, const std::string& name, const char* what) {
  std::vector<std::string> names;
  for (const auto& [value, text] : table) {
    if (name == text) return value;
    names.emplace_back(text);
  }
  return Status::Invalid("unknown " + std::string(what) + " \"" + name + "\"; known: " +
                         ChoicesAndSuggestion(name, names));
}

}  // namespace gpipe
