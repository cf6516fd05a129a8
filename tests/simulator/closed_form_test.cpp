// The simulator against the closed forms of the pipeline literature, over a grid of K and M.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/schedule/generators.h"
#include "core/schedule/lower.h"
#include "core/schedule/validate.h"
#include "simulator/report.h"
#include "simulator/simulator.h"

namespace gpipe {
namespace {

SimResult RunSchedule(ScheduleKind kind, int ranks, int stages, int microbatches, const CostModel& costs) {
  Expected<Schedule> compute = GenerateSchedule(kind, ranks, stages, microbatches);
  EXPECT_TRUE(compute.ok()) << compute.status().message();
  Expected<SimResult> result = Simulate(AddCommunication(*compute), costs);
  EXPECT_TRUE(result.ok()) << result.status().message();
  return *result;
}

constexpr double kTolerance = 1e-9;
const int kRanks[] = {1, 2, 3, 4, 6, 8};
const int kMicrobatches[] = {1, 2, 3, 4, 8, 16, 32};

TEST(ClosedForm, GpipeStepAndBubble) {
  const double f = 1.5, b = 2.5;
  for (int k : kRanks) {
    for (int m : kMicrobatches) {
      const SimResult r = RunSchedule(ScheduleKind::kGpipe, k, k, m, UniformCostModel(k, k, f, b));
      EXPECT_NEAR(r.step_time_ms, (m + k - 1) * (f + b), kTolerance) << "K=" << k << " M=" << m;
      EXPECT_NEAR(r.bubble_fraction, GpipeBubble(k, m), kTolerance) << "K=" << k << " M=" << m;
      for (int rank = 0; rank < k; ++rank) EXPECT_EQ(r.ranks[rank].max_in_flight, m);
    }
  }
}

TEST(ClosedForm, OneFOneBMatchesGpipeStepWithBoundedInFlight) {
  const double f = 1.0, b = 2.0;
  for (int k : kRanks) {
    for (int m : kMicrobatches) {
      const SimResult r = RunSchedule(ScheduleKind::k1F1B, k, k, m, UniformCostModel(k, k, f, b));
      EXPECT_NEAR(r.step_time_ms, (m + k - 1) * (f + b), kTolerance) << "K=" << k << " M=" << m;
      EXPECT_NEAR(r.bubble_fraction, GpipeBubble(k, m), kTolerance);
      for (int rank = 0; rank < k; ++rank) {
        EXPECT_EQ(r.ranks[rank].max_in_flight, std::min(k - rank, m)) << "K=" << k << " M=" << m << " r=" << rank;
      }
    }
  }
}

TEST(ClosedForm, InterleavedShrinksTheBubbleByTheChunks) {
  // Megatron-LM 2021: with v chunks per rank the pipeline bubble is (K-1)(f+b)/v, where f and b
  // are a whole rank's forward and backward time; ideal time M(f+b).
  const double f = 2.0, b = 4.0;
  for (int k : {2, 4, 8}) {
    for (int v : {1, 2, 3, 4}) {
      for (int m : {k, 2 * k, 4 * k}) {
        const SimResult r =
            RunSchedule(ScheduleKind::kInterleaved1F1B, k, k * v, m, UniformCostModel(k, k * v, f / v, b / v));
        const double ideal = m * (f + b);
        const double bubble = (k - 1) * (f + b) / v;
        EXPECT_NEAR(r.step_time_ms, ideal + bubble, 1e-6) << "K=" << k << " v=" << v << " M=" << m;
        // Megatron's bubble fraction is relative to the ideal time: (K-1)/(v M).
        EXPECT_NEAR((r.step_time_ms - ideal) / ideal, (k - 1.0) / (v * m), 1e-6);
      }
    }
  }
}

TEST(ClosedForm, ZbH1RemovesTwoKMinusOneW) {
  const double f = 1.0, b = 2.0, w = 0.8;  // b includes w: input gradient 1.2, weight gradient 0.8
  for (int k : kRanks) {
    for (int m : kMicrobatches) {
      if (m < k) continue;  // the closed form holds once the pipeline fills
      const SimResult one = RunSchedule(ScheduleKind::k1F1B, k, k, m, UniformCostModel(k, k, f, b, w));
      const SimResult zb = RunSchedule(ScheduleKind::kZbH1, k, k, m, UniformCostModel(k, k, f, b, w));
      const double ideal = m * (f + b);
      EXPECT_NEAR(one.step_time_ms - ideal, (k - 1) * (f + b), kTolerance) << "K=" << k << " M=" << m;
      // Zero Bubble PP, Table 2: ZB-H1's bubble is (K-1)(T_F + T_B - T_W), T_B the input gradient.
      EXPECT_NEAR(zb.step_time_ms - ideal, (k - 1) * (f + (b - w) - w), kTolerance) << "K=" << k << " M=" << m;
      EXPECT_NEAR(one.step_time_ms - zb.step_time_ms, 2 * (k - 1) * w, kTolerance);
      // ... with 1F1B's peak memory: no rank holds more micro-batches than 1F1B's first rank.
      for (int rank = 0; rank < k; ++rank) EXPECT_LE(zb.ranks[rank].max_in_flight, std::min(k, m));
    }
  }
}

TEST(ClosedForm, UnequalStagesFollowTheFlowShopForm) {
  // GPipe is a permutation flow shop twice over: all forwards through the stages, then all
  // backwards back. With identical micro-batches each phase takes the sum of its stage times plus
  // (M-1) times the slowest stage's.
  const std::vector<double> forward = {1.0, 3.0, 2.0, 0.5};
  const std::vector<double> backward = {2.0, 5.0, 7.0, 1.0};
  const double sum_f = std::accumulate(forward.begin(), forward.end(), 0.0);
  const double sum_b = std::accumulate(backward.begin(), backward.end(), 0.0);
  CostModel costs = UniformCostModel(4, 4, 0, 0);
  for (int s = 0; s < 4; ++s) {
    costs.stages[s].forward_ms = forward[s];
    costs.stages[s].backward_ms = backward[s];
  }
  for (int m : kMicrobatches) {
    const SimResult gpipe = RunSchedule(ScheduleKind::kGpipe, 4, 4, m, costs);
    EXPECT_NEAR(gpipe.step_time_ms, sum_f + (m - 1) * 3.0 + sum_b + (m - 1) * 7.0, kTolerance) << "M=" << m;
    // 1F1B cannot beat the busiest rank's work plus the pipeline's way in and out of it.
    const SimResult one = RunSchedule(ScheduleKind::k1F1B, 4, 4, m, costs);
    for (int j = 0; j < 4; ++j) {
      double before = 0, after = 0;
      for (int s = 0; s < j; ++s) {
        before += forward[s];
        after += backward[s];
      }
      EXPECT_GE(one.step_time_ms + kTolerance, before + m * (forward[j] + backward[j]) + after);
    }
  }
}

TEST(ClosedForm, RematAddsOneForwardPerBackward) {
  for (int k : {1, 2, 4}) {
    for (int m : {1, 4, 8}) {
      CostModel costs = UniformCostModel(k, k, 1.0, 2.0);
      for (auto& stage : costs.stages) {
        stage.remat = true;
        stage.remat_forward_ms = 1.0;  // the recomputed forward, recording
      }
      const SimResult r = RunSchedule(ScheduleKind::kGpipe, k, k, m, costs);
      EXPECT_NEAR(r.step_time_ms, (m + k - 1) * (1.0 + 2.0 + 1.0), kTolerance);
      // A remat stage's forward under no_grad may cost less than the one its backward recomputes.
      for (auto& stage : costs.stages) stage.forward_ms = 0.5;
      const SimResult cheaper = RunSchedule(ScheduleKind::kGpipe, k, k, m, costs);
      EXPECT_NEAR(cheaper.step_time_ms, (m + k - 1) * (0.5 + 2.0 + 1.0), kTolerance);
    }
  }
}

TEST(ClosedForm, DeterministicBitForBit) {
  CostModel costs = UniformCostModel(4, 8, 0.37, 0.71, 0.3);
  for (auto& row : costs.links) {
    for (Link& link : row) link = Link{3e9, 0.013};
  }
  for (auto& stage : costs.stages) stage.output_bytes = stage.input_bytes = 12345;
  const SimResult a = RunSchedule(ScheduleKind::kInterleaved1F1B, 4, 8, 8, costs);
  const SimResult b = RunSchedule(ScheduleKind::kInterleaved1F1B, 4, 8, 8, costs);
  ASSERT_EQ(a.actions.size(), b.actions.size());
  for (size_t i = 0; i < a.actions.size(); ++i) {
    EXPECT_EQ(a.actions[i].start_ms, b.actions[i].start_ms);
    EXPECT_EQ(a.actions[i].action, b.actions[i].action);
  }
  EXPECT_EQ(a.step_time_ms, b.step_time_ms);
}

}  // namespace
}  // namespace gpipe
