// What both partition searches (contiguous_search.h, interleaved_search.h) keep while they
// branch: the stage boundaries and remat choices placed so far, the node budget and the
// deadline, the best step found (the incumbent) and its plan. A leaf is a complete partition:
// Leaf simulates it and keeps it when it is the best so far; Finish turns the search into its
// PartitionResult, with any error a leaf met.
#pragma once

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "core/status.h"
#include "planner/partition_context.h"
#include "simulator/cost_model_builder.h"

namespace gpipe::partition_internal {

// Nodes whose bound comes within this fraction of the best step are pruned: they could at most
// tie it (bounds use prefix sums, which round differently from the exact stage sums).
inline constexpr double kTieFraction = 1e-12;

class BranchAndBound : public PartitionContext {
 public:
  explicit BranchAndBound(const PartitionProblem& problem) : PartitionContext(problem) {}

 protected:
  double Cutoff() const { return best_ * (1.0 - kTieFraction); }
  // Once the budget or the time is spent, every loop stops: the result is the best plan so far.
  bool OutOfBudget() const { return result_.nodes >= p_.max_nodes || stopped_; }
  // Counts a node; false when the budget or the time is spent (time_up is asked every 16: a
  // node of a thousand ranks' interleaved search prices its memory in milliseconds).
  bool CountNode() {
    ++result_.nodes;
    if (result_.nodes % 16 == 0) TimeUp();
    return result_.nodes <= p_.max_nodes && !stopped_;
  }
  // Whether the time is spent (asked now; once it is, every loop stops). Seeds ask it rank by
  // rank: a thousand ranks' first memory frontiers take seconds.
  bool TimeUp() {
    if (!stopped_ && p_.time_up && p_.time_up()) stopped_ = true;
    return stopped_;
  }
  // Simulates the complete partition in ends_ and remat_ and keeps it when it is the best so
  // far. An error building its costs (a bug: the searches build only valid plans) is kept for
  // Finish to return, not lost.
  void Leaf();
  // The search's result once its branching is over, `root` its root's lower bound; the first
  // error a leaf met instead, if any.
  Expected<PartitionResult> Finish(double root);

  // Whether stage s on layers [a, e), after the stages placed (priced_), can still beat the best
  // at the root's LayerPrices (path_bound.h): their least over the partitions that place so.
  bool PricesAdmit(int s, int a, int e) const {
    return prices_.empty() ||
           prices_.constant() + priced_ + prices_.StageCost(s, a, e) + prices_.Rest(s + 1, e) < Cutoff();
  }
  // Simulates the partition whose stages end at `ends` (every stage a layer at least), each
  // stage recomputing what `fit` chooses (false: it does not fit), and keeps it as Leaf does.
  // A search's seeds: the root prices' least partition among them.
  template <typename Fit>
  void SeedWith(std::vector<int> ends, const Fit& fit) {
    for (int s = 0, a = 0; s < stages_; ++s) {
      ends[s] = std::clamp(ends[s], a + 1, layers_ - (stages_ - 1 - s));
      a = ends[s];
    }
    ends_ = std::move(ends);
    if (fit()) Leaf();
  }

  // From the search's best plan so far (none: a seed must have beaten the caller's cutoff, the
  // best of the configurations searched before), moves one stage boundary by a layer at a time,
  // keeping each move that the simulator finds faster (first improvement, until no move is), each
  // move a node of the budget: the seeds balance work, the climb what the schedule makes of it
  // (its waits and messages). Incumbents only: the branching that follows proves what it can.
  template <typename Fit>
  void Climb(const Fit& fit) {
    if (!result_.plan) return;
    std::vector<int> at(stages_);
    for (int s = 0; s < stages_; ++s) at[s] = result_.plan->stages[s].end_layer;
    for (bool improved = true; improved;) {
      improved = false;
      for (int s = 0; s + 1 < stages_; ++s) {
        for (int move : {-1, 1}) {
          const int first = s == 0 ? 0 : at[s - 1];
          if (at[s] + move <= first || at[s] + move >= at[s + 1]) continue;  // (a layer per stage)
          if (!CountNode()) return;
          std::vector<int> next = at;
          next[s] += move;
          const double before = best_;
          SeedWith(next, fit);
          if (best_ < before) {
            at = std::move(next);
            improved = true;
          }
        }
      }
    }
  }

  std::vector<int> ends_ = std::vector<int>(stages_, 0);
  // Per stage: how many of its first layers recompute (0: none).
  std::vector<int> recomputed_ = std::vector<int>(stages_, 0);
  double best_ = kInfinity;
  PartitionResult result_;
  // The root's LayerPrices (empty: none), and what they price the stages placed so far at.
  LayerPrices prices_;
  double priced_ = 0;

 private:
  bool stopped_ = false;  // the deadline passed
  Status leaf_error_ = Status::Ok();
  // The leaves' costs: built from skeleton_ at the first leaf (it outlives the builder), then
  // each leaf's stages filled in.
  std::unique_ptr<CostModelBuilder> costs_builder_;
  CostModel costs_;
};

}  // namespace gpipe::partition_internal
