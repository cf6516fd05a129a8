#include "planner/rank_balance.h"

#include <algorithm>

namespace gpipe::partition_internal {

std::vector<int> BalanceRankLoads(std::vector<int> ends, const std::vector<int>& stage_rank, int ranks,
                                  const std::function<double(int, int)>& work) {
  const int stages = static_cast<int>(ends.size());
  std::vector<double> load(ranks, 0.0);
  for (int s = 0, a = 0; s < stages; a = ends[s], ++s) load[stage_rank[s]] += work(a, ends[s]);
  // A move must lower the pair's larger load by more than rounding (prefix sums) could account for.
  const auto lowers = [](double before, double after) { return after < before * (1 - 1e-12); };
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s + 1 < stages; ++s) {
      const int left = stage_rank[s], right = stage_rank[s + 1];
      if (left == right) continue;  // (the turn of a V: both stages on one rank)
      const int first = s == 0 ? 0 : ends[s - 1];
      // The boundary's layer l moves from the busier side to the other, one at a time.
      while (true) {
        const int b = ends[s];
        const double before = std::max(load[left], load[right]);
        if (load[left] > load[right] && b - 1 > first) {
          const double w_left = work(first, b - 1) - work(first, b), w_right = work(b - 1, ends[s + 1]) - work(b, ends[s + 1]);
          if (!lowers(before, std::max(load[left] + w_left, load[right] + w_right))) break;
          load[left] += w_left;
          load[right] += w_right;
          --ends[s];
        } else if (load[right] > load[left] && b + 1 < ends[s + 1]) {
          const double w_left = work(first, b + 1) - work(first, b), w_right = work(b + 1, ends[s + 1]) - work(b, ends[s + 1]);
          if (!lowers(before, std::max(load[left] + w_left, load[right] + w_right))) break;
          load[left] += w_left;
          load[right] += w_right;
          ++ends[s];
        } else {
          break;
        }
        moved = true;
      }
    }
  }
  return ends;
}

}  // namespace gpipe::partition_internal
