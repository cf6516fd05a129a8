#include "planner/partition_program.h"

namespace gpipe::path_internal {

Row RowOf(const GraphPath& path, int stages) {
  Row row{Coefficients(stages, {0.0, 0.0, 0.0, 0.0, 0.0}), path.hops};
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

std::vector<OpTimes> StageTimesOf(const std::vector<int>& ends,
                                                    const std::vector<OpTimes>& times) {
  std::vector<OpTimes> stage_times(ends.size());
  for (size_t s = 0, l = 0; s < ends.size(); ++s) {
    stage_times[s] = {0.0, 0.0, 0.0, 0.0, 0.0};
    for (; l < static_cast<size_t>(ends[s]); ++l) {
      for (int op = 0; op < kOps; ++op) stage_times[s][op] += times[l][op];
    }
  }
  return stage_times;
}

double LeastOverPartitions(const Coefficients& c, const std::vector<OpTimes>& times, std::vector<int>* ends) {
  const auto layer_cost = [&](int l, int s) {
    double x = 0;
    for (int op = 0; op < kOps; ++op) x += c[s][op] * times[l][op];
    return x;
  };
  return LeastOverPartitionsOf(static_cast<int>(c.size()), static_cast<int>(times.size()), layer_cost, ends);
}


}  // namespace gpipe::path_internal
