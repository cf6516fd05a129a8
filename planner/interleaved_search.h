// The exact partition search for several stages (chunks) per rank: v per rank in a loop (stage s
// on rank s mod K: interleaved 1F1B and zero bubble) or two in a V (stages s and 2K-1-s on rank s:
// zb-v, dualpipe-v), placed depth-first in stage order (see partition.h for what it proves).
//   - remat: once a rank's last chunk is placed, every set of its chunks to rematerialize that the
//     policy allows, fits, and has no fitting subset;
//   - bounds, each times M: the busiest rank's work so far plus the wait before its first forward
//     (the stages before its first, which are on ranks 0..r-1 in a loop and a V alike) and after
//     its last backward (the same stages' backwards; with split backwards their input gradients,
//     after the rank's forwards and input gradients only, as its W passes may run meanwhile);
//     and the average work;
//   - memory: a rank holds its chunks' static bytes throughout, and each chunk's activations at
//     some moment (stashed, or recomputed under remat), so a rank whose placed chunks already
//     exceed the limit that way is abandoned.
// The first incumbent is the cut into S stages of most even work.
#pragma once

#include <vector>

#include "planner/branch_and_bound.h"

namespace gpipe::partition_internal {

class InterleavedSearch : public BranchAndBound {
 public:
  // REQUIRES: the problem passed CheckProblem, with several stages per rank (chunks > 1).
  explicit InterleavedSearch(const PartitionProblem& problem) : BranchAndBound(problem) {}

  // The work spread evenly, and the rank that holds the heaviest layer runs it M times.
  double RootBound() const;

  // REQUIRES: the problem's schedule generates.
  Expected<PartitionResult> Run();

 private:
  // False when no partition can pass Dfs's memory test: the ranks' model state and largest chunk
  // activations, summed, exceed K x the limit however the layers are cut.
  bool MemoryCanFit() const;
  // Places stage s on its rank starting at layer a.
  void Dfs(int s, int a);
  // The layers of `rank`'s chunks before stage s (as ends_ places them) and [a, e).
  LayerRanges RankLayers(int rank, int s, int a, int e) const;
  // A first incumbent: the cut into S stages of most even work.
  void SeedIncumbent();
  // Stage s completes `rank`'s chunks: choose its remat set (every set the policy allows that
  // fits and has no fitting subset), then go on. With `seed`, only the first such set, and stop.
  void CompleteRank(int rank, int s, bool last, bool seed = false);

  // Work, static bytes and the largest chunk activation placed per rank; the first round's
  // forwards and backwards before each rank (head_[r], tail_[r]).
  std::vector<double> rank_work_ = std::vector<double>(p_.ranks, 0.0);
  // With split backwards: forwards and input gradients (B - W) only, which come before the rank's
  // last input gradient; its W passes may come after.
  std::vector<double> rank_input_work_ = std::vector<double>(p_.ranks, 0.0);
  std::vector<double> rank_static_ = std::vector<double>(p_.ranks, 0.0);
  std::vector<double> rank_activation_ = std::vector<double>(p_.ranks, 0.0);
  std::vector<double> head_ = std::vector<double>(p_.ranks, 0.0);
  std::vector<double> tail_ = std::vector<double>(p_.ranks, 0.0);
};

}  // namespace gpipe::partition_internal
