// The pipeline bubble: one definition, used by the simulator (simulate, plan), compare and every
// report, for predicted and measured steps alike.
//
// The bubble is the time ranks sit idle because of the pipeline's shape (its fill, its drain and
// the waits between stages), as a fraction of the pipeline's rank-time. Of rank r's time it counts
//   - the time its receives waited for their message, and
//   - the time from its last action's end to the pipeline's end (the latest end of any rank's
//     last action);
// and leaves out compute, issuing sends, overhead between actions, and everything after the
// pipeline's end (gradient all-reduce, optimizer step, bookkeeping: compare's "after the last
// action"). With span = the pipeline's end, measured from the step's start:
//
//   bubble fraction = sum over the K ranks of (wait_r + span - end_r) / (K x span).
//
// With free links, no send overhead, no gaps and no tail this is 1 - busy / (K x step), GPipe's
// (K-1)/(M+K-1) for equal stages. One rank (K=1) has no bubble: 0, whatever its overheads; the
// time a rank spends not computing is its idle time, reported apart.
#pragma once

#include <vector>

namespace gpipe {

/// What the bubble needs of one rank in one step.
struct RankSpan {
  /// Time its receives waited for their messages.
  double wait_ms = 0;
  /// When its last action ended, from the step's start.
  double end_ms = 0;
};

/// The bubble fraction above, in [0, 1]; 0 for no ranks or a span of 0.
double BubbleFraction(const std::vector<RankSpan>& ranks);

}  // namespace gpipe
