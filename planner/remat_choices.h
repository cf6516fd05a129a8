// The remat filter: which stages, and how many of a stage's first layers, a RematPolicy lets
// rematerialize. The searches, their bounds and the least-memory dynamic program all ask it here.
#pragma once

#include <algorithm>

#include "planner/partition.h"

namespace gpipe {

// Whether `policy` allows a stage with (`remat` true: all its layers recompute) or without remat.
inline bool RematAllowed(RematPolicy policy, bool remat) {
  return remat ? policy != RematPolicy::kOff : policy != RematPolicy::kOn;
}

// Whether `policy` lets a stage of `length` layers recompute its first `layers` (0: none): off,
// none; on, all; stages, none or all; auto, any number (by layer).
inline bool RecomputeAllowed(RematPolicy policy, int layers, int length) {
  if (layers > 0 && layers < length) return policy == RematPolicy::kAuto;
  return RematAllowed(policy, layers > 0);
}

// Whether `policy` allows the remat set `mask` of a rank's `chunks` chunks (bit c: chunk c
// rematerializes whole): off, no chunk; on, every chunk; stages and auto, any set. (Interleaved
// chunks rematerialize whole: the search does not try by-layer remat there.)
inline bool RematSetAllowed(RematPolicy policy, int mask, int chunks) {
  for (int c = 0; c < chunks; ++c) {
    if (!RematAllowed(policy, ((mask >> c) & 1) != 0)) return false;
  }
  return true;
}

// How many of a plan's stages rematerialize, and of those how many only their first layers
// (what the plan and infeasible reports print).
inline int RematStages(const Plan& plan) {
  return static_cast<int>(std::count_if(plan.stages.begin(), plan.stages.end(), [](const StagePlan& s) { return s.remat; }));
}
inline int PartialRematStages(const Plan& plan) {
  return static_cast<int>(std::count_if(plan.stages.begin(), plan.stages.end(),
                                        [](const StagePlan& s) { return s.remat && s.remat_layers > 0; }));
}

}  // namespace gpipe
