#include "core/suggest.h"

#include <algorithm>
#include <cctype>

namespace gpipe {

int EditDistance(const std::string& a, const std::string& b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int above = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string ChoicesAndSuggestion(const std::string& wrong, const std::vector<std::string>& names) {
  std::string text;
  const std::string* best = nullptr;
  int best_distance = std::max<int>(2, static_cast<int>(wrong.size()) / 3) + 1;
  for (const std::string& name : names) {
    if (!text.empty()) text += ", ";
    text += name;
    const int d = EditDistance(wrong, name);
    if (d < best_distance) {
      best_distance = d;
      best = &name;
    }
  }
  if (best != nullptr) text += "; did you mean \"" + *best + "\"?";
  return text;
}

}  // namespace gpipe
