// The exact partition search for several stages (chunks) per rank: v per rank in a loop (stage s
// on rank s mod K: interleaved 1F1B and zero bubble) or two in a V (stages s and 2K-1-s on rank s:
// zb-v, dualpipe-v), placed depth-first in stage order (see partition.h for what it proves).
//   - remat: once a rank's last chunk is placed, every set of its chunks to rematerialize that the
//     policy allows, fits, and has no fitting subset;
//   - bounds, each times M: the busiest rank's work so far plus the wait before its first forward
//     (the stages before its first, which are on ranks 0..r-1 in a loop and a V alike) and after
//     its last backward (the same stages' backwards; with split backwards their input gradients,
//     after the rank's forwards and input gradients only, as its W passes may run meanwhile);
//     the rank's work so far and then its all-reduce; the average work (with the recompute memory
//     forced so far); and, unless the problem leaves it out, the whole layers not placed dealt to
//     the ranks still to get stages (WholeLayerLevel);
//   - memory: a rank holds its chunks' static bytes throughout, and each chunk's activations at
//     some moment (stashed, or recomputed under remat), so a rank whose placed chunks already
//     exceed the limit that way is abandoned; and, with each placed chunk's stashes and
//     recomputed activations at every moment of the schedule's memory walk, a rank whose placed
//     chunks cannot fit under any remat set is abandoned, and the cheapest set that could fit
//     adds its recompute to the rank's work.
// The first incumbents: the cut into S stages of most even work, that cut moved until the ranks'
// sums of work are even too (rank_balance.h), and the partition the path
// bound's prices (path_bound.h) like best, which also prune every subtree whose least price
// reaches the best step.
#pragma once

#include <vector>

#include "planner/branch_and_bound.h"

namespace gpipe::partition_internal {

class InterleavedSearch : public BranchAndBound {
 public:
  // REQUIRES: the problem passed CheckProblem, with several stages per rank (chunks > 1).
  explicit InterleavedSearch(const PartitionProblem& problem) : BranchAndBound(problem) {}

  // The work spread evenly, and the busiest rank's whole layers (v or more) run M times; the
  // chains of the schedule's order (path_bound.h); infinite where MemoryCanFit fails or the path
  // bound's game proves that no partition fits. `prices`, where given: the path bound's
  // LayerPrices.
  double RootBound(LayerPrices* prices = nullptr) const;

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
  // Stage s completes `rank`'s chunks: choose its remat set (every set the policy allows that
  // fits and has no fitting subset), then go on. With `seed`, only the first such set, and stop.
  // False when no set fits.
  bool CompleteRank(int rank, int s, bool last, bool seed = false);
  // Layers [a, e) as one chunk, kept or recomputed, priced for memory bounds only: its
  // activations, input and stash; the output, sends, workspaces, weight-pass captures and
  // generator state left at zero (each only adds).
  StageCost MemoryFloor(int a, int e, bool remat) const;
  // The least forward `rank`'s chunks placed up to stage s (floor_keep_, floor_recompute_,
  // stage_forward_) must recompute to fit with `static_bytes` of model state: over the remat
  // sets the policy allows (by chunk, as CompleteRank), the cheapest whose chunks' stashes and
  // recomputed activations fit at every moment of the memory walk
  // (MemoryFrontier::LeastStashPeakBytes); infinity where none does.
  double LeastRecomputeMs(int rank, int s, double static_bytes) const;
  // With stages up to s placed, the last ending at layer e: the least per-micro-batch work the
  // busiest rank can end with when the layers after e are dealt whole to the ranks of the stages
  // after s (each of those stages at least one layer, the last layer to the last stage's rank),
  // counting each of them but the last as the least of them (exact where they are equal, as a
  // transformer's blocks, and what the work spread evenly does not see).
  double WholeLayerLevel(int s, int e) const;
  // Per layer: its least forward (BoundForwardMs) and its backward.
  std::vector<double> LayerWorks() const;

  // Work, static bytes and the largest chunk activation placed per rank; the first round's
  // forwards and backwards before each rank (head_[r], tail_[r]).
  std::vector<double> rank_work_ = std::vector<double>(p_.ranks, 0.0);
  // With split backwards: forwards and input gradients (B - W) only, which come before the rank's
  // last input gradient; its W passes may come after.
  std::vector<double> rank_input_work_ = std::vector<double>(p_.ranks, 0.0);
  std::vector<double> rank_static_ = std::vector<double>(p_.ranks, 0.0);
  std::vector<double> rank_activation_ = std::vector<double>(p_.ranks, 0.0);
  std::vector<double> head_ = std::vector<double>(p_.ranks, 0.0);
  // Per placed stage: its MemoryFloor kept and recomputed, and its recorded forward.
  std::vector<StageCost> floor_keep_ = std::vector<StageCost>(stages_);
  std::vector<StageCost> floor_recompute_ = std::vector<StageCost>(stages_);
  std::vector<double> stage_forward_ = std::vector<double>(stages_, 0.0);
  mutable std::vector<const StageCost*> chosen_scratch_;
  // Per rank, its LeastRecomputeMs so far (in rank_work_ and rank_input_work_ too).
  std::vector<double> rank_recompute_ = std::vector<double>(p_.ranks, 0.0);
  std::vector<double> tail_ = std::vector<double>(p_.ranks, 0.0);
  // Per rank: the parameters placed (its all-reduce after its last action).
  std::vector<double> rank_params_ = std::vector<double>(p_.ranks, 0.0);
  // With whole_layer_level: LayerWorks, and the least of them over [l, L - 1).
  std::vector<double> layer_work_, least_work_from_;
  mutable std::vector<double> level_scratch_;
};

}  // namespace gpipe::partition_internal
