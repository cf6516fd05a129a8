// Pure generators of compute-only schedules (F, B, I, W; no communication yet: see lower.h).
// K ranks, M micro-batches; where the stages sit is the kind's layout (placement.h). Each order is
// PyTorch 2.11's (torch.distributed.pipelining) for the same K, v and M, action for action per rank
// (tests/python/pytorch_orders_test.py checks it), or the paper authors' where PyTorch has none.
//
// GPipe (fill-drain), K=3, M=4; time runs left to right, one column per unit of F or B:
//   rank 0: F0 F1 F2 F3 .  .  .  .  .  .  B0 B1 B2 B3
//   rank 1: .  F0 F1 F2 F3 .  .  .  B0 B1 B2 B3
//   rank 2: .  .  F0 F1 F2 F3 B0 B1 B2 B3
// 1F1B (PipeDream-Flush): rank r runs min(K-r-1, M) warm-up forwards, then alternates one forward
// and one backward, then drains the backwards; at most min(K-r, M) micro-batches are in flight.
// Interleaved 1F1B (Megatron-LM 2021, with PyTorch's rounds): v chunks per rank; the M
// micro-batches go in max(1, M/K) rounds of R = M/rounds (R = K when K divides M, as Megatron);
// rank r warms up with (v-1)R + 2(K-r-1) forwards, then alternates, its forwards sweeping the
// chunks in order R micro-batches at a time and its backwards sweeping them in reverse.
// ZB-H1 (Qi et al. 2024): 1F1B with the backward split into I and W; rank r delays its W passes by
// r slots, which keeps 1F1B's memory and shrinks the bubble from (K-1)(F+B+W) to (K-1)(F+B-W).
// Interleaved zero bubble (ZB1P, PyTorch's ScheduleInterleavedZeroBubble): interleaved 1F1B with
// (v-1)R + (K-r-1) warm-up forwards, I in B's place and W as ZB-H1 delays them; v = 1 is ZB-H1.
// ZB-V (Qi et al. 2024, section 6): two chunks per rank in a V (stage r and 2K-1-r), F, I and W
// interleaved so that with equal F, I and W times the bubble vanishes; 1F1B's activation memory.
// DualPipeV (DeepSeek-V3's DualPipe folded into a V): the same V; in its steady state each rank
// pairs a forward of one chunk with a full backward of the other (run here one after the other),
// and the last backwards split into I and W to fill the drain. Needs M >= 2K.
#pragma once

#include "core/plan.h"
#include "core/schedule/schedule.h"
#include "core/status.h"

namespace gpipe {

/// REQUIRES: ranks >= 1, microbatches >= 1, and CheckMicrobatchCount (placement.h) ok for the
/// kind (chunks >= 1 for the interleaved ones). Use GenerateSchedule for checked input.
Schedule GenerateGpipe(int ranks, int microbatches);
Schedule Generate1F1B(int ranks, int microbatches);
Schedule GenerateInterleaved1F1B(int ranks, int chunks, int microbatches);
Schedule GenerateZbH1(int ranks, int microbatches);
Schedule GenerateInterleavedZb(int ranks, int chunks, int microbatches);
Schedule GenerateZbV(int ranks, int microbatches);
Schedule GenerateDualPipeV(int ranks, int microbatches);

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
