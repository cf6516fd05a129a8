// The exact partition search for one stage per rank (gpipe, 1f1b, zb-h1): a depth-first branch
// and bound over the stage boundaries, rank 0's stage first (see partition.h for what it proves).
//   - remat: a stage recomputes only when it does not fit without, and then (by layer, under
//     auto) the fewest of its first layers that make it fit (a stage's memory does not depend on
//     other stages' remat; partition.h says when this is also the fastest remat); the bounds
//     price a forward at the least it costs, recorded or under no_grad;
//   - bounds: every rank r needs head_r + M x work_r + tail_r (its first forward waits for the
//     stages before it, its last backward feeds them), a rank cannot start its first backward
//     before micro-batch 0 went all the way and back, and the all-reduce follows a rank's last
//     action; for the stages not yet placed the bound is minimized exactly by a greedy over a
//     relaxation (cheapest messages, no buffers) that is monotone in the stage boundaries;
//     GPipe adds its flow-shop bound;
//   - a node is pruned when its bound reaches the best step found; leaves are simulated.
// The first incumbents: the partition that minimizes the relaxed bound (the greedy at the hi end
// of RelaxedThreshold's bracket), the most even one, and the one the path bound's prices
// (path_bound.h) like best, which also prune every subtree whose least price reaches the best.
#pragma once

#include <optional>
#include <vector>

#include "planner/bisection.h"
#include "planner/branch_and_bound.h"

namespace gpipe::partition_internal {

class ContiguousSearch : public BranchAndBound {
 public:
  // REQUIRES: the problem passed CheckProblem, with one stage per rank (chunks 1).
  explicit ContiguousSearch(const PartitionProblem& problem) : BranchAndBound(problem) {}

  // The relaxed bound minimized over all partitions (binary search on the cutoff).
  double RootBound() const;

  // REQUIRES: the problem's schedule generates.
  Expected<PartitionResult> Run();

 private:
  // A stage's cost with the remat Fit chose: how many of its first layers recompute.
  struct Fitted {
    StageCost cost;
    int layers = 0;
  };
  // The cheapest remat choice that fits rank q (the fewest recomputed layers the policy
  // allows), or nullopt.
  std::optional<Fitted> Fit(int q, const LayerTable::StageBuilder& builder) const;
  // Lower bounds on the step given stage q's cost and what precedes it.
  double StageBound(int q, const StageCost& c, double head, double tail, double param_bytes) const;
  // The relaxed bound for rank q holding [a, e): prefix sums, no buffers, remat's stash free.
  double RelaxedBound(int q, int a, int e, double head, double tail) const;
  // M x the work of layers [a, L) over the ranks from q on: the busiest of them has at least it.
  double RemainderAverage(int q, int a) const;
  // Can ranks q.. cover layers [a, L) with every relaxed bound below `cutoff`? Greedy: each
  // rank takes as many layers as it can (exact for this relaxation: a bound never rises when a
  // stage starts later or ends earlier). Fills `ends` with the greedy's boundaries.
  bool RemainderFits(int q, int a, double head, double tail, double cutoff, std::vector<int>* ends) const;
  // RootBound from RelaxedThreshold's bracket (nullopt: none), with the path bound's prices.
  double RootBound(const std::optional<Bracket>& threshold, LayerPrices* prices) const;
  // Fits every stage of ends_ (recomputed_ as Fit chooses); false when one does not fit or the
  // time is spent (TimeUp, asked rank by rank).
  bool FitAll();
  // The smallest cutoff below which some partition's relaxed bounds all fall.
  std::optional<Bracket> RelaxedThreshold() const;
  // Places rank q's stage from layer a on, `head` and `tail` what the stages before it add
  // before its first forward and after its last backward, `bound` the parent's bound.
  void Dfs(int q, int a, double head, double tail, double bound);
  // GPipe is two flow shops (all forwards, then all backwards), so its step is at least every
  // layer's forward and backward (and the placed stages' recompute) once plus (M-1) x (the
  // slowest stage's forward + the slowest stage's backward). Stages after q are at least as slow
  // as their average.
  double GpipeBound(int q, const StageCost& c, int e) const;

  // Each rank's stage length in the last RemainderFits (where its next call starts looking).
  mutable std::vector<int> greedy_length_ = std::vector<int>(p_.ranks, 0);
  // GPipe search state: the slowest forward and backward (with recompute) of the placed stages,
  // and their recompute.
  double max_forward_ = 0;
  double max_backward_ = 0;
  double recompute_ = 0;
};

}  // namespace gpipe::partition_internal
