// What a step costs beyond its layers, as measured by the profiler (the profile's step_costs) and
// by profile-links (the cluster's allreduce): the simulator prices the optimizer, the step's fixed
// cost, co-located ranks and the all-reduce from them; a cluster calibration fitted from runs
// takes precedence; files without them load and the prediction says what it leaves out.
#include <gtest/gtest.h>

#include <cmath>

#include "core/cluster.h"
#include "core/profile.h"
#include "core/schedule/validate.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"
#include "tests/executor/test_plans.h"

namespace gpipe {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

StepCosts Measured() {
  StepCosts costs;
  costs.optimizer_ms_per_gib["sgd"] = {100.0, 2.0};
  costs.optimizer_ms_per_gib["adam"] = {400.0, 5.0};
  costs.step_overhead_ms = {0.25, 0.01};
  costs.forward_overhead_ms = {0.02, 0.001};
  costs.backward_overhead_ms = {0.03, 0.001};
  costs.compute_scale = {{1.0, 0.0}, {1.5, 0.1}};
  costs.sends_held = true;
  return costs;
}

// Four layers of 1 MiB parameters each, K ranks of one node, D replicas.
Plan FourLayers(int ranks, int replicas, Optimizer optimizer) {
  Plan plan = executor::testing::EvenPlan(4, ScheduleKind::kGpipe, ranks, 1, 2, replicas, 8, false, optimizer);
  for (LayerProfile& layer : plan.profile.layers) layer.param_bytes = 1 << 20;
  return plan;
}

TEST(StepCosts, RoundTripThroughTheProfileFile) {
  Profile profile = FourLayers(1, 1, Optimizer::kSgd).profile;
  profile.step_costs = Measured();
  const Expected<Profile> back = ProfileFromJson(ProfileToJson(profile), "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_TRUE(back->step_costs.has_value());
  EXPECT_EQ(back->step_costs->optimizer_ms_per_gib.at("adam").median, 400.0);
  EXPECT_EQ(back->step_costs->optimizer_ms_per_gib.at("adam").spread, 5.0);
  EXPECT_EQ(back->step_costs->compute_scale.size(), 2u);
  EXPECT_EQ(back->step_costs->compute_scale[1].median, 1.5);
  EXPECT_TRUE(back->step_costs->sends_held);
  EXPECT_EQ(back->step_costs->forward_overhead_ms.median, 0.02);
  EXPECT_EQ(back->step_costs->backward_overhead_ms.median, 0.03);
  EXPECT_TRUE(back->step_costs->action_gap_ms.empty());
}

TEST(StepCosts, TheGapBetweenActionsJoinsEachActionsOverheadPerRanksOnANode) {
  Plan plan = FourLayers(2, 1, Optimizer::kAdam);
  plan.profile.step_costs = Measured();
  plan.profile.step_costs->action_gap_ms = {{0.1, 0.01}, {0.25, 0.02}};
  const Expected<Profile> back = ProfileFromJson(ProfileToJson(plan.profile), "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->step_costs->action_gap_ms.size(), 2u);
  EXPECT_EQ(back->step_costs->action_gap_ms[1].median, 0.25);
  // Two ranks on the node: each forward pays 0.02 + 0.25, each backward 0.03 + 0.25.
  const CostModel costs = BuildCostModel(plan).value();
  plan.profile.step_costs->action_gap_ms.clear();
  const CostModel without = BuildCostModel(plan).value();
  EXPECT_NEAR(costs.stages[0].forward_ms - without.stages[0].forward_ms, 0.25, 1e-12);
  EXPECT_NEAR(costs.stages[1].backward_ms - without.stages[1].backward_ms, 0.25, 1e-12);
}

TEST(StepCosts, BadValuesNameTheField) {
  nlohmann::json json = ProfileToJson(FourLayers(1, 1, Optimizer::kSgd).profile);
  json["step_costs"] = {{"compute_scale", {{{"median", 0.0}}}}};
  Expected<Profile> p = ProfileFromJson(json, "p.json");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("step_costs.compute_scale[0]"), std::string::npos) << p.status().message();
  json["step_costs"] = {{"optimizer_ms_per_gib", {{"adam", {{"median", -1.0}}}}}};
  p = ProfileFromJson(json, "p.json");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("optimizer_ms_per_gib.adam"), std::string::npos) << p.status().message();
  json["step_costs"] = {{"step_overhead_ms", 3}};
  p = ProfileFromJson(json, "p.json");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("step_overhead_ms"), std::string::npos) << p.status().message();
}

TEST(StepCosts, PricesTheOptimizerStepOverheadAndColocatedRanks) {
  Plan plan = FourLayers(2, 1, Optimizer::kAdam);
  const CostModel bare = BuildCostModel(plan).value();
  EXPECT_NE(bare.calibration_note.find("leaves out the optimizer step"), std::string::npos);
  plan.profile.step_costs = Measured();
  const CostModel measured = BuildCostModel(plan).value();
  // Each rank holds two layers, 2 MiB: 0.25 ms + 400 ms/GiB x 2 MiB.
  for (int r = 0; r < 2; ++r) EXPECT_NEAR(measured.AfterLastActionMs(r), 0.25 + 400.0 * 2.0 / 1024.0, 1e-9);
  // Two ranks share the node: compute 1.5x, plus the executor's overhead per action.
  EXPECT_NEAR(measured.stages[0].forward_ms, 1.5 * bare.stages[0].forward_ms + 0.02, 1e-9);
  EXPECT_NEAR(measured.stages[1].backward_ms, 1.5 * bare.stages[1].backward_ms + 0.03, 1e-9);
  EXPECT_TRUE(measured.stages[0].sends_held);
  // adam-mixed runs as adam; an optimizer not measured gets no optimizer term.
  plan.optimizer = Optimizer::kAdamMixed;
  EXPECT_NEAR(BuildCostModel(plan).value().AfterLastActionMs(0), 0.25 + 400.0 * 2.0 / 1024.0, 1e-9);
  plan.optimizer = Optimizer::kMomentum;
  EXPECT_NEAR(BuildCostModel(plan).value().AfterLastActionMs(0), 0.25, 1e-9);
}

TEST(StepCosts, MoreRanksOnANodeThanMeasuredIsNamedInTheNote) {
  Plan plan = FourLayers(2, 1, Optimizer::kAdam);
  plan.profile.step_costs = Measured();  // compute_scale measured for 1 and 2 ranks
  EXPECT_EQ(BuildCostModel(plan).value().calibration_note.find("more than the"), std::string::npos);
  plan = FourLayers(2, 2, Optimizer::kAdam);
  plan.profile.step_costs = Measured();
  const CostModel four = BuildCostModel(plan).value();
  EXPECT_NE(four.calibration_note.find("the plan puts 4 ranks on a node, more than the 2 measured"), std::string::npos)
      << four.calibration_note;
  EXPECT_NE(four.calibration_note.find("--ranks-per-node 4"), std::string::npos) << four.calibration_note;
}

TEST(StepCosts, MoreRanksThanTheNodeComputesAtOnceAreSaidToBePricedKindly) {
  // The node computes two at once: two ranks are priced by how many compute at each moment; four
  // share the cores evenly past two, which the 2-core machine's runs measured 10-27% slower.
  Plan plan = FourLayers(2, 1, Optimizer::kAdam);
  plan.profile.step_costs = Measured();
  plan.profile.step_costs->concurrent_ranks = 2;
  const std::string two = BuildCostModel(plan).value().calibration_note;
  EXPECT_NE(two.find("2 ranks share a node that computes 2 at once"), std::string::npos) << two;
  EXPECT_EQ(two.find("docs/planner.md"), std::string::npos) << two;
  plan = FourLayers(2, 2, Optimizer::kAdam);
  plan.profile.step_costs = Measured();
  plan.profile.step_costs->concurrent_ranks = 2;
  const std::string four = BuildCostModel(plan).value().calibration_note;
  EXPECT_NE(four.find("4 ranks share a node that computes 2 at once"), std::string::npos) << four;
  EXPECT_NE(four.find("shared evenly past that, which runs have measured slower (docs/planner.md)"), std::string::npos)
      << four;
}

TEST(StepCosts, TheClustersSaturatedWakeupPricesRanksWokenOnABusyNode) {
  // A node that computes two at once. With two replicas of K=2 (four ranks) the cores are all busy
  // while one rank of the replica computes, so a rank woken as its peer computes waits for a core;
  // with one replica they are busy only while both compute, when none waits, so the term never
  // applies and the note does not mention it. Without the cluster's saturated_wakeup the note says
  // the time is left out.
  Plan plan = FourLayers(2, 2, Optimizer::kAdam);
  plan.profile.step_costs = Measured();
  plan.profile.step_costs->concurrent_ranks = 2;
  const CostModel bare = BuildCostModel(plan).value();
  EXPECT_EQ(bare.saturated_wakeup_ms, 0.0);
  EXPECT_NE(bare.calibration_note.find("the cluster has no saturated_wakeup"), std::string::npos) << bare.calibration_note;
  plan.cluster.saturated_wakeup = SaturatedWakeup{0.85, 0.02, 0.9, 1.95, 400};
  const CostModel four = BuildCostModel(plan).value();
  EXPECT_EQ(four.saturated_computing, 1);
  EXPECT_DOUBLE_EQ(four.saturated_wakeup_ms, 0.85);
  EXPECT_NE(four.calibration_note.find("costs it 0.85 ms (the cluster's saturated_wakeup)"), std::string::npos)
      << four.calibration_note;
  Plan two = FourLayers(2, 1, Optimizer::kAdam);
  two.profile.step_costs = plan.profile.step_costs;
  two.cluster.saturated_wakeup = plan.cluster.saturated_wakeup;
  const CostModel pair = BuildCostModel(two).value();
  EXPECT_FALSE(pair.active_rate.empty());
  EXPECT_EQ(pair.saturated_computing, 0);
  EXPECT_EQ(pair.calibration_note.find("saturated_wakeup"), std::string::npos) << pair.calibration_note;
  // One rank per node shares nothing: no core sharing, no wake-up term.
  Plan one = FourLayers(1, 1, Optimizer::kAdam);
  one.profile.step_costs = plan.profile.step_costs;
  one.cluster.saturated_wakeup = plan.cluster.saturated_wakeup;
  EXPECT_EQ(BuildCostModel(one).value().saturated_wakeup_ms, 0.0);
}

TEST(StepCosts, TheClustersMeasuredSendOverheadJoinsThem) {
  Plan plan = FourLayers(2, 1, Optimizer::kAdam);
  plan.cluster.send_overhead_ms = 0.06;
  EXPECT_NEAR(BuildCostModel(plan).value().send_overhead_ms, 0.06, 1e-12);
  plan.profile.step_costs = Measured();
  const CostModel costs = BuildCostModel(plan).value();
  EXPECT_NEAR(costs.send_overhead_ms, 0.06, 1e-12);
  EXPECT_NEAR(costs.AfterLastActionMs(0), 0.25 + 400.0 * 2.0 / 1024.0, 1e-9);
  const Expected<Cluster> back = ClusterFromJson(ClusterToJson(plan.cluster), "c.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->send_overhead_ms, 0.06);
}

TEST(StepCosts, TheProfilersSendTimePerRanksOnANodeReplacesTheClusters) {
  // profile-links measured 0.06 ms per send on idle cores; the profiler's pipelines measured
  // 0.4 ms with two ranks on the node and 1.1 ms with three (the wire's threads wait for a core).
  Plan plan = FourLayers(2, 1, Optimizer::kAdam);
  plan.cluster.send_overhead_ms = 0.06;
  plan.profile.step_costs = Measured();
  plan.profile.step_costs->send_ms = {{0.0, 0.0}, {0.4, 0.05}, {1.1, 0.1}};
  const Expected<Profile> back = ProfileFromJson(ProfileToJson(plan.profile), "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->step_costs->send_ms.size(), 3u);
  EXPECT_EQ(back->step_costs->send_ms[2].median, 1.1);
  EXPECT_NEAR(BuildCostModel(plan).value().send_overhead_ms, 0.4, 1e-12);
  plan = FourLayers(2, 2, Optimizer::kAdam);  // four ranks: past the measured counts, the last
  plan.cluster.send_overhead_ms = 0.06;
  plan.profile.step_costs = back->step_costs;
  EXPECT_NEAR(BuildCostModel(plan).value().send_overhead_ms, 1.1, 1e-12);
  // A calibration fitted from runs has its own.
  Calibration fitted;
  fitted.send_overhead_ms = 0.2;
  plan.cluster.calibration = fitted;
  EXPECT_NEAR(BuildCostModel(plan).value().send_overhead_ms, 0.2, 1e-12);
}

TEST(StepCosts, ASendOccupiesItsRankLongerTheMoreItCarries) {
  Plan plan = FourLayers(2, 1, Optimizer::kSgd);
  plan.profile.step_costs = Measured();
  plan.cluster.send_overhead_ms = 0.06;
  plan.cluster.send_issue_bytes_per_s = 2e9;
  for (LayerProfile& layer : plan.profile.layers) layer.output_bytes = 1 << 20;
  const Expected<Cluster> back = ClusterFromJson(ClusterToJson(plan.cluster), "c.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->send_issue_bytes_per_s, 2e9);
  const CostModel costs = BuildCostModel(plan).value();
  const double bytes = costs.stages[0].output_bytes;
  ASSERT_GT(bytes, 0);
  EXPECT_NEAR(costs.SendIssueMs(bytes), 0.06 + bytes / 2e9 * 1e3, 1e-12);
  // In the simulator each SEND_F of stage 0 occupies rank 0 that long, and the message leaves then.
  const Schedule schedule = BuildSchedule(plan).value();
  const SimResult result = Simulate(schedule, costs).value();
  int sends = 0;
  for (const ActionTiming& t : result.actions) {
    if (t.action.op != Op::kSendActivation) continue;
    ++sends;
    EXPECT_NEAR(t.end_ms - t.start_ms, 0.06 + bytes / 2e9 * 1e3, 1e-9);
  }
  EXPECT_EQ(sends, plan.microbatches);
  // Without the rate (an older cluster file), every send costs the overhead alone.
  plan.cluster.send_issue_bytes_per_s.reset();
  EXPECT_NEAR(BuildCostModel(plan).value().SendIssueMs(bytes), 0.06, 1e-12);
}

TEST(StepCosts, AClusterCalibrationFittedFromRunsTakesPrecedence) {
  Plan plan = FourLayers(2, 1, Optimizer::kAdam);
  plan.profile.step_costs = Measured();
  Calibration fitted;
  fitted.step_overhead_ms = 7.0;
  plan.cluster.calibration = fitted;
  const CostModel costs = BuildCostModel(plan).value();
  EXPECT_NEAR(costs.AfterLastActionMs(0), 7.0, 1e-9);
  EXPECT_NE(costs.calibration_note.find("calibrated from runs"), std::string::npos);
}

// The co-located figures probed at 1 and 8 samples per micro-batch: two ranks 1.2x at 1, 1.0x at 8.
StepCosts ProbedAtTwoSizes() {
  StepCosts costs = Measured();
  costs.by_microbatch_size = {{1, {{1.0, 0.0}, {1.2, 0.02}}, {{0.04, 0.0}, {0.07, 0.0}}, {{0.0, 0.0}, {0.1, 0.0}}},
                              {8, {{1.0, 0.0}, {1.0, 0.01}}, {{0.04, 0.0}, {0.04, 0.0}}, {{0.0, 0.0}, {0.4, 0.0}}}};
  return costs;
}

TEST(StepCosts, ColocatedFiguresPerSizeAnswerForAnySizeInterpolatedInLogSize) {
  Profile profile = FourLayers(1, 1, Optimizer::kSgd).profile;
  profile.step_costs = ProbedAtTwoSizes();
  const Expected<Profile> back = ProfileFromJson(ProfileToJson(profile), "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  const StepCosts& costs = *back->step_costs;
  ASSERT_EQ(costs.by_microbatch_size.size(), 2u);
  EXPECT_EQ(costs.by_microbatch_size[1].microbatch_size, 8);
  EXPECT_EQ(costs.by_microbatch_size[1].send_ms[1].median, 0.4);

  std::string note;
  EXPECT_EQ(costs.AtMicrobatch(1, &note).compute_scale[1].median, 1.2);
  EXPECT_EQ(note, "");
  EXPECT_EQ(costs.AtMicrobatch(8, &note).action_gap_ms[1].median, 0.04);
  // 2 samples: a third of the way from 1 to 8 in log size; 4, two thirds.
  const StepCosts at2 = costs.AtMicrobatch(2, &note);
  EXPECT_NEAR(at2.compute_scale[1].median, 1.2 - 0.2 / 3, 1e-12);
  EXPECT_NEAR(at2.action_gap_ms[1].median, 0.07 - 0.03 / 3, 1e-12);
  EXPECT_NEAR(at2.send_ms[1].median, 0.1 + 0.3 / 3, 1e-12);
  EXPECT_NE(note.find("interpolated between the probe's 1 and 8"), std::string::npos) << note;
  EXPECT_NEAR(costs.AtMicrobatch(4).compute_scale[1].median, 1.2 - 0.4 / 3, 1e-12);
  // Past the largest: the largest's figures, said so.
  EXPECT_EQ(costs.AtMicrobatch(32, &note).compute_scale[1].median, 1.0);
  EXPECT_NE(note.find("32 takes 8's figures"), std::string::npos) << note;
  // Without per-size figures, the top level answers for every size.
  StepCosts flat = Measured();
  EXPECT_EQ(flat.AtMicrobatch(2, &note).compute_scale[1].median, 1.5);
  EXPECT_EQ(note, "");
}

TEST(StepCosts, ThePlansMicrobatchSizePicksTheColocatedFigures) {
  // Two ranks on the node. The plan's micro-batches hold 2 samples (global batch 8, M = 4).
  Plan plan = executor::testing::EvenPlan(4, ScheduleKind::kGpipe, 2, 1, 4, 1, 8, false, Optimizer::kSgd);
  ASSERT_EQ(plan.microbatch_size(), 2);
  const CostModel bare = BuildCostModel(plan).value();
  plan.profile.step_costs = ProbedAtTwoSizes();
  const CostModel costs = BuildCostModel(plan).value();
  const double scale = 1.2 - 0.2 / 3, gap = 0.07 - 0.03 / 3;
  EXPECT_NEAR(costs.stages[0].forward_ms, scale * bare.stages[0].forward_ms + 0.02 + gap, 1e-9);
  EXPECT_NEAR(costs.send_overhead_ms, 0.1 + 0.3 / 3, 1e-12);
  EXPECT_NE(costs.calibration_note.find("interpolated between the probe's 1 and 8"), std::string::npos)
      << costs.calibration_note;
  // The same plan at 8 samples per micro-batch: no slowdown beyond the gap.
  plan = executor::testing::EvenPlan(4, ScheduleKind::kGpipe, 2, 1, 4, 1, 32, false, Optimizer::kSgd);
  const CostModel bare8 = BuildCostModel(plan).value();
  plan.profile.step_costs = ProbedAtTwoSizes();
  EXPECT_NEAR(BuildCostModel(plan).value().stages[0].forward_ms, bare8.stages[0].forward_ms + 0.02 + 0.04, 1e-9);
}

TEST(StepCosts, BadPerSizeFiguresNameTheEntry) {
  Profile profile = FourLayers(1, 1, Optimizer::kSgd).profile;
  profile.step_costs = ProbedAtTwoSizes();
  nlohmann::json json = ProfileToJson(profile);
  nlohmann::json swapped = json;
  std::swap(swapped["step_costs"]["by_microbatch_size"][0], swapped["step_costs"]["by_microbatch_size"][1]);
  Expected<Profile> p = ProfileFromJson(swapped, "p.json");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("by_microbatch_size[1].microbatch_size: 1 after 8"), std::string::npos)
      << p.status().message();
  nlohmann::json shorter = json;
  shorter["step_costs"]["by_microbatch_size"][1]["compute_scale"].erase(1);
  p = ProfileFromJson(shorter, "p.json");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("by_microbatch_size[1]: measured 1 counts of ranks"), std::string::npos)
      << p.status().message();
  nlohmann::json unnamed = json;
  unnamed["step_costs"]["by_microbatch_size"][0].erase("microbatch_size");
  p = ProfileFromJson(unnamed, "p.json");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("by_microbatch_size[0]"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("microbatch_size"), std::string::npos) << p.status().message();
  nlohmann::json zero = json;
  zero["step_costs"]["by_microbatch_size"][0]["compute_scale"][1]["median"] = 0.0;
  p = ProfileFromJson(zero, "p.json");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("by_microbatch_size[0].compute_scale[1]"), std::string::npos) << p.status().message();
}

TEST(MeasuredAllReduce, InterpolatesBetweenMeasuredSizesAndExtrapolatesTheLastSlope) {
  Cluster cluster;
  cluster.devices = 4;
  cluster.link = {1e9, 0.01};
  cluster.allreduce = {{2, 1 << 20, 2.0, 0.1}, {2, 1 << 10, 0.5, 0.0}, {2, 1 << 22, 5.0, 0.2}};
  const Ring two = RingOf(cluster, {0, 1});
  EXPECT_NEAR(two.AllReduceMs(1 << 10), 0.5, 1e-12);
  EXPECT_NEAR(two.AllReduceMs(100), 0.5, 1e-12);  // below the smallest: its time
  EXPECT_NEAR(two.AllReduceMs((1 << 20) + (3 << 20) / 2), 3.5, 1e-12);  // halfway between 1 and 4 MiB
  EXPECT_NEAR(two.AllReduceMs(7 << 20), 8.0, 1e-12);  // 1 ms per MiB beyond 4 MiB
  // No samples for three ranks: the ring over the links.
  const Ring three = RingOf(cluster, {0, 1, 2});
  EXPECT_TRUE(three.measured.empty());
  EXPECT_NEAR(three.AllReduceMs(3e6), 4 * (0.01 + 1e6 / 1e9 * 1e3), 1e-12);
}

TEST(MeasuredAllReduce, TheSimulatorUsesItForReplicas) {
  Plan plan = FourLayers(1, 2, Optimizer::kSgd);
  // One rank holds 4 MiB; measured 2-rank all-reduce of 4 MiB takes 6 ms.
  plan.cluster.allreduce = {{2, 1 << 20, 3.0, 0.0}, {2, 1 << 22, 6.0, 0.0}};
  EXPECT_NEAR(BuildCostModel(plan).value().allreduce_ms[0], 6.0, 1e-12);
  const Expected<Cluster> back = ClusterFromJson(ClusterToJson(plan.cluster), "c.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->allreduce.size(), 2u);
  EXPECT_EQ(back->allreduce[1].bytes, 1 << 22);
  EXPECT_EQ(back->allreduce[1].ms, 6.0);
}

}  // namespace
}  // namespace gpipe
