// "Did you mean": the closest of a set of names to a misspelt one, by edit distance.
#pragma once

#include <string>
#include <vector>

namespace gpipe {

/// Levenshtein distance, case-insensitive.
int EditDistance(const std::string& a, const std::string& b);

/// The names joined for an error ("gpipe, 1f1b, zb-h1"), followed by `; did you mean "x"?` when
/// one name is within a third of `wrong`'s length (at least 2 edits) of it.
std::string ChoicesAndSuggestion(const std::string& wrong, const std::vector<std::string>& names);

}  // namespace gpipe
