// The co-located factor is fitted so that the simulator, pricing the probe's own run with core
// sharing, gets the compute the run measured: the factor applies only while all ranks compute,
// so it must exceed the run's average wherever a rank sometimes computes alone.
#include "compare/core_sharing_fit.h"

#include <gtest/gtest.h>

#include "core/schedule/validate.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"
#include "tests/executor/test_plans.h"

namespace gpipe {
namespace {

// The probe's two-rank plan: 1F1B, K = 2, four micro-batches, on one node.
Plan ProbePlan() { return executor::testing::EvenPlan(4, ScheduleKind::k1F1B, 2, 1, 4, 1, 8, false, Optimizer::kSgd); }

// What the simulator prices the plan's compute at with two-rank factor q, over one rank's speed.
double PricedAverage(double q) {
  Plan plan = ProbePlan();
  const auto busy = [&plan](double factor) {
    StepCosts costs;
    costs.concurrent_ranks = 2;
    costs.compute_scale = {{1.0, 0.0}, {factor, 0.0}};
    plan.profile.step_costs = costs;
    const SimResult sim = Simulate(*BuildSchedule(plan), *BuildCostModel(plan), SimOptions{false}).value();
    return sim.ranks[0].busy_ms + sim.ranks[1].busy_ms;
  };
  return busy(q) / busy(1.0);
}

TEST(CoreSharingFit, RecoversTheFactorThatGivesTheMeasuredAverage) {
  for (double q : {1.05, 1.3, 2.0}) {
    const double average = PricedAverage(q);
    const Expected<double> fitted = FitToCoreSharing(ProbePlan(), {1.0}, average, 2);
    ASSERT_TRUE(fitted.ok()) << fitted.status().message();
    EXPECT_NEAR(*fitted, q, 1e-6 * q) << "average " << average;
  }
}

TEST(CoreSharingFit, TheFactorExceedsTheAverageWhereARankSometimesComputesAlone) {
  // In 1F1B over four micro-batches each rank computes alone during fill and drain: a measured
  // average of 1.15 needs a larger factor while both compute, and no slowdown needs none.
  const Expected<double> fitted = FitToCoreSharing(ProbePlan(), {1.0}, 1.15, 2);
  ASSERT_TRUE(fitted.ok()) << fitted.status().message();
  EXPECT_GT(*fitted, 1.17);
  EXPECT_NEAR(PricedAverage(*fitted), 1.15, 1e-6);
  // No slowdown, or a run faster than one rank: nothing to fit (sharing never speeds a rank up).
  EXPECT_EQ(FitToCoreSharing(ProbePlan(), {1.0}, 1.0, 2).value(), 1.0);
  EXPECT_EQ(FitToCoreSharing(ProbePlan(), {1.0}, 0.97, 2).value(), 0.97);
}

}  // namespace
}  // namespace gpipe
