// What the path bound (path_bound.h) prices partitions with: a mix of chains as coefficients per
// stage and op, its least value over every contiguous partition of the layers (a dynamic
// program), and stage times. Internal to the planner's bounds.
#pragma once

#include <algorithm>
#include <limits>
#include <vector>

#include "planner/precedence_graph.h"

namespace gpipe::path_internal {

using Coefficients = std::vector<OpTimes>;  // per stage, per op

// A weighted average of chains (its coefficients and messages' time), and its least value over
// the partitions: a bound.
struct Mix {
  double bound = 0;
  Coefficients c;
  double hops = 0;
  std::vector<double> price;  // per memory instant, its price (path_game.h); empty: none
};

// A convex combination of chains: its coefficients per stage and op, and its messages' time.
struct Row {
  Coefficients c;
  double hops = 0;
};

/// The path's coefficients as a row.
Row RowOf(const GraphPath& path, int stages);
/// A row's length for stages whose op times are `stage_times`.
double RowMs(const Row& row, const std::vector<OpTimes>& stage_times);
/// What the mix `c` prices stage s ending at layer l at: its message (H) there.
inline double EndCost(const Coefficients& c, const BoundaryHops& hops, int s, int l) {
  return c[s][kH] == 0 ? 0.0 : c[s][kH] * hops.Ms(s, l);
}
/// The stage times of the partition whose stages end at `ends`, from per-layer `times` and the
/// messages `hops` (H).
std::vector<OpTimes> StageTimesOf(const std::vector<int>& ends, const std::vector<OpTimes>& times,
                                  const BoundaryHops& hops);

// The least of the sum over layers of layer_cost(l, s) (layer l in stage s) and over stages but
// the last of end_cost(s, l) (stage s ending at layer l) over contiguous partitions with no empty
// stage; `ends` gets its stage ends.
template <typename LayerCost, typename EndCost>
double LeastOverPartitionsOf(int stages, int layers, const LayerCost& layer_cost, const EndCost& end_cost,
                             std::vector<int>* ends) {
  // cost[s]: layers 0..l assigned, layer l in stage s (one row of layers at a time: `prev` holds
  // layer l - 1's); from[l x stages + s]: whether layer l - 1 was in stage s - 1 (a new stage
  // starts at l).
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  std::vector<double> prev(stages, kInfinity), cost(stages, kInfinity);
  std::vector<char> from(static_cast<size_t>(layers) * static_cast<size_t>(stages), 0);
  cost[0] = layer_cost(0, 0);
  for (int l = 1; l < layers; ++l) {
    prev.swap(cost);
    // Stage s can hold layer l only if stages 0..s-1 hold at least s layers and s+1.. the rest.
    const int lo = std::max(0, stages - (layers - l));
    const int hi = std::min(stages - 1, l);
    // (the next row reads this one's cells from lo - 1 to hi + 1; those outside stay infinite)
    if (lo > 0) cost[lo - 1] = kInfinity;
    if (hi + 1 < stages) cost[hi + 1] = kInfinity;
    char* started_at = from.data() + static_cast<size_t>(l) * static_cast<size_t>(stages);
    for (int s = lo; s <= hi; ++s) {
      double best = prev[s];
      char started = 0;
      if (s > 0 && prev[s - 1] < kInfinity) {
        const double start = prev[s - 1] + end_cost(s - 1, l - 1);
        if (start < best) {
          best = start;
          started = 1;
        }
      }
      if (best == kInfinity) {
        cost[s] = kInfinity;
        continue;
      }
      cost[s] = best + layer_cost(l, s);
      started_at[s] = started;
    }
  }
  const double least = cost[stages - 1];
  if (ends != nullptr) {
    ends->assign(stages, layers);
    for (int l = layers - 1, s = stages - 1; l > 0; --l) {
      if (from[static_cast<size_t>(l) * static_cast<size_t>(stages) + s]) {
        (*ends)[s - 1] = l;
        --s;
      }
    }
  }
  return least;
}

/// The least of sum_s sum_op c[s][op] x (stage s's op time) over the partitions.
double LeastOverPartitions(const Coefficients& c, const std::vector<OpTimes>& times, const BoundaryHops& hops,
                           std::vector<int>* ends);

}  // namespace gpipe::path_internal
