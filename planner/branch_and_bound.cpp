#include "planner/branch_and_bound.h"

#include <algorithm>
#include <utility>

namespace gpipe::partition_internal {

void BranchAndBound::Leaf() {
  ++result_.leaves;
  // skeleton_ is reused (its profile is not copied per leaf); stages are rewritten in place.
  Plan& plan = skeleton_;
  plan.stages.clear();
  int first = 0;
  for (int s = 0; s < stages_; ++s) {
    plan.stages.push_back(StagePlan::Of(first, ends_[s], stage_rank_[s], recomputed_[s]));
    first = ends_[s];
  }
  // What does not depend on the cut (links, rings, the profile at the plan's size) is derived
  // at the first leaf; each leaf fills in its stages.
  Status built = Status::Ok();
  if (!costs_builder_) {
    Expected<CostModelBuilder> builder = CostModelBuilder::Of(plan);
    if (builder.ok()) {
      costs_builder_ = std::make_unique<CostModelBuilder>(std::move(*builder));
      costs_ = costs_builder_->Base();
    } else {
      built = builder.status();
    }
  }
  if (built.ok()) built = costs_builder_->FillStages(plan, &costs_);
  if (!built.ok()) {
    // The search builds only valid plans: an error here is a bug, reported rather than lost.
    if (leaf_error_.ok()) leaf_error_ = built.WithContext("the partition search's plan");
    return;
  }
  const double step = evaluator_->StepTimeMs(costs_);
  if (step < best_) {
    // Every stage was admitted by its memory frontier; confirm with the simulator's own walk
    // (the two may differ in the last bits).
    for (int r = 0; r < p_.ranks; ++r) {
      if (RankMemoryPeak(evaluator_->schedule(), r, costs_, &shape_->Posting()).peak_bytes > Limit()) return;
    }
    best_ = step;
    result_.step_time_ms = step;
    result_.plan = plan;
  }
}

Expected<PartitionResult> BranchAndBound::Finish(double root) {
  if (!leaf_error_.ok()) return leaf_error_;
  result_.proven_optimal = !OutOfBudget();
  result_.stopped_by_deadline = stopped_;
  if (result_.proven_optimal) {
    // Every pruned node's bound reached Cutoff(); the plan found ties the rest.
    result_.lower_bound_ms = result_.plan ? best_ : Cutoff();
  } else {
    result_.lower_bound_ms = std::min(result_.plan ? best_ : Cutoff(), root);
  }
  return std::move(result_);
}

}  // namespace gpipe::partition_internal
