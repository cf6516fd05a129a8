// Line-for-line ports of torchgpipe's and DeepSpeed's partitioners; see baselines.h for the
// sources. Comments quote the Python where the port must match a detail of it.
#include "planner/baselines.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <utility>

namespace gpipe {
namespace {

[[maybe_unused]] bool AllFinite(const std::vector<double>& values) {
  return std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
}

// A bound of the Python slice seq[start:stop] on a sequence of length n: negative bounds count
// from the end, then both are clamped to [0, n].
int64_t SliceBound(int64_t i, int64_t n) { return i < 0 ? std::max<int64_t>(i + n, 0) : std::min(i, n); }

// len(seq[start:stop]).
int64_t SliceLength(int64_t start, int64_t stop, int64_t n) {
  return std::max<int64_t>(SliceBound(stop, n) - SliceBound(start, n), 0);
}

// sum(seq[start:stop]): from 0, left to right.
double SliceSum(const std::vector<double>& seq, int64_t start, int64_t stop) {
  const int64_t n = static_cast<int64_t>(seq.size());
  double sum = 0;
  for (int64_t i = SliceBound(start, n); i < SliceBound(stop, n); ++i) sum += seq[i];
  return sum;
}

// torchgpipe's block i spans sequence[splits[i-1]:splits[i]] (from 0 for i = 0).
int64_t BlockStart(const std::vector<int64_t>& splits, int i) { return i > 0 ? splits[i - 1] : 0; }

// A (block size, block index) pair of torchgpipe's `leaderboard()`.
struct Entry {
  double size;
  int block;
};

// max(leaderboard()): the largest size, ties to the highest index (tuple order).
Entry LargestBlock(const std::vector<double>& normal, const std::vector<int64_t>& splits) {
  Entry best{SliceSum(normal, 0, splits[0]), 0};
  for (int i = 1; i < static_cast<int>(splits.size()); ++i) {
    const double size = SliceSum(normal, BlockStart(splits, i), splits[i]);
    if (size >= best.size) best = {size, i};
  }
  return best;
}

// min(leaderboard()): the smallest size, ties to the lowest index.
Entry SmallestBlock(const std::vector<double>& normal, const std::vector<int64_t>& splits) {
  Entry best{SliceSum(normal, 0, splits[0]), 0};
  for (int i = 1; i < static_cast<int>(splits.size()); ++i) {
    const double size = SliceSum(normal, BlockStart(splits, i), splits[i]);
    if (size < best.size) best = {size, i};
  }
  return best;
}

// Python's bisect.bisect_left(a, x, lo, hi).
int64_t BisectLeft(const std::vector<double>& a, double x, int64_t lo, int64_t hi) {
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (a[mid] < x) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Legacy DeepSpeed `_lprobe(weights, num_parts, bottleneck)` on inclusive prefix sums `prefix`:
// the greedy cut with every stage below `bottleneck`, and whether it covers all layers.
std::pair<std::vector<int>, bool> LegacyProbe(const std::vector<double>& prefix, int parts,
                                              double bottleneck) {
  const int64_t n = static_cast<int64_t>(prefix.size());
  const double total = prefix.back();
  std::vector<int> cuts(parts + 1, static_cast<int>(n));
  cuts[0] = 0;
  double bsum = bottleneck;
  const int64_t chunk = n / parts;
  int64_t step = chunk;
  for (int p = 1; p < parts; ++p) {
    while (step < n && prefix[step] < bsum) step += chunk;
    cuts[p] = static_cast<int>(BisectLeft(prefix, bsum, step - chunk, std::min(step, n)));
    if (cuts[p] == n) {
      const double part_size = prefix.back() - prefix[cuts[p - 1]];
      return {cuts, part_size < bottleneck};
    }
    // `weights[parts[p] - 1]`: with parts[p] == 0 Python reads weights[-1], the total.
    const int64_t last = cuts[p] - 1;
    bsum = prefix[last < 0 ? last + n : last] + bottleneck;
  }
  return {cuts, bsum >= total};
}

}  // namespace

int64_t TorchgpipeMoveLimit(int layers, int parts) { return 1000 + int64_t{10} * layers * parts; }

TorchgpipeSolve TorchgpipeBalanceCost(const std::vector<double>& costs, int parts) {
  const int64_t n = static_cast<int64_t>(costs.size());
  assert(parts >= 1 && parts <= n && AllFinite(costs));
  // Normalize the sequence in [0, 1].
  const double minimum = *std::min_element(costs.begin(), costs.end());
  const double maximum = *std::max_element(costs.begin(), costs.end()) - minimum;
  std::vector<double> normal(costs.size(), 0.0);
  if (maximum != 0) {
    for (size_t i = 0; i < costs.size(); ++i) normal[i] = (costs[i] - minimum) / maximum;
  }
  // splits = [n//partitions * (x+1) for x in range(partitions-1)] + [n]
  std::vector<int64_t> splits(parts);
  for (int x = 0; x + 1 < parts; ++x) splits[x] = n / parts * (x + 1);
  splits[parts - 1] = n;

  TorchgpipeSolve result;
  const int64_t limit = TorchgpipeMoveLimit(static_cast<int>(n), parts);
  while (true) {
    // (1) Bp is a maximal block; M(P) is not updated until Bp itself loses a layer.
    const Entry largest = LargestBlock(normal, splits);
    const int p = largest.block;
    while (true) {
      if (result.moves == limit) return result;
      ++result.moves;
      // (2) If M(P) <= m(P) + 1, stop.
      const Entry smallest = SmallestBlock(normal, splits);
      const int q = smallest.block;
      if (largest.size <= smallest.size + 1) {
        result.returned = true;
        for (int i = 0; i < parts; ++i) {
          result.balance.push_back(static_cast<int>(SliceLength(BlockStart(splits, i), splits[i], n)));
        }
        return result;
      }
      // (3) Move one layer into Bq from its neighbour Bh on the side of Bp.
      int h;
      if (p < q) {
        h = q - 1;
        splits[h] -= 1;
      } else {
        h = q + 1;
        splits[q] += 1;
      }
      if (p == h) break;
    }
  }
}

std::vector<int> TorchgpipeBlockPartition(const std::vector<double>& costs, int parts) {
  const TorchgpipeSolve solve = TorchgpipeBalanceCost(costs, parts);
  if (!solve.returned) return {};
  std::vector<int> bounds = {0};
  for (int size : solve.balance) {
    if (size <= 0) return {};
    bounds.push_back(bounds.back() + size);
  }
  if (bounds.back() != static_cast<int>(costs.size())) return {};
  return bounds;
}

std::vector<int> DeepSpeedUniform(int items, int parts) {
  assert(items >= 0 && parts >= 1);
  std::vector<int> bounds(parts + 1);
  if (items <= parts) {
    for (int p = 0; p <= parts; ++p) bounds[p] = std::min(p, items);
    return bounds;
  }
  // arange(0, (parts + 1) * chunk, chunk), then `parts[i + 1:] += 1` for each i < residual.
  const int chunk = items / parts;
  const int residual = items - chunk * parts;
  for (int p = 0; p <= parts; ++p) bounds[p] = p * chunk + std::min(p, residual);
  return bounds;
}

std::vector<int> DeepSpeedBalanced(const std::vector<double>& weights, int parts) {
  assert(parts >= 1 && AllFinite(weights));
  const int n = static_cast<int>(weights.size());
  const int m = parts;
  if (n <= m) return DeepSpeedUniform(n, m);

  constexpr double kInf = std::numeric_limits<double>::infinity();
  using Table = std::vector<std::vector<double>>;
  Table dp_max(n + 1, std::vector<double>(m + 1, kInf));
  Table dp_min = dp_max;
  Table dp_cost = dp_max;
  std::vector<std::vector<int>> position(n + 1, std::vector<int>(m + 1, 0));
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 1; i <= n; ++i) prefix[i] = prefix[i - 1] + weights[i - 1];

  // dp_min[0][0] stays inf in the original, so a single stage has spread 0.
  dp_max[0][0] = 0;
  dp_cost[0][0] = 0;
  for (int i = 1; i <= n; ++i) {
    for (int j = 1; j <= std::min(i, m); ++j) {
      for (int k = 0; k < i; ++k) {
        const double stage = prefix[i] - prefix[k];
        const double max_sum = std::max(dp_max[k][j - 1], stage);
        const double min_sum = std::min(dp_min[k][j - 1], stage);
        const double cost = max_sum - min_sum;
        if (dp_cost[i][j] >= cost) {  // >=: ties go to the last k
          dp_cost[i][j] = cost;
          dp_max[i][j] = max_sum;
          dp_min[i][j] = min_sum;
          position[i][j] = k;
        }
      }
    }
  }
  std::vector<int> bounds = {n};
  for (int j = m; j >= 1; --j) bounds.push_back(position[bounds.back()][j]);
  std::reverse(bounds.begin(), bounds.end());
  return bounds;
}

std::vector<int> DeepSpeedBalancedLegacy(const std::vector<double>& weights, int parts, double eps) {
  assert(parts >= 1 && eps >= 0 && AllFinite(weights));
  const int n = static_cast<int>(weights.size());
  if (n <= parts) return DeepSpeedUniform(n, parts);
  std::vector<double> prefix = weights;  // prefix_sum_inc
  for (int x = 1; x < n; ++x) prefix[x] += prefix[x - 1];

  // _rb_partition_balanced: binary search for the smallest bottleneck the probe accepts. The
  // bounds only ever move inwards, so a pass that moves neither repeats forever in the original.
  const double total = prefix.back();
  double lower = total / parts;
  double upper = total;
  while (upper > lower + eps) {
    const double mid = lower + ((upper - lower) / 2);
    if (LegacyProbe(prefix, parts, mid).second) {
      if (upper == mid) return {};
      upper = mid;
    } else {
      if (lower == mid + eps) return {};
      lower = mid + eps;
    }
  }
  auto [bounds, success] = LegacyProbe(prefix, parts, upper);
  if (!success) return {};  // `assert success`
  return bounds;
}

}  // namespace gpipe
