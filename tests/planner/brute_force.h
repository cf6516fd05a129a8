// The brute force the planner's tests check it against: every contiguous partition of a
// profile's layers into S stages (placed as the skeleton's schedule places them: placement.h), with every remat choice a policy
// allows, written out independently of the planner.
#pragma once

#include <functional>
#include <vector>

#include "core/plan.h"
#include "core/schedule/placement.h"
#include "planner/partition.h"

namespace gpipe::brute {

// Whether a stage of `length` layers may recompute its first `n` under `policy`: off, none; on,
// all; stages, none or all; auto, any n where each rank holds one stage (interleaved chunks
// recompute all or none, as the planner searches them).
inline bool BruteForceAllows(RematPolicy policy, int n, int length, bool one_stage_per_rank) {
  switch (policy) {
    case RematPolicy::kOff: return n == 0;
    case RematPolicy::kOn: return n == length;
    case RematPolicy::kStages: return n == 0 || n == length;
    case RematPolicy::kAuto: return n == 0 || n == length || one_stage_per_rank;
  }
  return false;
}

// Calls `visit` with `skeleton` holding every such plan of `stages` stages on `ranks` ranks.
inline void ForEveryPlan(const Plan& skeleton, int ranks, int stages, RematPolicy policy,
                         const std::function<void(const Plan&)>& visit) {
  const int layers = skeleton.profile.num_layers();
  std::vector<int> ends(stages), recomputed(stages, 0);
  const std::vector<int> stage_rank = PlaceStages(skeleton.schedule, ranks, stages);
  Plan plan = skeleton;
  std::function<void(int)> choose = [&](int t) {
    if (t == stages) {
      plan.stages.clear();
      for (int u = 0, begin = 0; u < stages; begin = ends[u], ++u) {
        plan.stages.push_back(StagePlan::Of(begin, ends[u], stage_rank[u], recomputed[u]));
      }
      visit(plan);
      return;
    }
    const int length = ends[t] - (t == 0 ? 0 : ends[t - 1]);
    for (int n = 0; n <= length; ++n) {
      if (!BruteForceAllows(policy, n, length, stages == ranks)) continue;
      recomputed[t] = n;
      choose(t + 1);
    }
  };
  std::function<void(int, int)> place = [&](int s, int first) {
    if (s == stages - 1) {
      ends[s] = layers;
      choose(0);
      return;
    }
    for (int e = first + 1; e <= layers - (stages - 1 - s); ++e) {
      ends[s] = e;
      place(s + 1, e);
    }
  };
  place(0, 0);
}

}  // namespace gpipe::brute
