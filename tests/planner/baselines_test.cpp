// The ported baselines against their originals. Every expected value below was printed by the
// original Python, copied verbatim and run with python3 (numpy 2.4 for DeepSpeed):
//   kakaobrain/torchgpipe a1b4ee2 (v0.0.7): torchgpipe/balance/blockpartition.py `solve`, through
//     torchgpipe/balance/__init__.py `balance_cost`; boundaries are its block sizes summed up;
//   microsoft/DeepSpeed 38327e0: deepspeed/runtime/utils.py `partition_uniform`,
//     `partition_balanced`;
//   microsoft/DeepSpeed 2bdf061^ (v0.12.4): the same file's `prefix_sum_inc`, `_lprobe`,
//     `_rb_partition_balanced`, `partition_balanced(weights, num_parts, eps=1e-3)`.
// To regenerate: import those functions and print, e.g. `balance_cost([1, 1, 1, 10, 1, 1], 3)`.
// The ports also matched the originals on 40,000 random inputs (L <= 40, integer and float costs).
#include "planner/baselines.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace gpipe {
namespace {

struct Case {
  std::vector<double> costs;
  int parts;
  std::vector<int> bounds;
};

const std::vector<double> kRamp = {1, 2, 3, 4, 5, 6};
const std::vector<double> kSpike = {1, 1, 1, 10, 1, 1};
const std::vector<double> kEnds = {5, 1, 1, 1, 1, 1, 1, 5};
// Python: random.seed(12); [round(random.uniform(0.5, 9.5), 1) for _ in range(12)].
const std::vector<double> kRandom12 = {4.8, 6.4, 6.5, 1.8, 0.6, 3.9, 3.0, 7.8, 6.7, 5.9, 5.5, 6.5};
// Trainable parameters per layer of a small GPT-2-like stack: embedding, dropout, six blocks, a
// layer without parameters, the final norm, the head.
const std::vector<double> kParams = {38597376, 0,       7087872, 7087872, 7087872, 7087872,
                                     7087872,  7087872, 0,       1536,    38597376};

double MaxStage(const std::vector<double>& costs, const std::vector<int>& bounds) {
  double worst = 0;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    double stage = 0;
    for (int l = bounds[s]; l < bounds[s + 1]; ++l) stage += costs[l];
    worst = std::max(worst, stage);
  }
  return worst;
}

// The least possible largest stage over all cuts of costs[first:] into `parts` non-empty stages.
double BestMaxStage(const std::vector<double>& costs, int parts, int first = 0) {
  const int layers = static_cast<int>(costs.size());
  double head = 0;
  double best = 1e300;
  for (int end = first + 1; end <= layers - (parts - 1); ++end) {
    head += costs[end - 1];
    const double rest = parts == 1 ? 0 : BestMaxStage(costs, parts - 1, end);
    if (parts > 1 || end == layers) best = std::min(best, std::max(head, rest));
  }
  return best;
}

TEST(TorchgpipeBlockPartition, MatchesTorchgpipe) {
  const std::vector<Case> cases = {
      {kRamp, 1, {0, 6}},
      {kRamp, 2, {0, 4, 6}},  // torchgpipe's own test_blockpartition
      {kRamp, 3, {0, 3, 5, 6}},
      {kRamp, 6, {0, 1, 2, 3, 4, 5, 6}},
      {kSpike, 2, {0, 3, 6}},
      {kSpike, 3, {0, 2, 4, 6}},
      {kSpike, 4, {0, 1, 2, 3, 6}},
      {kSpike, 5, {0, 1, 2, 3, 4, 6}},
      {kEnds, 2, {0, 4, 8}},
      {kEnds, 3, {0, 2, 4, 8}},
      {kEnds, 4, {0, 2, 4, 6, 8}},
      {kEnds, 5, {0, 1, 2, 3, 4, 8}},
      {kEnds, 8, {0, 1, 2, 3, 4, 5, 6, 7, 8}},
      {kRandom12, 1, {0, 12}},
      {kRandom12, 2, {0, 7, 12}},
      {kRandom12, 3, {0, 4, 9, 12}},
      {kRandom12, 4, {0, 3, 8, 10, 12}},
      {kRandom12, 5, {0, 2, 4, 8, 10, 12}},
      {kRandom12, 12, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
      {kParams, 3, {0, 3, 6, 11}},
      {kParams, 4, {0, 2, 5, 7, 11}},
      {{0, 0}, 2, {0, 1, 2}},  // torchgpipe's test_blockpartition_zeros
      {{3}, 1, {0, 1}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(TorchgpipeBlockPartition(c.costs, c.parts), c.bounds) << "K=" << c.parts;
  }
}

// Equal costs stop the loop at once, on the starting split: L // K layers per block and the
// remainder on the last one.
TEST(TorchgpipeBlockPartition, EqualCostsKeepTheStartingSplit) {
  EXPECT_EQ(TorchgpipeBalanceCost({7, 7, 7, 7, 7}, 3).balance, (std::vector<int>{1, 1, 3}));
  EXPECT_EQ(TorchgpipeBlockPartition({7, 7, 7, 7, 7}, 3), (std::vector<int>{0, 1, 2, 5}));
}

// Costs are normalized to [0, 1] and the loop stops once the largest block is within 1 of the
// smallest: with one heavy layer any split qualifies, so the starting split is kept.
TEST(TorchgpipeBlockPartition, NotMinMaxOptimal) {
  const std::vector<double> costs = {1, 1, 2};
  const std::vector<int> bounds = TorchgpipeBlockPartition(costs, 2);
  EXPECT_EQ(bounds, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(MaxStage(costs, bounds), 3);
  EXPECT_EQ(BestMaxStage(costs, 2), 2);  // {0, 2, 3}

  EXPECT_EQ(MaxStage(kSpike, TorchgpipeBlockPartition(kSpike, 4)), 12);  // {0, 1, 2, 3, 6}
  EXPECT_EQ(BestMaxStage(kSpike, 4), 10);  // {0, 2, 3, 4, 6}
}

// Where blocks overlap, torchgpipe returns a balance with an empty block that sums to more than
// L (its GPipe rejects it); there is no partition to give.
TEST(TorchgpipeBlockPartition, UnusableBalance) {
  const TorchgpipeSolve solve = TorchgpipeBalanceCost({0, 0, 0, 5, 5}, 4);
  EXPECT_TRUE(solve.returned);
  EXPECT_EQ(solve.balance, (std::vector<int>{4, 1, 0, 1}));
  EXPECT_TRUE(TorchgpipeBlockPartition({0, 0, 0, 5, 5}, 4).empty());
}

// Here the original never returns (checked with a timeout): the smallest block is empty, sits
// past the sequence end, and its split keeps moving right.
TEST(TorchgpipeBlockPartition, NeverReturns) {
  const std::vector<double> costs = {0, 2, 0, 0, 3, 3, 0, 3, 0, 0, 0, 3, 0};
  const TorchgpipeSolve solve = TorchgpipeBalanceCost(costs, 8);
  EXPECT_FALSE(solve.returned);
  EXPECT_EQ(solve.moves, TorchgpipeMoveLimit(13, 8));
  EXPECT_TRUE(solve.balance.empty());
  EXPECT_TRUE(TorchgpipeBlockPartition(costs, 8).empty());
}

TEST(DeepSpeedUniform, MatchesDeepSpeed) {
  struct Uniform {
    int items, parts;
    std::vector<int> bounds;
  };
  const std::vector<Uniform> cases = {
      {10, 4, {0, 3, 6, 8, 10}},
      {12, 5, {0, 3, 6, 8, 10, 12}},
      {11, 3, {0, 4, 8, 11}},
      {6, 4, {0, 2, 4, 5, 6}},
      {7, 1, {0, 7}},
      {8, 8, {0, 1, 2, 3, 4, 5, 6, 7, 8}},
      {3, 5, {0, 1, 2, 3, 3, 3}},
      {0, 3, {0, 0, 0, 0}},
  };
  for (const Uniform& c : cases) {
    EXPECT_EQ(DeepSpeedUniform(c.items, c.parts), c.bounds) << c.items << " over " << c.parts;
  }
}

TEST(DeepSpeedBalanced, MatchesDeepSpeed) {
  const std::vector<Case> cases = {
      {kRamp, 1, {0, 6}},
      {kRamp, 2, {0, 4, 6}},
      {kRamp, 5, {0, 2, 3, 4, 5, 6}},
      {kSpike, 3, {0, 3, 4, 6}},
      {kSpike, 4, {0, 3, 4, 5, 6}},
      {kSpike, 6, {0, 1, 2, 3, 4, 5, 6}},
      {kEnds, 2, {0, 4, 8}},
      {kEnds, 3, {0, 2, 7, 8}},
      {kEnds, 4, {0, 1, 4, 7, 8}},
      {kEnds, 5, {0, 1, 3, 5, 7, 8}},
      {kRandom12, 1, {0, 12}},
      {kRandom12, 3, {0, 5, 9, 12}},
      {kRandom12, 4, {0, 3, 8, 10, 12}},
      {kRandom12, 5, {0, 2, 6, 8, 10, 12}},
      {kRandom12, 12, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
      {kParams, 2, {0, 5, 11}},
      {kParams, 3, {0, 2, 9, 11}},
      {kParams, 4, {0, 2, 5, 10, 11}},
      {kParams, 5, {0, 2, 4, 6, 10, 11}},
      // DeepSpeed's own tests/unit/utils/test_partition_balanced.py inputs.
      {{1, 2, 1}, 4, {0, 1, 2, 3, 3}},
      {{1, 1, 1, 1}, 4, {0, 1, 2, 3, 4}},
      {{1, 1, 1, 1, 1}, 4, {0, 2, 3, 4, 5}},
      {{1, 1, 1, 1, 0, 1}, 4, {0, 2, 3, 5, 6}},
      // No parameters anywhere ("type:" matching no layer), and L < K.
      {{0, 0, 0, 0, 0}, 2, {0, 4, 5}},
      {{1, 2, 3}, 5, {0, 1, 2, 3, 3, 3}},
      {{}, 2, {0, 0, 0}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(DeepSpeedBalanced(c.costs, c.parts), c.bounds) << "K=" << c.parts;
  }
}

// It minimizes the spread (largest minus smallest stage) and breaks ties towards later cuts:
// {5, 2, 2} and the optimal {1, 4, 4} both have spread 3.
TEST(DeepSpeedBalanced, NotMinMaxOptimal) {
  const std::vector<double> weights = {1, 4, 2, 2};
  const std::vector<int> bounds = DeepSpeedBalanced(weights, 3);
  EXPECT_EQ(bounds, (std::vector<int>{0, 2, 3, 4}));
  EXPECT_EQ(MaxStage(weights, bounds), 5);
  EXPECT_EQ(BestMaxStage(weights, 3), 4);  // {0, 1, 2, 4}
}

TEST(DeepSpeedBalancedLegacy, MatchesDeepSpeedBefore0125) {
  const std::vector<Case> cases = {
      {kRamp, 2, {0, 4, 6}},
      {kRamp, 4, {0, 3, 4, 5, 6}},
      {kRamp, 5, {0, 3, 4, 5, 6, 6}},
      {kSpike, 3, {0, 3, 4, 6}},
      {kSpike, 4, {0, 3, 4, 6, 6}},
      {kEnds, 3, {0, 1, 6, 8}},
      {kEnds, 4, {0, 1, 6, 7, 8}},
      {kRandom12, 3, {0, 5, 9, 12}},
      {kRandom12, 5, {0, 2, 6, 8, 10, 12}},
      {kParams, 3, {0, 2, 9, 11}},
      {kParams, 4, {0, 2, 7, 10, 11}},
      {kParams, 5, {0, 2, 7, 10, 11, 11}},
      {{1, 1, 1, 1, 1}, 4, {0, 2, 4, 5, 5}},  // the report behind DeepSpeed PR #4312
      {{1, 1, 1, 1, 0, 1}, 4, {0, 2, 5, 6, 6}},
      {{0, 0, 0, 0, 0, 0, 0}, 3, {0, 0, 0, 7}},
      {{1, 2, 3}, 5, {0, 1, 2, 3, 3, 3}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(DeepSpeedBalancedLegacy(c.costs, c.parts), c.bounds) << "K=" << c.parts;
  }
}

// A heavy first layer makes the probe cut at 0, and `weights[parts[p] - 1]` then reads
// weights[-1]: an empty first stage and everything on the second.
TEST(DeepSpeedBalancedLegacy, NotMinMaxOptimal) {
  const std::vector<double> weights = {2, 0, 1};
  const std::vector<int> bounds = DeepSpeedBalancedLegacy(weights, 2);
  EXPECT_EQ(bounds, (std::vector<int>{0, 0, 3}));
  EXPECT_EQ(MaxStage(weights, bounds), 3);
  EXPECT_EQ(BestMaxStage(weights, 2), 2);  // {0, 1, 3}
}

// Near 2^43 and above a double step exceeds eps, the binary search stops moving and the original
// loops forever (checked with a timeout).
TEST(DeepSpeedBalancedLegacy, NeverReturns) {
  EXPECT_TRUE(DeepSpeedBalancedLegacy({1e13, 1e13, 1e13}, 2).empty());
}

}  // namespace
}  // namespace gpipe
