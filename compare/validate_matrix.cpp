#include "compare/validate_matrix.h"

#include <algorithm>
#include <filesystem>
#include <ostream>

#include "compare/calibrate.h"
#include "compare/compare.h"
#include "compare/plan_runs.h"
#include "core/files.h"
#include "core/statistics.h"
#include "core/text.h"
#include "executor/profiler.h"
#include "planner/search.h"

namespace gpipe {
namespace {

std::vector<double> StepTimes(const CalibrationRun& run) { return MeasuredStepTimes(run.record.steps); }

// The run with the smallest median step time. REQUIRES: not empty.
const CalibrationRun& Fastest(const std::vector<CalibrationRun>& runs) {
  return *std::min_element(runs.begin(), runs.end(), [](const CalibrationRun& a, const CalibrationRun& b) {
    return Median(StepTimes(a)) < Median(StepTimes(b));
  });
}

// Round 1 keeps the configuration's own name; later rounds add ".round<N>".
std::string RoundStem(const std::string& stem, int round) {
  return round == 0 ? stem : stem + ".round" + std::to_string(round + 1);
}

// Measured against predicted for one configuration's fastest round, on the uncalibrated cluster
// the run was planned on and on `calibrated`; `rounds` are all its runs.
Expected<ValidationResult> Judge(const ValidationConfig& config, const CalibrationRun& fastest,
                                 const std::vector<CalibrationRun>& rounds, const Cluster& calibrated) {
  CalibrationRun run = fastest;
  Expected<Comparison> before = Compare(run.plan, run.record);
  run.plan.cluster = calibrated;
  Expected<Comparison> after = Compare(run.plan, run.record);
  if (!before.ok() || !after.ok()) return (before.ok() ? after : before).status();
  ValidationResult r;
  r.config = config;
  r.uncalibrated_ms = before->predicted_step_ms;
  r.predicted_ms = after->predicted_step_ms;
  r.measured_ms = after->measured_step_ms;
  r.measured_spread_ms = after->measured_step_spread_ms;
  r.error = after->StepError();
  for (const CalibrationRun& each : rounds) r.round_ms.push_back(Median(StepTimes(each)));
  r.memory_error = after->PeakMemoryError();
  for (const RankComparison& rank : after->ranks) {
    r.predicted_peak_bytes = std::max(r.predicted_peak_bytes, rank.predicted_peak_bytes);
    r.measured_peak_bytes = std::max(r.measured_peak_bytes, rank.measured_peak_bytes);
  }
  return r;
}

// The loop's steps, in the order RunValidate takes them; each writes what it makes to dir_.
class ValidateLoop {
 public:
  ValidateLoop(const ValidateRequest& request, std::ostream& progress)
      : request_(request), progress_(progress), dir_(request.out_dir + "/"), cluster_(request.cluster) {
    cluster_.calibration.reset();
  }

  Expected<ValidateReport> Run() {
    std::error_code ec;
    std::filesystem::create_directories(request_.out_dir, ec);
    if (ec) return Status::Invalid("cannot create the output directory " + request_.out_dir + ": " + ec.message());
    Expected<Profile> profile = ProfileFor();
    if (!profile.ok()) return profile.status();
    Expected<std::vector<std::string>> plans = PlanEach(*profile);
    if (!plans.ok()) return plans.status();
    Expected<std::vector<std::vector<CalibrationRun>>> runs = RunRounds(*plans);
    if (!runs.ok()) return runs.status();
    std::vector<const CalibrationRun*> fastest;
    for (const std::vector<CalibrationRun>& rounds : *runs) fastest.push_back(&Fastest(rounds));

    ValidateReport report;
    Expected<Cluster> calibrated = Calibrate(fastest, report.calibration_notes);
    if (!calibrated.ok()) return calibrated.status();
    for (size_t i = 0; i < request_.matrix.size(); ++i) {
      Expected<ValidationResult> result = Judge(request_.matrix[i], *fastest[i], (*runs)[i], *calibrated);
      if (!result.ok()) return result.status();
      report.results.push_back(*result);
    }
    report.summary = Summarize(report.results);
    if (request_.planner_check) {
      Expected<PlannerChoice> choice = CheckPlannerChoice(*profile, *calibrated, report.results);
      if (!choice.ok()) return choice.status();
      report.planner_choice = *choice;
    }
    GPIPE_RETURN_IF_ERROR(WriteFileAtomically(dir_ + "validate.json", ValidateReportJson(report).dump(2) + "\n"));
    return report;
  }

 private:
  SearchRequest Request(const Profile& profile, const Cluster& cluster) const {
    SearchRequest request;
    request.profile = profile;
    request.cluster = cluster;
    request.global_batch = request_.global_batch;
    request.optimizer = DefaultOptimizer(profile);
    return request;
  }

  // The given profile, or one measured here at every micro-batch size of the matrix (and kept).
  Expected<Profile> ProfileFor() const {
    if (!request_.profile_path.empty()) return LoadProfile(request_.profile_path);
    executor::ProfileSettings settings;
    for (const ValidationConfig& c : request_.matrix) settings.microbatch_sizes.push_back(request_.global_batch / c.microbatches);
    std::sort(settings.microbatch_sizes.begin(), settings.microbatch_sizes.end());
    settings.microbatch_sizes.erase(std::unique(settings.microbatch_sizes.begin(), settings.microbatch_sizes.end()),
                                    settings.microbatch_sizes.end());
    settings.repeats = request_.repeats;
    settings.progress = [this](int done, int total, const std::string& what) {
      progress_ << "\rprofiling " << done << "/" << total << " " << what << std::string(20, ' ')
                << (done == total ? "\n" : "") << std::flush;
    };
    Expected<std::vector<executor::SizeMeasurement>> sizes = executor::MeasureModel(request_.model, settings);
    if (!sizes.ok()) return sizes.status();
    Profile profile = executor::ProfileFromMeasurements(request_.model, settings, *sizes);
    GPIPE_RETURN_IF_ERROR(WriteFileAtomically(dir_ + "profile.json", ProfileToJson(profile).dump(1) + "\n"));
    return profile;
  }

  // Each configuration planned with its dimensions pinned; the plans' paths, in matrix order.
  Expected<std::vector<std::string>> PlanEach(const Profile& profile) const {
    std::vector<std::string> plans;
    for (const ValidationConfig& config : request_.matrix) {
      SearchRequest request = Request(profile, cluster_);
      request.ranks = config.stages;
      request.replicas = 1;
      request.microbatches = config.microbatches;
      request.schedule = config.schedule;
      request.remat = config.remat;
      Expected<std::string> plan = WritePlan(request, dir_ + config.Name());
      if (!plan.ok()) return plan.status().WithContext(config.Name());
      plans.push_back(*plan);
    }
    return plans;
  }

  // Every plan run once per round, interleaved: runs[i] holds configuration i's rounds.
  Expected<std::vector<std::vector<CalibrationRun>>> RunRounds(const std::vector<std::string>& plans) const {
    const std::vector<ValidationConfig>& matrix = request_.matrix;
    std::vector<std::vector<CalibrationRun>> runs(matrix.size());
    for (int round = 0; round < request_.rounds; ++round) {
      for (size_t i = 0; i < matrix.size(); ++i) {
        const std::string name = matrix[i].Name();
        Expected<CalibrationRun> run = RunPlan(plans[i], RoundStem(dir_ + name, round));
        if (!run.ok()) return run.status().WithContext(name);
        progress_ << Sprintf("[%zu/%zu] round %d/%d %-22s measured %.2f ms per step\n", i + 1, matrix.size(), round + 1,
                             request_.rounds, name.c_str(), Median(StepTimes(*run)));
        runs[i].push_back(std::move(*run));
      }
    }
    return runs;
  }

  Expected<CalibrationRun> RunPlan(const std::string& plan_path, const std::string& stem) const {
    return RunPlanHere(plan_path, request_.model_path, request_.steps, stem, progress_);
  }

  // The cluster calibrated on the fastest rounds of the configurations marked for it (kept as
  // calibrated-cluster.json), with the fit's notes; the uncalibrated cluster when none is marked.
  Expected<Cluster> Calibrate(const std::vector<const CalibrationRun*>& fastest, std::vector<std::string>& notes) const {
    std::vector<CalibrationRun> fitted;
    for (size_t i = 0; i < request_.matrix.size(); ++i) {
      if (request_.matrix[i].calibration) fitted.push_back(*fastest[i]);
    }
    if (fitted.empty()) return cluster_;
    Expected<CalibrationFit> fit = FitCalibration(fitted);
    if (!fit.ok()) return fit.status();
    const Cluster calibrated = ApplyCalibration(cluster_, *fit);
    notes = fit->notes;
    GPIPE_RETURN_IF_ERROR(WriteFileAtomically(dir_ + "calibrated-cluster.json", ClusterToJson(calibrated).dump(2) + "\n"));
    return calibrated;
  }

  // The planner's own choice on the calibrated cluster, run every round, its fastest against the
  // best measured configuration. REQUIRES: `results` not empty.
  Expected<PlannerChoice> CheckPlannerChoice(const Profile& profile, const Cluster& calibrated,
                                             const std::vector<ValidationResult>& results) const {
    const std::string context = "the planner's choice";
    Expected<std::string> plan_path = WritePlan(Request(profile, calibrated), dir_ + "planner-choice");
    if (!plan_path.ok()) return plan_path.status().WithContext(context);
    std::vector<CalibrationRun> runs;
    for (int round = 0; round < request_.rounds; ++round) {
      Expected<CalibrationRun> run = RunPlan(*plan_path, RoundStem(dir_ + "planner-choice", round));
      if (!run.ok()) return run.status().WithContext(context);
      runs.push_back(std::move(*run));
    }
    const CalibrationRun& chosen = Fastest(runs);
    const auto best = std::min_element(results.begin(), results.end(),
                                       [](const auto& a, const auto& b) { return a.measured_ms < b.measured_ms; });
    const Plan& plan = chosen.plan;
    PlannerChoice choice;
    choice.plan = Sprintf("%s K=%d D=%d M=%d", std::string(ScheduleName(plan.schedule)).c_str(), plan.num_ranks(),
                          plan.replicas, plan.microbatches);
    choice.measured_ms = Median(StepTimes(chosen));
    choice.best_in_matrix = best->config.Name();
    choice.best_in_matrix_ms = best->measured_ms;
    choice.slower_than_best = (choice.measured_ms - best->measured_ms) / best->measured_ms;
    return choice;
  }

  const ValidateRequest& request_;
  std::ostream& progress_;
  const std::string dir_;
  // The request's cluster without calibration: what every configuration is planned on.
  Cluster cluster_;
};

}  // namespace

Expected<ValidateReport> RunValidate(const ValidateRequest& request, std::ostream& progress) {
  return ValidateLoop(request, progress).Run();
}

nlohmann::json ValidateReportJson(const ValidateReport& report) {
  nlohmann::json json = ValidationToJson(report.results, report.summary);
  json["calibration"] = report.calibration_notes;
  if (report.planner_choice) {
    const PlannerChoice& c = *report.planner_choice;
    json["planner_choice"] = {{"plan", c.plan}, {"measured_ms", c.measured_ms}, {"best_in_matrix", c.best_in_matrix},
                              {"best_in_matrix_ms", c.best_in_matrix_ms}, {"slower_than_best", c.slower_than_best}};
  }
  return json;
}

}  // namespace gpipe
