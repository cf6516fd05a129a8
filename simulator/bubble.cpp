#include "simulator/bubble.h"

#include <algorithm>

namespace gpipe {

double BubbleFraction(const std::vector<RankSpan>& ranks) {
  double span = 0;
  for (const RankSpan& r : ranks) span = std::max(span, r.end_ms);
  if (ranks.empty() || span <= 0) return 0.0;
  double idle = 0;
  for (const RankSpan& r : ranks) idle += r.wait_ms + (span - r.end_ms);
  return std::clamp(idle / (static_cast<double>(ranks.size()) * span), 0.0, 1.0);
}

}  // namespace gpipe
