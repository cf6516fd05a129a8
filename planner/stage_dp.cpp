#include "planner/stage_dp.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "planner/remat_choices.h"

namespace gpipe::partition_internal {

LeastMemoryResult StageDp::Run(double at_most_bytes) {
  UseShape();
  const int ranks = p_.ranks;
  // need[q][a]: the least largest peak of ranks q.. holding layers [a, L); end/recomputed: the
  // stage of rank q that achieves it (end -1: none at most `at_most_bytes`). Starting every entry
  // just above the cap makes each bound below drop what passes it.
  const double above_cap = std::nextafter(at_most_bytes, kInfinity);
  std::vector<std::vector<double>> need(ranks + 1, std::vector<double>(layers_ + 1, above_cap));
  std::fill(need[ranks].begin(), need[ranks].end(), kInfinity);
  std::vector<std::vector<int>> end(ranks, std::vector<int>(layers_ + 1, -1));
  std::vector<std::vector<int>> recomputed(ranks, std::vector<int>(layers_ + 1, 0));
  need[ranks][layers_] = 0;
  for (int q = ranks - 1; q >= 0; --q) {
    const int max_end = layers_ - (ranks - 1 - q);
    // Rank q's stage [a, e): improves need[q][a] when it can.
    const auto offer = [&](int a, int e, const LayerTable::StageBuilder& builder) {
      const double rest = need[q + 1][e];
      if (rest >= need[q][a]) return;
      const int length = e - a;
      for (int layers = 0; layers <= length; ++layers) {
        if (!RecomputeAllowed(p_.remat, layers, length)) continue;
        const StageCost c = builder.CostRecomputing(layers);
        // The rank holds its model state and, at its fullest, every micro-batch in flight's
        // stash: when that alone cannot improve on the best, its memory frontier need not be read.
        if (std::max(rest, c.static_bytes + in_flight_[q] * c.stash_bytes()) >= need[q][a]) continue;
        const StageCost* const only = &c;
        const double peak = std::max(rest, c.static_bytes + Peak(q, &only));
        if (peak < need[q][a]) {
          need[q][a] = peak;
          end[q][a] = e;
          recomputed[q][a] = layers;
        }
      }
    };
    for (int a = q; a < max_end; ++a) {
      // First the stage as long as the one that was best from a - 1 (the best end moves little
      // from one first layer to the next): the best it sets makes the bounds below prune most
      // of the others before their memory frontier is read.
      const int guess = a > q && end[q][a - 1] > a ? end[q][a - 1] : 0;
      if (guess > 0 && (q < ranks - 1 || guess == layers_)) {
        LayerTable::StageBuilder builder(table_, a);
        while (builder.end() < guess) builder.Extend();
        offer(a, guess, builder);
      }
      LayerTable::StageBuilder builder(table_, a);
      for (int e = a + 1; e <= max_end; ++e) {
        builder.Extend();
        if (e == guess || (q == ranks - 1 && e < layers_)) continue;
        // Parameters only grow with the stage: once they alone reach the best, stop.
        if (table_.StaticBytes(a, e) * (1 - 1e-12) >= need[q][a]) break;
        offer(a, e, builder);
      }
    }
  }
  LeastMemoryResult out;
  out.plan = skeleton_;
  if (end[0][0] < 0) {  // (no partition within the cap)
    out.peak_bytes = kInfinity;
    return out;
  }
  out.peak_bytes = need[0][0];
  for (int q = 0, a = 0; q < ranks; ++q) {
    out.plan.stages.push_back(StagePlan::Of(a, end[q][a], q, recomputed[q][a]));
    a = end[q][a];
  }
  return out;
}

}  // namespace gpipe::partition_internal
