// Peers' layer-partition algorithms, ported line for line as baselines for the exact planner.
// Each gives the partition its original gives for the same input, quirks included; none of them
// minimizes the largest stage cost (tests/planner/baselines_test.cpp shows a counterexample each).
//
//   torchgpipe (kakaobrain/torchgpipe v0.0.7, a1b4ee2): balance/blockpartition.py `solve`, the
//     block-partition heuristic of Barany & Grinberg, as balance/__init__.py `balance_cost` calls
//     it. It normalizes the costs to [0, 1] and stops as soon as the largest block is at most the
//     smallest plus 1 (in normalized units), so it often keeps its uniform starting split. Its
//     loop can also run forever or return a balance with an empty block or the wrong total.
//   DeepSpeed (microsoft/DeepSpeed 38327e0, unchanged since v0.12.5): runtime/utils.py
//     `partition_uniform` and `partition_balanced`, which `PipelineModule` uses for
//     partition_method "uniform" and "parameters" (weights: per-layer trainable parameter counts,
//     0 for layers without parameters). partition_balanced minimizes the spread (largest minus
//     smallest stage), not the largest stage.
//   DeepSpeed v0.3.0 to v0.12.4 (2bdf061^): the earlier partition_balanced, a binary search on
//     the bottleneck with tolerance eps; it can return empty stages.
//
// Boundaries: [0, b1, ..., L] with K + 1 entries; stage s holds layers [b_s, b_{s+1}).
// Every port computes in double the way its original computes in Python floats: sums left to
// right, the same comparisons and tie-breaks, Python's slicing and negative indexing where the
// original relies on them. So each gives the original's output for every finite input, except
// integer inputs whose sums reach 2^53 (Python and numpy add integers exactly) and torchgpipe
// runs longer than TorchgpipeMoveLimit.
#pragma once

#include <cstdint>
#include <vector>

namespace gpipe {

/// torchgpipe's `balance_cost(cost, partitions)` and how its loop ended.
struct TorchgpipeSolve {
  /// False: `solve` had not returned after `TorchgpipeMoveLimit` moves. On such inputs the
  /// original runs forever in every case seen (a split walks off the sequence end).
  bool returned = false;
  /// Layers per block exactly as torchgpipe returns them (empty when !returned). May hold a 0 or
  /// not sum to L: torchgpipe's GPipe then rejects the balance.
  std::vector<int> balance;
  /// Block moves made (evaluations of the smallest block).
  int64_t moves = 0;
};

/// The move limit for L layers and K parts: 1000 + 10 L K. Terminating runs sampled with L <= 200,
/// K <= 32 took at most about 600 moves.
int64_t TorchgpipeMoveLimit(int layers, int parts);

/// REQUIRES: 1 <= parts <= costs.size(), every cost finite.
TorchgpipeSolve TorchgpipeBalanceCost(const std::vector<double>& costs, int parts);

/// torchgpipe's partition of `costs` into `parts` stages as boundaries (parts + 1 entries), or an
/// empty vector where torchgpipe yields no usable balance (its loop does not return, a block is
/// empty, or the blocks do not add up to L).
/// REQUIRES: 1 <= parts <= costs.size(), every cost finite.
std::vector<int> TorchgpipeBlockPartition(const std::vector<double>& costs, int parts);

/// DeepSpeed's `partition_uniform(items, parts)`: the first items % parts stages get one layer
/// more. With items <= parts, stage s < items gets layer s and the rest are empty.
/// REQUIRES: items >= 0, parts >= 1.
std::vector<int> DeepSpeedUniform(int items, int parts);

/// DeepSpeed's `partition_balanced(weights, parts)`: the cut with the least spread (largest minus
/// smallest stage weight), ties to the last cut the DP tries; DeepSpeedUniform when L <= parts.
/// REQUIRES: parts >= 1, every weight finite.
std::vector<int> DeepSpeedBalanced(const std::vector<double>& weights, int parts);

/// DeepSpeed's partition_balanced before v0.12.5 (eps = 1e-3 there). Empty where the original
/// never returns (the binary search stops moving: weights near 2^43 and above) or fails its
/// final assert. May return empty stages, e.g. [0, 2, 4, 5, 5] for five 1s over 4 stages.
/// REQUIRES: parts >= 1, eps >= 0, every weight finite.
std::vector<int> DeepSpeedBalancedLegacy(const std::vector<double>& weights, int parts, double eps = 1e-3);

}  // namespace gpipe
