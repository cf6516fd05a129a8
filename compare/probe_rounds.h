// The co-located compute factors from the pipeline probe's rounds (compare/pipeline_probe.h):
// each round runs every count n of ranks on the node once, and a count's factor is its figure
// over the one-rank run's in the same round, times one rank's factor against the profile. A
// ratio of two runs seconds apart holds where the machine's speed drifts by tens of percent
// between minutes; a figure against the profile, measured minutes earlier, does not.
#pragma once

#include <vector>

#include "core/status.h"
#include "core/step_costs.h"

namespace gpipe {

/// What one run of one count measured.
struct ProbeFigures {
  /// Forward and backward action times, less the per-action overheads, over the profile's.
  double scale = 0;
  /// Time between actions per forward or backward action.
  double gap_ms = 0;
  /// Mean time a send occupied its rank (0: the run had no sends).
  double send_ms = 0;
};

struct ProbeFactors {
  /// Entry n - 1: one_rank_scale times the median over the rounds of the count's scale over the
  /// one-rank run's of the same round; the spread is half the interquartile range of that, scaled.
  std::vector<Measured> compute_scale;
  /// Entry n - 1: the median over the rounds.
  std::vector<Measured> action_gap_ms;
  std::vector<Measured> send_ms;
};

/// `rounds[r][n - 1]`: round r's run of count n (count 1 first). Every round has every count and
/// every scale is positive, else Invalid naming the round and count.
Expected<ProbeFactors> CombineProbeRounds(const std::vector<std::vector<ProbeFigures>>& rounds,
                                          const Measured& one_rank_scale);

}  // namespace gpipe
