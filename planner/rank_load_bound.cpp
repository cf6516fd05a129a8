#include "planner/rank_load_bound.h"

#include <algorithm>
#include <functional>

namespace gpipe {

double BusiestRankLowerBound(std::vector<double> works, int ranks, int at_least) {
  const int layers = static_cast<int>(works.size());
  if (layers == 0) return 0.0;
  std::sort(works.begin(), works.end(), std::greater<double>());
  // suffix[i]: works i.. summed (the lightest layers from i on).
  std::vector<double> suffix(layers + 1, 0.0);
  for (int i = layers; i-- > 0;) suffix[i] = suffix[i + 1] + works[i];
  double bound = 0;
  for (int j = 0; static_cast<long long>(j) * ranks < layers; ++j) {
    const int top = j * ranks + 1;  // the heaviest `top` layers: one rank holds j + 1 of them
    double load = 0;
    for (int i = top - 1 - j; i < top; ++i) load += works[i];
    // The rank holds at_least layers: where the others can be only outside the top ones and
    // enough lie outside, the lightest of those add.
    const int more = at_least - (j + 1);
    if (more > 0 && layers - top >= more) load += suffix[layers - more];
    bound = std::max(bound, load);
  }
  return bound;
}

}  // namespace gpipe
