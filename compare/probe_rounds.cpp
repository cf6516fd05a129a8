#include "compare/probe_rounds.h"

#include <string>

#include "core/statistics.h"

namespace gpipe {

Expected<ProbeFactors> CombineProbeRounds(const std::vector<std::vector<ProbeFigures>>& rounds,
                                          const Measured& one_rank_scale) {
  if (rounds.empty() || rounds.front().empty()) return Status::Invalid("pipeline probe: no rounds were measured");
  const size_t counts = rounds.front().size();
  for (size_t r = 0; r < rounds.size(); ++r) {
    if (rounds[r].size() != counts) {
      return Status::Invalid("pipeline probe: round " + std::to_string(r + 1) + " measured " +
                             std::to_string(rounds[r].size()) + " counts of ranks, round 1 " + std::to_string(counts));
    }
    for (size_t n = 0; n < counts; ++n) {
      if (!(rounds[r][n].scale > 0)) {
        return Status::Invalid("pipeline probe: round " + std::to_string(r + 1) + ", " + std::to_string(n + 1) +
                               " rank(s): the compute factor is not positive");
      }
    }
  }
  ProbeFactors factors;
  for (size_t n = 0; n < counts; ++n) {
    std::vector<double> ratios, gaps, sends;
    for (const std::vector<ProbeFigures>& round : rounds) {
      ratios.push_back(round[n].scale / round[0].scale);
      gaps.push_back(round[n].gap_ms);
      sends.push_back(round[n].send_ms);
    }
    const double spread = n == 0 ? one_rank_scale.spread : one_rank_scale.median * HalfIqr(ratios);
    factors.compute_scale.push_back({one_rank_scale.median * Median(ratios), spread});
    factors.action_gap_ms.push_back({Median(gaps), HalfIqr(gaps)});
    factors.send_ms.push_back({Median(sends), HalfIqr(sends)});
  }
  return factors;
}

}  // namespace gpipe
