// The precedence graph's longest path against the simulator: on free links, for every schedule
// kind and random stage times, the longest path is the simulated step (the simulator runs the
// same actions in the same order, each as soon as its rank and its inputs are ready); with
// all-reduces after each rank's last action, the same with them; with slow links, never above it.
#include "planner/precedence_graph.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/schedule/generators.h"
#include "core/schedule/lower.h"
#include "core/schedule/placement.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"

namespace gpipe::path_internal {
namespace {

struct Case {
  double longest_path = 0;
  double simulated = 0;
};

Case Compare(ScheduleKind kind, int ranks, int chunks, int microbatches, std::mt19937& rng, double allreduce_ms,
             double latency_ms) {
  const int stages = ranks * chunks;
  Expected<Schedule> schedule = GenerateSchedule(kind, ranks, stages, microbatches);
  EXPECT_TRUE(schedule.ok()) << schedule.status().message();
  if (!schedule.ok()) return {};
  CostModel costs = UniformCostModel(ranks, stages, 1.0, 2.0, SplitsBackward(kind) ? 1.0 : 0.0);
  std::uniform_real_distribution<double> ms(0.2, 3.0);
  std::vector<OpTimes> times(stages);
  for (int s = 0; s < stages; ++s) {
    StageCost& c = costs.stages[s];
    c.forward_ms = ms(rng);
    c.backward_ms = ms(rng) + ms(rng);
    c.backward_weight_ms = SplitsBackward(kind) ? c.backward_ms * std::uniform_real_distribution<double>(0.2, 0.8)(rng) : 0.0;
    c.backward_input_ms = c.backward_ms - c.backward_weight_ms;
    times[s] = {c.forward_ms, c.backward_ms, c.backward_input_ms, c.backward_weight_ms, 0.0};
  }
  // Each boundary's message (H) where the stages' ranks differ: the links' latency.
  for (int s = 0; s + 1 < stages; ++s) {
    if (schedule->stage_rank[s] != schedule->stage_rank[s + 1]) times[s][kH] = latency_ms;
  }
  for (auto& row : costs.links) {
    for (Link& link : row) link.latency_ms = latency_ms;
  }
  std::vector<AllReduceLine> allreduce;
  if (allreduce_ms > 0) {
    costs.allreduce_ms.assign(ranks, allreduce_ms);
    allreduce.assign(ranks, AllReduceLine{allreduce_ms, 0.0});
  }
  const std::optional<PrecedenceGraph> graph = PrecedenceGraphOf(*schedule, size_t{1} << 20);
  EXPECT_TRUE(graph.has_value());
  Expected<SimResult> simulated = Simulate(AddCommunication(*schedule), costs);
  EXPECT_TRUE(simulated.ok()) << simulated.status().message();
  if (!graph || !simulated.ok()) return {};
  const std::vector<GraphPath> paths = LongestPaths(*graph, times, allreduce, false);
  EXPECT_EQ(paths.size(), 1u);
  Case out;
  out.simulated = simulated->step_time_ms;
  // The path's own length from its terms: what the bound's rows price.
  out.longest_path = paths[0].hops;
  for (const PathTerm& term : paths[0].body) out.longest_path += term.count * times[term.stage][term.op];
  return out;
}

TEST(PrecedenceGraph, LongestPathIsTheSimulatedStepOnFreeLinks) {
  std::mt19937 rng(11);
  int compared = 0;
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int ranks = 1; ranks <= 4; ++ranks) {
      for (int microbatches = 1; microbatches <= 2 * ranks + 2; ++microbatches) {
        if (!CheckMicrobatchCount(kind, ranks, microbatches).ok()) continue;
        const int chunks = LayoutOf(kind) == StageLayout::kOnePerRank ? 1 : 2;
        if (LayoutOf(kind) == StageLayout::kLoop && ranks < 2) continue;
        for (double allreduce : {0.0, 5.0}) {
          const std::string label = std::string(ScheduleName(kind)) + " K=" + std::to_string(ranks) +
                                    " M=" + std::to_string(microbatches) + " all-reduce " + std::to_string(allreduce);
          const Case free = Compare(kind, ranks, chunks, microbatches, rng, allreduce, 0.0);
          EXPECT_NEAR(free.longest_path, free.simulated, 1e-9 * free.simulated) << label;
          const Case slow = Compare(kind, ranks, chunks, microbatches, rng, allreduce, 0.7);
          EXPECT_LE(slow.longest_path, slow.simulated * (1 + 1e-9)) << label << ", links of 0.7 ms";
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 100);
}

}  // namespace
}  // namespace gpipe::path_internal
