// The remat filter: which stages a RematPolicy lets rematerialize. The searches, their bounds and
// the least-memory dynamic program all ask it here.
#pragma once

#include "planner/partition.h"

namespace gpipe {

// Whether `policy` allows a stage with (`remat` true) or without remat.
inline bool RematAllowed(RematPolicy policy, bool remat) {
  return remat ? policy != RematPolicy::kOff : policy != RematPolicy::kOn;
}

// Whether `policy` allows the remat set `mask` of a rank's `chunks` chunks (bit c: chunk c
// rematerializes): off, no chunk; on, every chunk; auto, any set.
inline bool RematSetAllowed(RematPolicy policy, int mask, int chunks) {
  for (int c = 0; c < chunks; ++c) {
    if (!RematAllowed(policy, ((mask >> c) & 1) != 0)) return false;
  }
  return true;
}

}  // namespace gpipe
