// Where a schedule's stages run. The stage-to-rank map is part of the schedule value
// (Schedule::stage_rank); it is made here, once for every schedule kind, from the kind's layout,
// and a pipeline's shape (K ranks, S stages, M micro-batches) is checked here, for plans and
// generators alike. A new placement is a new layout here and a generator, nothing else.
//
//   one per rank  stage s on rank s                         gpipe, 1f1b, zb-h1
//   loop          v = S/K stages per rank, s on rank s % K  interleaved-1f1b, interleaved-zb
//   V             two stages per rank, s and 2K-1-s on s    zb-v, dualpipe-v
//
// K=3, S=6: loop puts stages 0..5 on ranks 0 1 2 0 1 2; V puts them on 0 1 2 2 1 0, so the last
// stage shares rank 0 with the first and the turn of the V (stages K-1 and K) stays on one rank.
#pragma once

#include <string>
#include <vector>

#include "core/plan.h"
#include "core/status.h"

namespace gpipe {

enum class StageLayout { kOnePerRank, kLoop, kV };

StageLayout LayoutOf(ScheduleKind kind);
/// How the layout reads in errors: "stage s runs on rank s", ...
std::string DescribeLayout(StageLayout layout);

/// S for K ranks: K one per rank, `chunks` x K in a loop, 2K in a V.
int StageCount(ScheduleKind kind, int ranks, int chunks);

/// The rank of each of `stages` stages over `ranks` ranks. REQUIRES: CheckStageCount is ok.
std::vector<int> PlaceStages(ScheduleKind kind, int ranks, int stages);

/// The kind takes S stages on K ranks (one per rank, a whole number per rank, or two per rank).
/// The error names the kind and what it needs.
Status CheckStageCount(ScheduleKind kind, int ranks, int stages);
/// The kind takes M micro-batches on K ranks:
///   - the interleaved kinds, by PyTorch's rule (torch.distributed.pipelining 2.11): rounds =
///     max(1, M / K) and M a multiple of the rounds (K=4: M in 1-8, 10, 12, 15, 16, 20, ...);
///   - dualpipe-v: M at least the 2K stages.
/// The error names the nearest M that works.
Status CheckMicrobatchCount(ScheduleKind kind, int ranks, int microbatches);

/// Micro-batches per round of an interleaved schedule: M / max(1, M / K) (K when M is a multiple).
int MicrobatchesPerRound(int ranks, int microbatches);

/// Zero-bubble kinds split a backward into I (input gradient) and W (weight gradient): zb-h1,
/// interleaved-zb and zb-v always, dualpipe-v for part of its micro-batches.
bool SplitsBackward(ScheduleKind kind);

/// The schedules torch.distributed.pipelining added after GPipe, 1F1B, interleaved 1F1B and ZB-H1:
/// interleaved-zb, zb-v, dualpipe-v (the planner says how much they win by).
bool IsNewerSchedule(ScheduleKind kind);

}  // namespace gpipe
