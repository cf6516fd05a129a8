// Core sharing (simulator/cost_model.h, CoreSharingOf): ranks on a node that computes fewer at once
// than it holds progress at the rate of how many compute at each moment. Checked against a step
// worked by hand, against the plain simulator when the rate is 1, and against the step evaluator.
#include <gtest/gtest.h>

#include <random>

#include "core/schedule/generators.h"
#include "core/schedule/lower.h"
#include "core/schedule/placement.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"
#include "simulator/step_evaluator.h"

namespace gpipe {
namespace {

Schedule Lowered(ScheduleKind kind, int ranks, int stages, int microbatches) {
  Expected<Schedule> compute = GenerateSchedule(kind, ranks, stages, microbatches);
  EXPECT_TRUE(compute.ok()) << compute.status().message();
  return AddCommunication(*compute);
}

TEST(CoreSharing, TwoRanksOnOneCoreWorkedByHand) {
  // GPipe, K=2, M=2, forward = backward = 1 ms, free links, one core for the two ranks. Alone:
  // 6 ms. Shared: F0 on rank 0 alone [0,1]; F1 on rank 0 and F0 on rank 1 together at half speed
  // [1,3]; F1 on rank 1 alone [3,4], its first backward alone [4,5]; then rank 1's second backward
  // and rank 0's first together [5,7]; rank 0's last backward alone [7,8].
  const Schedule schedule = Lowered(ScheduleKind::kGpipe, 2, 2, 2);
  CostModel costs = UniformCostModel(2, 2, 1.0, 1.0);
  Expected<SimResult> alone = Simulate(schedule, costs);
  ASSERT_TRUE(alone.ok());
  EXPECT_DOUBLE_EQ(alone->step_time_ms, 6.0);
  costs.active_rate = {1.0, 1.0, 0.5};
  Expected<SimResult> shared = Simulate(schedule, costs);
  ASSERT_TRUE(shared.ok());
  EXPECT_DOUBLE_EQ(shared->step_time_ms, 8.0);
  // Busy time is the time spent computing, stretched: rank 0 computed [0,3] and [5,8].
  EXPECT_DOUBLE_EQ(shared->ranks[0].busy_ms, 6.0);
  EXPECT_DOUBLE_EQ(StepEvaluator(schedule).StepTimeMs(costs), 8.0);
}

TEST(CoreSharing, ARankWokenWhileTheCoresAreBusyRunsLateWorkedByHand) {
  // GPipe, K=2, M=2, forward = backward = 1 ms, free links, rate 1 throughout; the cores are all
  // busy while one rank computes (saturated_computing 1, as four ranks on two cores), and a woken
  // rank waits 0.5 ms. F0 on rank 0 [0,1]; it reaches rank 1, waiting, while rank 0 computes F1:
  // rank 1 runs F0 at [1.5,2.5]. F1 arrives at 2 while rank 1 computes: no wait; F1 [2.5,3.5],
  // B1 [3.5,4.5]. B1's gradient reaches rank 0, waiting, as rank 1 starts B0: rank 0 runs B1 at
  // [5,6]; B0's gradient arrives at 5.5 while rank 0 computes; B0 [6,7]. Without the wait: 6 ms.
  const Schedule schedule = Lowered(ScheduleKind::kGpipe, 2, 2, 2);
  CostModel costs = UniformCostModel(2, 2, 1.0, 1.0);
  costs.active_rate = {1.0, 1.0, 1.0};
  EXPECT_DOUBLE_EQ(Simulate(schedule, costs).value().step_time_ms, 6.0);
  costs.saturated_computing = 1;
  costs.saturated_wakeup_ms = 0.5;
  Expected<SimResult> late = Simulate(schedule, costs, SimOptions{true});
  ASSERT_TRUE(late.ok());
  EXPECT_DOUBLE_EQ(late->step_time_ms, 7.0);
  EXPECT_DOUBLE_EQ(late->ranks[1].wait_ms, 1.5);  // [0,1.5]
  EXPECT_DOUBLE_EQ(late->ranks[0].wait_ms, 3.0);  // [2,5]
  EXPECT_DOUBLE_EQ(StepEvaluator(schedule).StepTimeMs(costs), 7.0);
  // Saturated only when both compute (two ranks on two cores): no arrival meets a busy node then,
  // since the rank it wakes is not computing.
  costs.saturated_computing = 2;
  EXPECT_DOUBLE_EQ(Simulate(schedule, costs).value().step_time_ms, 6.0);
  costs.saturated_computing = 0;
  EXPECT_DOUBLE_EQ(Simulate(schedule, costs).value().step_time_ms, 6.0);
}

TEST(CoreSharing, RateOneIsThePlainSimulatorAndSharingOnlySlows) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> time(0.1, 5.0), rate(0.2, 1.0);
  int checked = 0;
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int trial = 0; trial < 12; ++trial) {
      const int ranks = 1 + static_cast<int>(rng() % 4);
      const int chunks = 1 + static_cast<int>(rng() % 2);
      int microbatches = 1 + static_cast<int>(rng() % 8);
      while (!CheckMicrobatchCount(kind, ranks, microbatches).ok()) ++microbatches;
      const int stages = StageCount(kind, ranks, chunks);
      CostModel costs = UniformCostModel(ranks, stages, 0, 0);
      for (StageCost& c : costs.stages) {
        c.forward_ms = time(rng);
        c.backward_ms = 2 * time(rng);
        c.backward_weight_ms = c.backward_ms * 0.4;
        c.backward_input_ms = c.backward_ms - c.backward_weight_ms;
        c.output_bytes = c.input_bytes = 1e6;
      }
      for (auto& row : costs.links) {
        for (Link& link : row) link = Link{1e9, 0.05};
      }
      costs.send_overhead_ms = 0.02;
      const Schedule schedule = Lowered(kind, ranks, stages, microbatches);
      const std::string label = std::string(ScheduleName(kind)) + " K=" + std::to_string(ranks) +
                                " S=" + std::to_string(stages) + " M=" + std::to_string(microbatches);
      Expected<SimResult> plain = Simulate(schedule, costs);
      ASSERT_TRUE(plain.ok()) << label;
      costs.active_rate.assign(static_cast<size_t>(ranks) + 1, 1.0);
      Expected<SimResult> at_one = Simulate(schedule, costs);
      ASSERT_TRUE(at_one.ok()) << label;
      EXPECT_NEAR(at_one->step_time_ms, plain->step_time_ms, 1e-9 * plain->step_time_ms) << label;
      // Rates falling with the number computing: never faster than alone, and the evaluator agrees.
      for (size_t a = 2; a < costs.active_rate.size(); ++a) costs.active_rate[a] = costs.active_rate[a - 1] * rate(rng);
      Expected<SimResult> shared = Simulate(schedule, costs);
      ASSERT_TRUE(shared.ok()) << label;
      EXPECT_GE(shared->step_time_ms, plain->step_time_ms * (1 - 1e-12)) << label;
      EXPECT_EQ(StepEvaluator(schedule).StepTimeMs(costs), shared->step_time_ms) << label;
      // Every compute still does its work: at rate r it lasts at least its stage time.
      for (const ActionTiming& action : shared->actions) {
        if (!IsCompute(action.action.op)) continue;
        EXPECT_GE(action.end_ms - action.start_ms,
                  ComputeMs(costs.stages[action.action.stage], action.action.op) * (1 - 1e-9)) << label;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 80);
}

Profile ProfileWithStepCosts(std::vector<double> scales, int concurrent_ranks) {
  Profile profile;
  StepCosts costs;
  for (double s : scales) costs.compute_scale.push_back({s, 0.0});
  costs.concurrent_ranks = concurrent_ranks;
  profile.step_costs = costs;
  return profile;
}

TEST(CoreSharing, RatesFromTheProfilesMeasurements) {
  const Profile profile = ProfileWithStepCosts({1.0, 1.2}, 2);
  const Calibration calibration = profile.step_costs->AsCalibration("sgd");
  Cluster cluster;
  // K=2, D=2: four ranks on a node that computes two at once. One of the replica's ranks
  // computing means two on the node (each replica's), at the two-rank factor; both mean four,
  // the cores shared in halves.
  CoreSharing sharing = CoreSharingOf(profile, cluster, &calibration, 4, 2);
  EXPECT_EQ(sharing.static_ranks, 1);
  ASSERT_EQ(sharing.active_rate.size(), 3u);
  EXPECT_DOUBLE_EQ(sharing.active_rate[1], 1.0 / 1.2);
  EXPECT_DOUBLE_EQ(sharing.active_rate[2], 0.5 / 1.2);
  // A factor below one rank's (noise) never speeds a rank up.
  const Profile faster = ProfileWithStepCosts({1.0, 0.8}, 2);
  const Calibration fast = faster.step_costs->AsCalibration("sgd");
  EXPECT_DOUBLE_EQ(CoreSharingOf(faster, cluster, &fast, 2, 2).active_rate[2], 1.0);
  // Not measured (an older profile, a GPU), one rank per node, or a calibration fitted from runs
  // (which priced each count as it ran): each count's one factor, as before.
  const Profile older = ProfileWithStepCosts({1.0, 1.2}, 0);
  sharing = CoreSharingOf(older, cluster, &calibration, 4, 2);
  EXPECT_TRUE(sharing.active_rate.empty());
  EXPECT_EQ(sharing.static_ranks, 4);
  EXPECT_TRUE(CoreSharingOf(profile, cluster, &calibration, 1, 1).active_rate.empty());
  cluster.calibration = calibration;
  EXPECT_TRUE(CoreSharingOf(profile, cluster, &calibration, 4, 2).active_rate.empty());
}

}  // namespace
}  // namespace gpipe
