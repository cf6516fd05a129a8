// compare and calibrate against runs whose truth is known: run records synthesized from the
// simulator on a cluster with a known calibration. Compare must line them up with no error when
// the plan is costed on that cluster; the fit must recover every calibrated quantity from records
// of plans costed on the uncalibrated cluster.
#include <gtest/gtest.h>

#include <cmath>

#include "compare/calibrate.h"
#include "compare/compare.h"
#include "compare/validation.h"
#include "core/schedule/validate.h"
#include "planner/search.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"

namespace gpipe {
namespace {

const std::string kRoot = GPIPE_SOURCE_DIR "/";

Calibration TrueCalibration() {
  Calibration c;
  c.compute_scale = {1.0, 1.15};
  c.forward_overhead_ms = {0.2, 0.35};
  c.backward_overhead_ms = {0.3, 0.5};
  c.send_overhead_ms = 0.15;
  c.step_overhead_ms = 1.5;
  c.optimizer_ms_per_gib = 2000;
  c.sends_held = true;
  return c;
}

Cluster BaseCluster() {
  Cluster cluster = *LoadCluster(kRoot + "profiles/clusters/cpu-2.json");
  cluster.link = Link{5e9, 0.05};  // what the cluster file says
  return cluster;
}

Cluster TrueCluster() {
  Cluster cluster = BaseCluster();
  cluster.calibration = TrueCalibration();
  cluster.link = Link{2e9, 0.2};  // what the executor sees
  return cluster;
}

// The plan the planner makes for a pinned configuration on the base cluster.
Plan PlanFor(int stages, int microbatches, ScheduleKind kind, RematPolicy remat) {
  SearchRequest request;
  request.profile = *LoadProfile(kRoot + "profiles/tiny-gpt-cpu.json");
  request.cluster = BaseCluster();
  request.global_batch = 64;
  request.ranks = stages;
  request.replicas = 1;
  request.microbatches = microbatches;
  request.schedule = kind;
  request.remat = remat;
  Expected<SearchResult> result = SearchPlans(request);
  EXPECT_TRUE(result.ok() && result->best);
  return result->best->plan;
}

// What `gpipe-plan run` would record if the world were the simulator on `cluster`: `steps`
// identical steps, every action at its simulated time.
RunRecord SyntheticRecord(Plan plan, const Cluster& cluster, int steps) {
  plan.cluster = cluster;
  const SimResult sim = *Simulate(*BuildSchedule(plan), *BuildCostModel(plan));
  RunRecord record;
  record.model = plan.profile.model;
  record.schedule = std::string(ScheduleName(plan.schedule));
  record.global_batch = plan.global_batch;
  record.microbatches = plan.microbatches;
  record.num_ranks = plan.num_ranks();
  record.replicas = plan.replicas;
  record.backend = "gloo";
  for (int s = 0; s < steps; ++s) record.steps.push_back({s, 4.0, sim.step_time_ms});
  for (int r = 0; r < plan.num_ranks(); ++r) {
    RankRecord rank;
    rank.rank = r;
    rank.pipeline_rank = r;
    rank.peak_memory_bytes = static_cast<int64_t>(sim.ranks[r].peak_memory_bytes);
    for (int s = 0; s < steps; ++s) {
      for (const ActionTiming& a : sim.actions) {
        if (a.rank == r) rank.actions.push_back({s, a.action, a.start_ms, a.end_ms, a.recompute_ms});
      }
    }
    record.ranks.push_back(rank);
  }
  return record;
}

TEST(Compare, ARunOfThePlanAsSimulatedHasNoError) {
  Plan plan = PlanFor(2, 8, ScheduleKind::k1F1B, RematPolicy::kOff);
  plan.cluster = TrueCluster();
  const RunRecord record = SyntheticRecord(plan, TrueCluster(), 3);
  Expected<Comparison> c = Compare(plan, record);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_NEAR(c->StepError(), 0.0, 1e-12);
  EXPECT_NEAR(c->PeakMemoryError(), 0.0, 1e-6);
  EXPECT_EQ(c->measured_steps, 2);  // the first step is left out
  for (const RankComparison& r : c->ranks) {
    EXPECT_NEAR(r.measured_busy_ms, r.predicted_busy_ms, 1e-9);
    EXPECT_NEAR(r.measured_wait_ms, r.predicted_wait_ms, 1e-9);
    EXPECT_NEAR(r.measured_send_ms, r.predicted_send_ms, 1e-9);
  }
  EXPECT_NEAR(c->measured_after_ms, c->predicted_after_ms, 1e-9);
  EXPECT_GT(c->predicted_after_ms, 1.5);  // the calibrated tail
  EXPECT_EQ(c->findings.size(), 6u);
}

TEST(Compare, NamesWhatDiffers) {
  // Costed on the uncalibrated cluster, the same record is slower than predicted: compute
  // (scale and overheads), sends and the tail all show, each in its own finding.
  const Plan plan = PlanFor(2, 4, ScheduleKind::kGpipe, RematPolicy::kOff);
  const RunRecord record = SyntheticRecord(plan, TrueCluster(), 2);
  Expected<Comparison> c = Compare(plan, record);
  ASSERT_TRUE(c.ok());
  EXPECT_LT(c->StepError(), -0.05);
  std::string all;
  for (const std::string& f : c->findings) all += f + "\n";
  EXPECT_NE(all.find("Compute: rank"), std::string::npos) << all;
  EXPECT_NE(all.find("Issuing sends"), std::string::npos) << all;
  EXPECT_NE(all.find("After the last action"), std::string::npos) << all;
  EXPECT_NE(ComparisonTable(*c).find("where they differ"), std::string::npos);
  EXPECT_EQ(ComparisonToJson(*c)["ranks"].size(), 2u);
}

TEST(Compare, RefusesARecordOfAnotherPlan) {
  const Plan plan = PlanFor(2, 4, ScheduleKind::kGpipe, RematPolicy::kOff);
  const RunRecord record = SyntheticRecord(PlanFor(2, 8, ScheduleKind::kGpipe, RematPolicy::kOff), BaseCluster(), 2);
  Expected<Comparison> c = Compare(plan, record);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("is not a run of this plan"), std::string::npos) << c.status().message();
}

TEST(Calibrate, RecoversAKnownCalibration) {
  std::vector<CalibrationRun> runs;
  struct Config {
    int stages, microbatches;
    ScheduleKind kind;
    RematPolicy remat;
  };
  for (const Config& config : {Config{1, 2, ScheduleKind::kGpipe, RematPolicy::kOff},
                               Config{1, 8, ScheduleKind::kGpipe, RematPolicy::kOn},
                               Config{2, 2, ScheduleKind::kGpipe, RematPolicy::kOff},
                               Config{2, 8, ScheduleKind::k1F1B, RematPolicy::kOff},
                               Config{2, 16, ScheduleKind::k1F1B, RematPolicy::kOn}}) {
    const Plan plan = PlanFor(config.stages, config.microbatches, config.kind, config.remat);
    runs.push_back({"synthetic", plan, SyntheticRecord(plan, TrueCluster(), 3)});
  }
  Expected<CalibrationFit> fit = FitCalibration(runs);
  ASSERT_TRUE(fit.ok()) << fit.status().message();
  const Calibration truth = TrueCalibration();
  const Calibration& c = fit->calibration;
  ASSERT_EQ(c.compute_scale.size(), 2u);
  EXPECT_NEAR(c.compute_scale[0], truth.compute_scale[0], 1e-6);
  EXPECT_NEAR(c.compute_scale[1], truth.compute_scale[1], 1e-6);
  ASSERT_EQ(c.forward_overhead_ms.size(), 2u);
  ASSERT_EQ(c.backward_overhead_ms.size(), 2u);
  for (size_t n = 0; n < 2; ++n) {
    EXPECT_NEAR(c.forward_overhead_ms[n], truth.forward_overhead_ms[n], 1e-6) << n + 1 << " ranks per node";
    EXPECT_NEAR(c.backward_overhead_ms[n], truth.backward_overhead_ms[n], 1e-6) << n + 1 << " ranks per node";
  }
  EXPECT_NEAR(c.send_overhead_ms, truth.send_overhead_ms, 1e-9);
  EXPECT_NEAR(fit->compute_rms_ms, 0.0, 1e-6);
  ASSERT_TRUE(fit->link.has_value());
  EXPECT_NEAR(fit->link->latency_ms, 0.2, 0.01);
  EXPECT_NEAR(fit->link->bandwidth_bytes_per_s / 2e9, 1.0, 0.02);
  EXPECT_NEAR(c.optimizer_ms_per_gib / truth.optimizer_ms_per_gib, 1.0, 0.02);
  EXPECT_NEAR(c.step_overhead_ms, truth.step_overhead_ms, 0.05);
  EXPECT_TRUE(c.sends_held);
  // Predictions with the fitted cluster match the records.
  const Cluster calibrated = ApplyCalibration(BaseCluster(), *fit);
  for (CalibrationRun run : runs) {
    run.plan.cluster = calibrated;
    EXPECT_NEAR(Compare(run.plan, run.record)->StepError(), 0.0, 0.005);
    EXPECT_NEAR(Compare(run.plan, run.record)->PeakMemoryError(), 0.0, 1e-9);
  }
  // And it survives a cluster file.
  Expected<Cluster> reread = ClusterFromJson(ClusterToJson(calibrated), "calibrated");
  ASSERT_TRUE(reread.ok()) << reread.status().message();
  ASSERT_TRUE(reread->calibration.has_value());
  EXPECT_EQ(reread->calibration->compute_scale, c.compute_scale);
  EXPECT_EQ(reread->calibration->forward_overhead_ms, c.forward_overhead_ms);
  EXPECT_EQ(reread->calibration->backward_overhead_ms, c.backward_overhead_ms);
  EXPECT_EQ(reread->calibration->optimizer_ms_per_gib, c.optimizer_ms_per_gib);
}

TEST(Calibrate, RejectsBadCalibrationFields) {
  nlohmann::json json = ClusterToJson(TrueCluster());
  json["calibration"]["compute_scale"] = {1.0, -2.0};
  Expected<Cluster> bad = ClusterFromJson(json, "c.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("compute_scale"), std::string::npos) << bad.status().message();
  json = ClusterToJson(TrueCluster());
  json["calibration"]["send_overhead_ms"] = -1;
  bad = ClusterFromJson(json, "c.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("send_overhead_ms"), std::string::npos) << bad.status().message();
}

TEST(Validation, MatrixAndSummary) {
  const std::vector<ValidationConfig> matrix =
      ValidationMatrix({1, 2}, {1, 2, 4, 8, 16}, {ScheduleKind::kGpipe, ScheduleKind::k1F1B},
                       {RematPolicy::kOff, RematPolicy::kOn}, {2, 16}, 64);
  // K=1: 5 M x 2 remat; K=2: 5 M x 2 schedules x 2 remat.
  ASSERT_EQ(matrix.size(), 30u);
  int held_out = 0;
  for (const ValidationConfig& c : matrix) held_out += c.calibration ? 0 : 1;
  EXPECT_EQ(held_out, 18);
  std::vector<ValidationResult> results;
  for (size_t i = 0; i < matrix.size(); ++i) {
    ValidationResult r;
    r.config = matrix[i];
    r.measured_ms = 100;
    r.predicted_ms = r.uncalibrated_ms = 100 + static_cast<double>(i % 7);  // errors 0..6%
    r.error = (r.predicted_ms - r.measured_ms) / r.measured_ms;
    results.push_back(r);
  }
  const ValidationSummary s = Summarize(results);
  EXPECT_EQ(s.held_out, 18);
  EXPECT_NEAR(s.max_abs_error, 0.06, 1e-12);
  EXPECT_GT(s.median_abs_error, 0.0);
  const nlohmann::json json = ValidationToJson(results, s);
  EXPECT_EQ(json["configs"].size(), 30u);
  EXPECT_TRUE(json["configs"][0].contains("predicted_ms"));
  EXPECT_TRUE(json["configs"][0].contains("measured_ms"));
  EXPECT_TRUE(json.contains("median_abs_error"));
  EXPECT_TRUE(json.contains("max_abs_error"));
}

}  // namespace
}  // namespace gpipe
