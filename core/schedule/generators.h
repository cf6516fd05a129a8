// Pure generators of compute-only schedules (F, B, I, W; no communication yet: see lower.h).
// K ranks, M micro-batches; stage s runs on rank s, except interleaved 1F1B where rank r runs the
// v stages r, r+K, ..., r+(v-1)K ("chunks").
//
// GPipe (fill-drain), K=3, M=4; time runs left to right, one column per unit of F or B:
//   rank 0: F0 F1 F2 F3 .  .  .  .  .  .  B0 B1 B2 B3
//   rank 1: .  F0 F1 F2 F3 .  .  .  B0 B1 B2 B3
//   rank 2: .  .  F0 F1 F2 F3 B0 B1 B2 B3
// 1F1B (PipeDream-Flush): rank r runs min(K-r-1, M) warm-up forwards, then alternates one forward
// and one backward, then drains the backwards; at most min(K-r, M) micro-batches are in flight.
// Interleaved 1F1B (Megatron-LM 2021): as 1F1B over the M*v (micro-batch, chunk) pairs, in groups
// of K micro-batches per chunk; 2(K-r-1) + (v-1)K warm-up forwards; needs M a multiple of K.
// ZB-H1 (Qi et al. 2024): 1F1B with the backward split into I and W; rank r delays its W passes by
// r slots, which keeps 1F1B's memory and shrinks the bubble from (K-1)(F+B+W) to (K-1)(F+B-W).
#pragma once

#include "core/plan.h"
#include "core/schedule/schedule.h"
#include "core/status.h"

namespace gpipe {

/// REQUIRES: ranks >= 1, microbatches >= 1 (and chunks >= 1, microbatches % ranks == 0 for
/// interleaved). Use GenerateSchedule for checked input.
Schedule GenerateGpipe(int ranks, int microbatches);
Schedule Generate1F1B(int ranks, int microbatches);
Schedule GenerateInterleaved1F1B(int ranks, int chunks, int microbatches);
Schedule GenerateZbH1(int ranks, int microbatches);

/// Closed forms for one-stage-per-rank schedules (gpipe, 1f1b, zb-h1), read by the planner's
/// bounds without generating the schedule (tests check them against the generators):
/// the forwards rank r runs before its first backward (B or I), and the most micro-batches whose
/// activations it holds at once.
int ForwardsBeforeFirstBackward(ScheduleKind kind, int ranks, int microbatches, int rank);
int MaxInFlight(ScheduleKind kind, int ranks, int microbatches, int rank);

/// The compute-only schedule of `kind` for `stages` stages over `ranks` ranks; errors explain
/// a shape the schedule cannot take.
Expected<Schedule> GenerateSchedule(ScheduleKind kind, int ranks, int stages, int microbatches);

}  // namespace gpipe
