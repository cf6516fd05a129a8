// The pipeline bubble (simulator/bubble.h): waiting and drain over the pipeline's rank-time,
// nothing else. One rank has none; sends, gaps and the work after the last action are not in it.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/schedule/generators.h"
#include "core/schedule/lower.h"
#include "simulator/bubble.h"
#include "simulator/report.h"
#include "simulator/simulator.h"

namespace gpipe {
namespace {

SimResult Simulated(ScheduleKind kind, int ranks, int microbatches, const CostModel& costs) {
  Expected<Schedule> compute = GenerateSchedule(kind, ranks, ranks, microbatches);
  EXPECT_TRUE(compute.ok()) << compute.status().message();
  Expected<SimResult> result = Simulate(AddCommunication(*compute), costs);
  EXPECT_TRUE(result.ok()) << result.status().message();
  return *result;
}

TEST(Bubble, Table) {
  struct Row {
    std::vector<RankSpan> ranks;
    double bubble;
  };
  const Row rows[] = {
      {{}, 0.0},
      {{{0, 10}}, 0.0},                    // one rank: no bubble, whatever its end
      {{{0, 0}}, 0.0},                     // nothing ran
      {{{0, 10}, {4, 8}}, (0 + 4 + 2) / 20.0},  // rank 1 waited 4 and drained 2 of span 10
      {{{3, 10}, {3, 10}}, 6 / 20.0},      // waits only
  };
  for (const Row& row : rows) EXPECT_DOUBLE_EQ(BubbleFraction(row.ranks), row.bubble) << row.ranks.size();
}

TEST(Bubble, OneRankHasNoneWhateverItsTail) {
  CostModel costs = UniformCostModel(1, 1, 1.0, 2.0);
  costs.tail_ms = {5.0};  // optimizer step and bookkeeping
  const SimResult r = Simulated(ScheduleKind::kGpipe, 1, 4, costs);
  EXPECT_DOUBLE_EQ(r.step_time_ms, 4 * 3.0 + 5.0);
  EXPECT_EQ(r.bubble_fraction, 0.0);
  EXPECT_GT(1.0 - r.ranks[0].busy_ms / r.step_time_ms, 0.25);  // idle, not bubble
}

TEST(Bubble, LeavesOutSendsAndTheTail) {
  // With a send overhead and a tail, the bubble is still fill and drain: what is left of the
  // pipeline's rank-time after compute and sends.
  const int k = 2, m = 4;
  CostModel costs = UniformCostModel(k, k, 1.0, 2.0);
  costs.send_overhead_ms = 0.25;
  costs.tail_ms = {3.0, 3.0};
  const SimResult r = Simulated(ScheduleKind::kGpipe, k, m, costs);
  double span = 0, busy = 0, wait = 0;
  for (const RankResult& rank : r.ranks) {
    span = std::max(span, rank.end_ms);
    busy += rank.busy_ms;
    wait += rank.wait_ms;
  }
  const double sends = 2 * m * costs.send_overhead_ms;  // M activations one way, M gradients back
  EXPECT_NEAR(r.bubble_fraction, 1.0 - (busy + sends) / (k * span), 1e-12);
  EXPECT_NEAR(r.bubble_fraction, BubbleFraction({{r.ranks[0].wait_ms, r.ranks[0].end_ms},
                                                 {r.ranks[1].wait_ms, r.ranks[1].end_ms}}), 1e-12);
  EXPECT_GT(wait, 0);
  EXPECT_GT(r.step_time_ms, span + 2.9);  // the tail is in the step, not in the bubble
}

TEST(Bubble, FreeLinksGiveTheClosedForm) {
  for (int k : {1, 2, 4}) {
    for (int m : {1, 4, 8}) {
      const SimResult r = Simulated(ScheduleKind::k1F1B, k, m, UniformCostModel(k, k, 1.0, 2.0));
      EXPECT_NEAR(r.bubble_fraction, GpipeBubble(k, m), 1e-12) << "K=" << k << " M=" << m;
    }
  }
}

}  // namespace
}  // namespace gpipe
