// compare's conventions, pinned: every error is (predicted - measured) / measured in the table,
// the findings and the JSON alike (negative when the run was slower than predicted); the bubble
// is the simulator's pipeline bubble on both sides (0 for one rank, whatever its overheads); the
// measured samples/s is the one `run` prints.
#include <gtest/gtest.h>

#include <string>

#include "compare/compare.h"
#include "core/cluster.h"
#include "core/profile.h"
#include "core/schedule/validate.h"
#include "core/statistics.h"
#include "core/text.h"
#include "planner/search.h"
#include "simulator/bubble.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"

namespace gpipe {
namespace {

const std::string kRoot = GPIPE_SOURCE_DIR "/";

Plan PlanFor(int ranks, int microbatches, ScheduleKind kind, const Cluster& cluster) {
  SearchRequest request;
  request.profile = *LoadProfile(kRoot + "profiles/tiny-gpt-cpu.json");
  request.cluster = cluster;
  request.global_batch = 64;
  request.ranks = ranks;
  request.replicas = 1;
  request.microbatches = microbatches;
  request.schedule = kind;
  request.remat = RematPolicy::kOff;
  Expected<SearchResult> result = SearchPlans(request);
  EXPECT_TRUE(result.ok() && result->best);
  return result->best->plan;
}

Cluster BaseCluster() { return *LoadCluster(kRoot + "profiles/clusters/cpu-2.json"); }

// A run of `plan` as the simulator predicts it, stretched: every action `slow` times as long,
// `gap_ms` between a rank's actions, `tail_ms` after the last; step s takes extra_ms[s] more.
RunRecord Stretched(const Plan& plan, double slow, double gap_ms, double tail_ms, const std::vector<double>& extra_ms) {
  const SimResult sim = *Simulate(*BuildSchedule(plan), *BuildCostModel(plan));
  RunRecord record;
  record.model = plan.profile.model;
  record.schedule = std::string(ScheduleName(plan.schedule));
  record.global_batch = plan.global_batch;
  record.microbatches = plan.microbatches;
  record.num_ranks = plan.num_ranks();
  record.replicas = plan.replicas;
  double last_end = 0;
  for (int r = 0; r < plan.num_ranks(); ++r) {
    RankRecord rank;
    rank.rank = r;
    rank.pipeline_rank = r;
    rank.peak_memory_bytes = static_cast<int64_t>(sim.ranks[r].peak_memory_bytes);
    for (size_t s = 0; s < extra_ms.size(); ++s) {
      int index = 0;
      for (const ActionTiming& a : sim.actions) {
        if (a.rank != r) continue;
        const double shift = gap_ms * ++index;
        rank.actions.push_back({static_cast<int>(s), a.action, slow * a.start_ms + shift, slow * a.end_ms + shift,
                                slow * a.recompute_ms});
        last_end = std::max(last_end, rank.actions.back().end_ms);
      }
    }
    record.ranks.push_back(rank);
  }
  for (size_t s = 0; s < extra_ms.size(); ++s) {
    record.steps.push_back({static_cast<int>(s), 4.0, last_end + tail_ms + extra_ms[s]});
  }
  return record;
}

TEST(CompareConvention, APredictionTooLowIsNegativeInTableFindingsAndJson) {
  const Plan plan = PlanFor(2, 4, ScheduleKind::kGpipe, BaseCluster());
  Expected<Comparison> c = Compare(plan, Stretched(plan, 1.25, 0.0, 0.0, {0, 0, 0}));
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_LT(c->predicted_step_ms, c->measured_step_ms);
  const double error = c->StepError();
  EXPECT_DOUBLE_EQ(error, (c->predicted_step_ms - c->measured_step_ms) / c->measured_step_ms);
  EXPECT_NEAR(error, 1 / 1.25 - 1, 1e-9);

  const std::string table = ComparisonTable(*c);
  const std::string percent = Sprintf("%+.1f%%", 100 * error);
  ASSERT_EQ(percent[0], '-');
  EXPECT_NE(table.find(Sprintf("%+8.1f%%", 100 * error)), std::string::npos) << table;  // the step time row
  EXPECT_NE(c->findings[0].find("(error " + percent + ")"), std::string::npos) << c->findings[0];
  // The convention is printed once, above the rows.
  const size_t at = table.find(kErrorConvention);
  ASSERT_NE(at, std::string::npos) << table;
  EXPECT_EQ(table.find(kErrorConvention, at + 1), std::string::npos);
  EXPECT_LT(at, table.find("step time"));

  std::string all;
  for (const std::string& f : c->findings) all += f + "\n";
  EXPECT_NE(all.find("Compute: rank"), std::string::npos) << all;
  EXPECT_NE(all.find("predicted (error -"), std::string::npos) << all;  // compute and waiting: too low

  const nlohmann::json j = ComparisonToJson(*c);
  EXPECT_DOUBLE_EQ(j["step_error"].get<double>(), error);
  EXPECT_EQ(j["error_convention"], kErrorConvention);
  EXPECT_LT(j["peak_memory_error"].get<double>(), 1e-9);  // the same bytes: 0
  for (const OpComparison& o : c->ops) {
    if (!IsCompute(o.op)) continue;  // sends take no time on either side
    EXPECT_LT(RelativeError(o.predicted_ms, o.measured_ms), 0) << o.rank;
  }
}

TEST(CompareConvention, OneRankHasNoBubbleOnEitherSide) {
  // Gaps between actions and 30% of the step after the last action: idle, not bubble.
  const Plan plan = PlanFor(1, 4, ScheduleKind::kGpipe, BaseCluster());
  ASSERT_EQ(plan.num_ranks(), 1);
  const SimResult sim = *Simulate(*BuildSchedule(plan), *BuildCostModel(plan));
  Expected<Comparison> c = Compare(plan, Stretched(plan, 1.0, 0.5, 0.4 * sim.step_time_ms, {0, 0, 0}));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(sim.bubble_fraction, 0.0);
  EXPECT_EQ(c->predicted_bubble, 0.0);
  EXPECT_EQ(c->measured_bubble, 0.0);
  EXPECT_GT(c->measured_idle, 0.25);
  EXPECT_NEAR(c->predicted_idle, 0.0, 1e-12);
  EXPECT_EQ(ComparisonToJson(*c)["measured_bubble_fraction"].get<double>(), 0.0);
}

TEST(CompareConvention, TheBubbleIsTheSimulatorsOnBothSides) {
  // A run exactly as simulated on a cluster with send overheads and a tail: the measured bubble
  // is the predicted one, and that is simulate's bubble_fraction.
  Cluster cluster = BaseCluster();
  Calibration calibration;
  calibration.send_overhead_ms = 0.15;
  calibration.step_overhead_ms = 1.5;
  cluster.calibration = calibration;
  Plan plan = PlanFor(2, 8, ScheduleKind::k1F1B, cluster);
  plan.cluster = cluster;
  const SimResult sim = *Simulate(*BuildSchedule(plan), *BuildCostModel(plan));
  Expected<Comparison> c = Compare(plan, Stretched(plan, 1.0, 0.0, 1.5, {0, 0}));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_GT(c->predicted_bubble, 0.0);
  EXPECT_DOUBLE_EQ(c->predicted_bubble, sim.bubble_fraction);
  EXPECT_NEAR(c->measured_bubble, c->predicted_bubble, 1e-9);
  EXPECT_GT(c->predicted_idle, c->predicted_bubble);  // idle also holds the sends and the tail
}

TEST(CompareConvention, RunAndCompareReportOneThroughput) {
  // Steps after the first: 50, 30, 70, 40 ms over the base: the median and the mean differ.
  const Plan plan = PlanFor(2, 4, ScheduleKind::kGpipe, BaseCluster());
  const RunRecord record = Stretched(plan, 1.0, 0.0, 0.0, {100, 50, 30, 70, 40});
  Expected<Comparison> c = Compare(plan, record);
  ASSERT_TRUE(c.ok()) << c.status().message();
  const double throughput = ThroughputOf(record.steps, record.global_batch);
  EXPECT_DOUBLE_EQ(c->measured_throughput, throughput);
  EXPECT_DOUBLE_EQ(c->measured_step_ms, MeasuredStepMs(record.steps));
  EXPECT_DOUBLE_EQ(throughput, plan.global_batch / (c->measured_step_ms / 1000.0));
  std::vector<double> times = MeasuredStepTimes(record.steps);
  EXPECT_NE(c->measured_step_ms, Mean(times));  // the median, not the mean
  const std::string summary = FormatRunSummary(record);
  EXPECT_NE(summary.find(Sprintf("%.1f samples/s", throughput)), std::string::npos) << summary;
  EXPECT_NE(ComparisonTable(*c).find(Sprintf("%10.2f /s", throughput)), std::string::npos);
  EXPECT_DOUBLE_EQ(ComparisonToJson(*c)["measured_throughput_samples_per_s"].get<double>(), throughput);
}

}  // namespace
}  // namespace gpipe
