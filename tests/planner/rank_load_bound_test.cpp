// BusiestRankLowerBound against brute force: every way of dealing a few layers to the ranks,
// each rank holding at least its share.
#include "planner/rank_load_bound.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

namespace gpipe {
namespace {

// The least busiest-rank work over every assignment of layers to ranks with at least
// `at_least` layers each (infinity when none has).
double BruteForce(const std::vector<double>& works, int ranks, int at_least) {
  const int layers = static_cast<int>(works.size());
  std::vector<int> rank_of(layers, 0);
  double best = std::numeric_limits<double>::infinity();
  while (true) {
    std::vector<double> load(ranks, 0.0);
    std::vector<int> count(ranks, 0);
    for (int l = 0; l < layers; ++l) {
      load[rank_of[l]] += works[l];
      ++count[rank_of[l]];
    }
    if (*std::min_element(count.begin(), count.end()) >= at_least) {
      best = std::min(best, *std::max_element(load.begin(), load.end()));
    }
    int l = 0;
    while (l < layers && ++rank_of[l] == ranks) rank_of[l++] = 0;
    if (l == layers) break;
  }
  return best;
}

TEST(BusiestRankLowerBound, NeverAboveTheBestDealing) {
  std::mt19937 rng(43);
  int tight = 0, above_spread = 0, cases = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const int ranks = 1 + static_cast<int>(rng() % 3);
    const int at_least = 1 + static_cast<int>(rng() % 3);
    const int layers = ranks * at_least + static_cast<int>(rng() % (9 - ranks * at_least > 0 ? 9 - ranks * at_least : 1));
    if (layers > 9) continue;
    std::vector<double> works(layers);
    const bool equal = rng() % 4 == 0;
    for (double& w : works) w = equal ? 1.0 : 1 + static_cast<double>(rng() % 100);
    const double exact = BruteForce(works, ranks, at_least);
    const double bound = BusiestRankLowerBound(works, ranks, at_least);
    double total = 0;
    for (double w : works) total += w;
    ++cases;
    EXPECT_LE(bound, exact * (1 + 1e-12)) << "layers " << layers << " ranks " << ranks << " at least " << at_least;
    tight += bound >= exact * (1 - 1e-12);
    above_spread += bound > total / ranks * (1 + 1e-12);
  }
  // It is not vacuous: often exact, often above the work spread evenly.
  EXPECT_GT(cases, 300);
  EXPECT_GT(tight, cases / 3);
  EXPECT_GT(above_spread, cases / 4);
}

TEST(BusiestRankLowerBound, EqualBlocksRoundUp) {
  // 42 equal layers on 8 ranks: one rank holds 6 (the spread says 5.25).
  EXPECT_DOUBLE_EQ(BusiestRankLowerBound(std::vector<double>(42, 1.0), 8, 1), 6.0);
  // 16 on 8 ranks of at least 2 each: exactly 2 each.
  EXPECT_DOUBLE_EQ(BusiestRankLowerBound(std::vector<double>(16, 1.0), 8, 2), 2.0);
  // One heavy layer: its rank holds it and at least one more (the lightest).
  EXPECT_DOUBLE_EQ(BusiestRankLowerBound({10, 1, 2, 3}, 2, 2), 11.0);
  EXPECT_EQ(BusiestRankLowerBound({}, 4, 1), 0.0);
}

}  // namespace
}  // namespace gpipe
