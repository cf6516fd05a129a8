// A cut whose ranks, not only its stages, carry even work: for layouts with several stages per
// rank (a loop or a V), the most even cut of the stages (PartitionContext::EvenCut) can still
// leave one rank's sum of stages well above another's when the layers are uneven, and with many
// micro-batches the busiest rank sets the step. A seed of the interleaved search (its first
// incumbents), not a bound.
#pragma once

#include <functional>
#include <vector>

namespace gpipe::partition_internal {

// From the cut whose stages end at `ends` (stage s on rank stage_rank[s]; every stage a layer at
// least), moves each boundary a layer at a time to the less loaded of the two ranks it lies
// between while that lowers the larger of their two loads (`work(a, e)`: layers [a, e) as one
// stage). Each move lowers the sum of the squared loads, so it ends; the busiest rank's load never
// rises. Returns the balanced ends.
std::vector<int> BalanceRankLoads(std::vector<int> ends, const std::vector<int>& stage_rank, int ranks,
                                  const std::function<double(int, int)>& work);

// The busiest rank's load under the cut whose stages end at `ends`.
double BusiestRankLoad(const std::vector<int>& ends, const std::vector<int>& stage_rank, int ranks,
                       const std::function<double(int, int)>& work);

// A cut of `layers` layers into the stages of `stage_rank` (every stage a layer at least) made
// rank by rank under a cap: each stage as long as its rank stays within its share of the cap (a
// rank's c-th of v stages up to c/v of it), the last stage the rest; the cap bisected, and the
// least busy cut tried returned. Empty when there are fewer layers than stages.
std::vector<int> QuotaCut(int layers, const std::vector<int>& stage_rank, int ranks,
                          const std::function<double(int, int)>& work);

}  // namespace gpipe::partition_internal
