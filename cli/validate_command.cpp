// gpipe-plan validate: the whole loop over a matrix of configurations on this machine. Profile
// the model (unless given a profile), plan each configuration, run it for real, fit the
// calibration on some of the runs and judge the prediction on the others; then check that the
// planner's own choice is as fast as the best configuration measured.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <ostream>

#include "cli/commands.h"
#include "compare/calibrate.h"
#include "compare/compare.h"
#include "compare/validation.h"
#include "core/files.h"
#include "core/model.h"
#include "core/text.h"
#include "executor/launcher.h"
#include "planner/report.h"
#include "planner/search.h"
#ifdef GPIPE_WITH_TORCH
#include "executor/profiler.h"
#endif

namespace gpipe::cli {
namespace {

class ValidateCommand : public Command {
 public:
  explicit ValidateCommand(CLI::App& app) {
    app.add_option("--model", model_path_, "The model to train (gpipe-model/1)")->required();
    app.add_option("--cluster", cluster_path_, "This machine as a cluster file (e.g. from profile-links)")->required();
    app.add_option("--profile", profile_path_, "Use this profile instead of profiling the model first");
    app.add_option("--global-batch", global_batch_, "Samples per step")->check(CLI::Range(1, 1 << 24));
    app.add_option("--stages", stages_, "K values, e.g. 1,2")->delimiter(',')->check(CLI::Range(1, 1 << 16));
    app.add_option("--microbatches", microbatches_, "M values, e.g. 1,2,4,8,16")->delimiter(',')->check(CLI::Range(1, 1 << 20));
    app.add_option("--schedules", schedules_, "Schedules, e.g. gpipe,1f1b")->delimiter(',');
    app.add_option("--remat", remat_, "Remat settings: off,on")->delimiter(',');
    app.add_option("--calibrate-on", calibrate_on_, "M values whose configurations fit the calibration; the others are "
                                                    "held out and judged (none: judge the uncalibrated prediction)")
        ->delimiter(',');
    app.add_option("--steps", steps_, "Training steps per run (the first is left out)")->check(CLI::Range(2, 1 << 20));
    app.add_option("--rounds", rounds_, "Runs of every configuration, interleaved (round 1 runs them all, then "
                                        "round 2, ...); each is judged on its fastest round")
        ->check(CLI::Range(1, 100));
    app.add_option("--repeats", repeats_, "Profiler repeats per layer")->check(CLI::Range(1, 100000));
    app.add_option("--out-dir", out_dir_, "Keep the profile, plans, run records and calibrated cluster here");
    app.add_flag("--no-planner-check", no_planner_check_, "Do not run the planner's own choice");
    app.add_flag("--json", json_, "Print one JSON object (configs with predicted_ms and measured_ms, the errors)");
    app.footer(
        "Examples:\n"
        "  gpipe-plan validate --model models/tiny-gpt.json --cluster profiles/clusters/cpu-2-measured.json\n"
        "  gpipe-plan validate --model models/tiny-gpt.json --cluster C.json --stages 1,2 --microbatches 2,8 \\\n"
        "      --schedules gpipe --remat off --calibrate-on 2 --steps 4 --json\n"
        "Each configuration is planned with its dimensions pinned, run for real (one process per rank) and\n"
        "compared. Each round runs every configuration once; a configuration's measured step time is the median\n"
        "over the steps after the first of its fastest round (a slow spell of a shared machine only slows runs).\n"
        "Errors are (predicted - measured) / measured; the summary covers the held-out configurations only.");
  }

  int Run(std::ostream& out, std::ostream& err) override {
#ifndef GPIPE_WITH_TORCH
    (void)out;
    return Fail(err, "validate", Status::Invalid(kNoExecutor));
#else
    Expected<ModelSpec> model = LoadModel(model_path_);
    if (!model.ok()) return Fail(err, "validate", model.status());
    Expected<Cluster> cluster = LoadCluster(cluster_path_);
    if (!cluster.ok()) return Fail(err, "validate", cluster.status());
    cluster->calibration.reset();
    std::vector<ScheduleKind> schedules;
    for (const std::string& name : schedules_) {
      Expected<ScheduleKind> kind = ParseScheduleKind(name);
      if (!kind.ok()) return Fail(err, "validate", kind.status().WithContext("--schedules"));
      schedules.push_back(*kind);
    }
    std::vector<RematPolicy> remat;
    for (const std::string& name : remat_) {
      Expected<RematPolicy> policy = ParseRematPolicy(name);
      if (!policy.ok() || *policy == RematPolicy::kAuto) {
        return Fail(err, "validate", Status::Invalid("--remat: \"" + name + "\" is not off or on"));
      }
      remat.push_back(*policy);
    }
    const std::vector<ValidationConfig> matrix =
        ValidationMatrix(stages_, microbatches_, schedules, remat, calibrate_on_, global_batch_);
    if (matrix.empty()) return Fail(err, "validate", Status::Invalid("no configuration: M must divide --global-batch"));
    std::error_code ec;
    std::filesystem::create_directories(out_dir_, ec);
    if (ec) return Fail(err, "validate", Status::Invalid("--out-dir " + out_dir_ + ": " + ec.message()));
    const std::string dir = out_dir_ + "/";

    Expected<Profile> profile = ProfileFor(*model, matrix, dir, err);
    if (!profile.ok()) return Fail(err, "validate", profile.status());

    // Plan every configuration, then run them all, round after round.
    std::vector<std::string> plans;
    for (const ValidationConfig& config : matrix) {
      SearchRequest request = Request(*profile, *cluster);
      request.ranks = config.stages;
      request.replicas = 1;
      request.microbatches = config.microbatches;
      request.schedule = config.schedule;
      request.remat = config.remat;
      Expected<std::string> plan = WritePlan(request, dir + config.Name());
      if (!plan.ok()) return Fail(err, "validate", plan.status().WithContext(config.Name()));
      plans.push_back(*plan);
    }
    std::vector<std::vector<CalibrationRun>> runs(matrix.size());
    for (int round = 0; round < rounds_; ++round) {
      for (size_t i = 0; i < matrix.size(); ++i) {
        const std::string name = matrix[i].Name();
        Expected<CalibrationRun> run = RunPlan(plans[i], RoundStem(dir + name, round), err);
        if (!run.ok()) return Fail(err, "validate", run.status().WithContext(name));
        err << Sprintf("[%zu/%zu] round %d/%d %-22s measured %.2f ms per step\n", i + 1, matrix.size(), round + 1,
                       rounds_, name.c_str(), Median(StepTimes(*run)));
        runs[i].push_back(std::move(*run));
      }
    }
    // Each configuration's fastest round: a slow spell of a shared machine only ever slows a run.
    std::vector<const CalibrationRun*> fastest(matrix.size());
    for (size_t i = 0; i < matrix.size(); ++i) fastest[i] = &Fastest(runs[i]);

    // Calibrate on the chosen configurations' fastest rounds; judge everything with and without it.
    std::vector<CalibrationRun> fitted;
    for (size_t i = 0; i < matrix.size(); ++i) {
      if (matrix[i].calibration) fitted.push_back(*fastest[i]);
    }
    Cluster calibrated = *cluster;
    std::vector<std::string> notes;
    if (!fitted.empty()) {
      Expected<CalibrationFit> fit = FitCalibration(fitted);
      if (!fit.ok()) return Fail(err, "validate", fit.status());
      calibrated = ApplyCalibration(*cluster, *fit);
      notes = fit->notes;
      const Status written = WriteFileAtomically(dir + "calibrated-cluster.json", ClusterToJson(calibrated).dump(2) + "\n");
      if (!written.ok()) return Fail(err, "validate", written);
    }
    std::vector<ValidationResult> results;
    for (size_t i = 0; i < matrix.size(); ++i) {
      CalibrationRun run = *fastest[i];
      Expected<Comparison> before = Compare(run.plan, run.record);
      run.plan.cluster = calibrated;
      Expected<Comparison> after = Compare(run.plan, run.record);
      if (!before.ok() || !after.ok()) return Fail(err, "validate", (before.ok() ? after : before).status());
      ValidationResult r;
      r.config = matrix[i];
      r.uncalibrated_ms = before->predicted_step_ms;
      r.predicted_ms = after->predicted_step_ms;
      r.measured_ms = after->measured_step_ms;
      r.measured_spread_ms = after->measured_step_spread_ms;
      r.error = after->StepError();
      for (const CalibrationRun& each : runs[i]) r.round_ms.push_back(Median(StepTimes(each)));
      r.memory_error = after->PeakMemoryError();
      for (const RankComparison& rank : after->ranks) {
        r.predicted_peak_bytes = std::max(r.predicted_peak_bytes, rank.predicted_peak_bytes);
        r.measured_peak_bytes = std::max(r.measured_peak_bytes, rank.measured_peak_bytes);
      }
      results.push_back(r);
    }
    const ValidationSummary summary = Summarize(results);
    nlohmann::json json = ValidationToJson(results, summary);
    json["calibration"] = notes;

    // The planner's own choice on the calibrated cluster, run, against the best measured.
    std::string choice_text;
    if (!no_planner_check_) {
      Expected<std::string> chosen_plan = WritePlan(Request(*profile, calibrated), dir + "planner-choice");
      if (!chosen_plan.ok()) return Fail(err, "validate", chosen_plan.status().WithContext("the planner's choice"));
      std::vector<CalibrationRun> chosen_runs;
      for (int round = 0; round < rounds_; ++round) {
        Expected<CalibrationRun> run = RunPlan(*chosen_plan, RoundStem(dir + "planner-choice", round), err);
        if (!run.ok()) return Fail(err, "validate", run.status().WithContext("the planner's choice"));
        chosen_runs.push_back(std::move(*run));
      }
      const CalibrationRun* chosen = &Fastest(chosen_runs);
      const double measured = Median(StepTimes(*chosen));
      const auto best = std::min_element(results.begin(), results.end(),
                                         [](const auto& a, const auto& b) { return a.measured_ms < b.measured_ms; });
      const Plan& plan = chosen->plan;
      const std::string name = Sprintf("%s K=%d D=%d M=%d", std::string(ScheduleName(plan.schedule)).c_str(),
                                       plan.num_ranks(), plan.replicas, plan.microbatches);
      const double slower = (measured - best->measured_ms) / best->measured_ms;
      json["planner_choice"] = {{"plan", name}, {"measured_ms", measured}, {"best_in_matrix", best->config.Name()},
                                {"best_in_matrix_ms", best->measured_ms}, {"slower_than_best", slower}};
      choice_text = Sprintf("planner's choice: %s, measured %.2f ms per step; the best of the matrix, %s, measured %.2f "
                            "ms: %+.1f%%\n", name.c_str(), measured, best->config.Name().c_str(), best->measured_ms,
                            100 * slower);
    }
    const Status written = WriteFileAtomically(dir + "validate.json", json.dump(2) + "\n");
    if (!written.ok()) return Fail(err, "validate", written);
    if (json_) {
      out << json.dump(2) << "\n";
      return kExitOk;
    }
    out << "calibration (fitted on the 'fit' rows):\n";
    for (const std::string& note : notes) out << "  " << note << "\n";
    out << "\n" << ValidationTable(results, summary) << choice_text << "everything kept in " << out_dir_ << "\n";
    return kExitOk;
#endif
  }

 private:
#ifdef GPIPE_WITH_TORCH
  static std::vector<double> StepTimes(const CalibrationRun& run) { return MeasuredStepTimes(run.record.steps); }

  // The run with the smallest median step time (REQUIRES: not empty).
  static const CalibrationRun& Fastest(const std::vector<CalibrationRun>& runs) {
    return *std::min_element(runs.begin(), runs.end(), [](const CalibrationRun& a, const CalibrationRun& b) {
      return Median(StepTimes(a)) < Median(StepTimes(b));
    });
  }

  // Round 1 keeps the configuration's own name; later rounds add ".round<N>".
  static std::string RoundStem(const std::string& stem, int round) {
    return round == 0 ? stem : stem + ".round" + std::to_string(round + 1);
  }

  SearchRequest Request(const Profile& profile, const Cluster& cluster) const {
    SearchRequest request;
    request.profile = profile;
    request.cluster = cluster;
    request.global_batch = global_batch_;
    request.optimizer = DefaultOptimizer(profile);
    return request;
  }

  // The given profile, or one measured here at every micro-batch size of the matrix.
  Expected<Profile> ProfileFor(const ModelSpec& model, const std::vector<ValidationConfig>& matrix, const std::string& dir,
                               std::ostream& err) const {
    if (!profile_path_.empty()) return LoadProfile(profile_path_);
    executor::ProfileSettings settings;
    for (const ValidationConfig& c : matrix) settings.microbatch_sizes.push_back(global_batch_ / c.microbatches);
    std::sort(settings.microbatch_sizes.begin(), settings.microbatch_sizes.end());
    settings.microbatch_sizes.erase(std::unique(settings.microbatch_sizes.begin(), settings.microbatch_sizes.end()),
                                    settings.microbatch_sizes.end());
    settings.repeats = repeats_;
    settings.progress = [&err](int done, int total, const std::string& what) {
      err << "\rprofiling " << done << "/" << total << " " << what << std::string(20, ' ') << (done == total ? "\n" : "")
          << std::flush;
    };
    Expected<std::vector<executor::SizeMeasurement>> sizes = executor::MeasureModel(model, settings);
    if (!sizes.ok()) return sizes.status();
    Profile profile = executor::ProfileFromMeasurements(model, settings, *sizes);
    GPIPE_RETURN_IF_ERROR(WriteFileAtomically(dir + "profile.json", ProfileToJson(profile).dump(1) + "\n"));
    return profile;
  }

  // Plans `request` and writes `<stem>.plan.json`; returns its path.
  static Expected<std::string> WritePlan(const SearchRequest& request, const std::string& stem) {
    Expected<SearchResult> result = SearchPlans(request);
    if (!result.ok()) return result.status();
    if (!result->best) return Status::Invalid("no plan fits the cluster's memory");
    const std::string plan_path = stem + ".plan.json";
    GPIPE_RETURN_IF_ERROR(WriteFileAtomically(plan_path, PlanReportJson(*result).dump(1) + "\n"));
    return plan_path;
  }

  // Runs the plan at `plan_path` and reads back `<stem>.run.json` (the ranks' output: `<stem>.log`).
  Expected<CalibrationRun> RunPlan(const std::string& plan_path, const std::string& stem, std::ostream& err) const {
    const std::string record_path = stem + ".run.json";
    Expected<Plan> plan = LoadPlan(plan_path);
    if (!plan.ok()) return plan.status();
    executor::LaunchOptions launch;
    launch.world_size = plan->num_ranks() * plan->replicas;
    launch.master_port = executor::FreeLoopbackPort();
    launch.argv = {executor::SelfExecutable(), "run", plan_path, "--model", model_path_, "--steps", std::to_string(steps_),
                   "--threads-per-rank", "1", "--record", record_path, "--timeout", "120"};
    launch.log_path = stem + ".log";
    std::error_code ec;
    std::filesystem::remove(record_path, ec);
    std::filesystem::remove(launch.log_path, ec);
    if (executor::LaunchRanks(launch, err) != 0) {
      return Status::Invalid("the run failed; its ranks' output is in " + launch.log_path);
    }
    return LoadCalibrationRun(record_path, plan_path);
  }
#endif

  std::string model_path_, cluster_path_, profile_path_, out_dir_ = "validate-out";
  int64_t global_batch_ = 64;
  std::vector<int> stages_ = {1, 2}, microbatches_ = {1, 2, 4, 8, 16}, calibrate_on_ = {2, 16};
  std::vector<std::string> schedules_ = {"gpipe", "1f1b"}, remat_ = {"off", "on"};
  int steps_ = 10, repeats_ = 20, rounds_ = 5;
  bool no_planner_check_ = false, json_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeValidateCommand(CLI::App& app) { return std::make_unique<ValidateCommand>(app); }

}  // namespace gpipe::cli
