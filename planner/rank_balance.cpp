#include "planner/rank_balance.h"

#include <algorithm>

namespace gpipe::partition_internal {

namespace {

std::vector<double> RankLoads(const std::vector<int>& ends, const std::vector<int>& stage_rank, int ranks,
                              const std::function<double(int, int)>& work) {
  std::vector<double> load(ranks, 0.0);
  for (size_t s = 0, a = 0; s < ends.size(); a = ends[s], ++s) load[stage_rank[s]] += work(static_cast<int>(a), ends[s]);
  return load;
}

}  // namespace

std::vector<int> BalanceRankLoads(std::vector<int> ends, const std::vector<int>& stage_rank, int ranks,
                                  const std::function<double(int, int)>& work) {
  const int stages = static_cast<int>(ends.size());
  std::vector<double> load = RankLoads(ends, stage_rank, ranks, work);
  // A move must lower the pair's larger load by more than rounding (prefix sums) could account for.
  const auto lowers = [](double before, double after) { return after < before * (1 - 1e-12); };
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s + 1 < stages; ++s) {
      const int left = stage_rank[s], right = stage_rank[s + 1];
      if (left == right) continue;  // (the turn of a V: both stages on one rank)
      const int first = s == 0 ? 0 : ends[s - 1];
      // The boundary's layer moves from the busier side to the other, one at a time, while each
      // side keeps a layer.
      while (load[left] != load[right]) {
        const int b = ends[s], to = load[left] > load[right] ? b - 1 : b + 1;
        if (to <= first || to >= ends[s + 1]) break;
        const double w_left = work(first, to) - work(first, b), w_right = work(to, ends[s + 1]) - work(b, ends[s + 1]);
        if (!lowers(std::max(load[left], load[right]), std::max(load[left] + w_left, load[right] + w_right))) break;
        load[left] += w_left;
        load[right] += w_right;
        ends[s] = to;
        moved = true;
      }
    }
  }
  return ends;
}

double BusiestRankLoad(const std::vector<int>& ends, const std::vector<int>& stage_rank, int ranks,
                       const std::function<double(int, int)>& work) {
  const std::vector<double> load = RankLoads(ends, stage_rank, ranks, work);
  return *std::max_element(load.begin(), load.end());
}

std::vector<int> QuotaCut(int layers, const std::vector<int>& stage_rank, int ranks,
                          const std::function<double(int, int)>& work) {
  const int stages = static_cast<int>(stage_rank.size());
  if (layers < stages || stages == 0) return {};
  std::vector<int> index(stages), count(ranks, 0);  // each stage's place among its rank's
  for (int s = 0; s < stages; ++s) index[s] = count[stage_rank[s]]++;
  std::vector<int> ends(stages), best;
  std::vector<double> load(ranks);
  // The cut under `cap` into `ends`; its busiest rank.
  const auto cut = [&](double cap) {
    std::fill(load.begin(), load.end(), 0.0);
    for (int s = 0, a = 0; s < stages; ++s) {
      const int r = stage_rank[s];
      const int last_end = layers - (stages - 1 - s);
      const double quota = cap * (index[s] + 1) / count[r];
      int e = s == stages - 1 ? layers : a + 1;
      while (e < last_end && load[r] + work(a, e + 1) <= quota) ++e;
      load[r] += work(a, e);
      ends[s] = e;
      a = e;
    }
    return *std::max_element(load.begin(), load.end());
  };
  double lo = work(0, layers) / ranks, hi = work(0, layers), best_busiest = 0;
  for (int i = 0; i < 48 && hi > lo * (1 + 1e-9); ++i) {
    const double cap = (lo + hi) / 2;
    const double busiest = cut(cap);
    if (best.empty() || busiest < best_busiest) {
      best = ends;
      best_busiest = busiest;
    }
    (busiest <= cap ? hi : lo) = cap;
  }
  if (best.empty()) {  // (one rank: no bracket to bisect)
    cut(hi);
    best = ends;
  }
  return best;
}

}  // namespace gpipe::partition_internal
