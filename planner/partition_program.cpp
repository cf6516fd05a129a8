#include "planner/partition_program.h"

namespace gpipe::path_internal {

Row RowOf(const GraphPath& path, int stages) {
  Row row{Coefficients(stages, OpTimes{}), path.hops};
  for (const auto& [stage, op, count] : path.body) row.c[stage][op] += count;
  return row;
}

double RowMs(const Row& row, const std::vector<OpTimes>& stage_times) {
  double ms = row.hops;
  for (size_t s = 0; s < stage_times.size(); ++s) {
    for (int op = 0; op < kOps; ++op) ms += row.c[s][op] * stage_times[s][op];
  }
  return ms;
}

std::vector<OpTimes> StageTimesOf(const std::vector<int>& ends, const std::vector<OpTimes>& times,
                                  const BoundaryHops& hops) {
  std::vector<OpTimes> stage_times(ends.size());
  for (size_t s = 0, l = 0; s < ends.size(); ++s) {
    stage_times[s] = OpTimes{};
    for (; l < static_cast<size_t>(ends[s]); ++l) {
      for (int op = 0; op < kOps; ++op) stage_times[s][op] += times[l][op];
    }
    if (s + 1 < ends.size()) stage_times[s][kH] += hops.Ms(static_cast<int>(s), ends[s] - 1);
  }
  return stage_times;
}

double LeastOverPartitions(const Coefficients& c, const std::vector<OpTimes>& times, const BoundaryHops& hops,
                           std::vector<int>* ends) {
  const auto layer_cost = [&](int l, int s) {
    double x = 0;
    for (int op = 0; op < kOps; ++op) x += c[s][op] * times[l][op];
    return x;
  };
  const auto end_cost = [&](int s, int l) { return EndCost(c, hops, s, l); };
  return LeastOverPartitionsOf(static_cast<int>(c.size()), static_cast<int>(times.size()), layer_cost, end_cost, ends);
}


}  // namespace gpipe::path_internal
