// gpipe-plan validate: the whole loop over a matrix of configurations on this machine (profile,
// plan, run, calibrate on some, judge the rest; compare/validate_matrix.h). This file reads the
// flags into a ValidateRequest and prints the report.
#include <ostream>

#include "cli/commands.h"
#ifdef GPIPE_WITH_TORCH
#include "compare/validate_matrix.h"
#include "compare/validation.h"
#include "executor/python_export.h"
#include "core/cluster.h"
#include "core/model.h"
#include "core/text.h"
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
    ValidateRequest request;
    const Status read = ReadRequest(request);
    if (!read.ok()) return Fail(err, "validate", read);
    Expected<ValidateReport> report = RunValidate(request, err);
    if (!report.ok()) return Fail(err, "validate", report.status());
    if (json_) {
      out << ValidateReportJson(*report).dump(2) << "\n";
      return kExitOk;
    }
    out << "calibration (fitted on the 'fit' rows):\n";
    for (const std::string& note : report->calibration_notes) out << "  " << note << "\n";
    out << "\n" << ValidationTable(report->results, report->summary);
    if (report->planner_choice) {
      const PlannerChoice& c = *report->planner_choice;
      out << Sprintf("planner's choice: %s, measured %.2f ms per step; the best of the matrix, %s, measured %.2f ms: "
                     "%+.1f%%\n", c.plan.c_str(), c.measured_ms, c.best_in_matrix.c_str(), c.best_in_matrix_ms,
                     100 * c.slower_than_best);
    }
    out << "everything kept in " << out_dir_ << "\n";
    return kExitOk;
#endif
  }

 private:
#ifdef GPIPE_WITH_TORCH
  // The flags as a request: the model and cluster files loaded, the matrix made.
  Status ReadRequest(ValidateRequest& request) const {
    Expected<ModelSpec> model = LoadModel(model_path_);
    if (!model.ok()) return model.status();
    GPIPE_RETURN_IF_ERROR(executor::ExportPythonModel(&*model));
    Expected<Cluster> cluster = LoadCluster(cluster_path_);
    if (!cluster.ok()) return cluster.status();
    std::vector<ScheduleKind> schedules;
    for (const std::string& name : schedules_) {
      Expected<ScheduleKind> kind = ParseScheduleKind(name);
      if (!kind.ok()) return kind.status().WithContext("--schedules").AsUsage();
      schedules.push_back(*kind);
    }
    std::vector<RematPolicy> remat;
    for (const std::string& name : remat_) {
      Expected<RematPolicy> policy = ParseRematPolicy(name);
      if (!policy.ok() || (*policy != RematPolicy::kOff && *policy != RematPolicy::kOn)) {
        return Status::Usage("--remat: \"" + name + "\" is not off or on");
      }
      remat.push_back(*policy);
    }
    request.matrix = ValidationMatrix(stages_, microbatches_, schedules, remat, calibrate_on_, global_batch_);
    if (request.matrix.empty()) return Status::Usage("no configuration: M must divide --global-batch");
    request.model = std::move(*model);
    request.model_path = model_path_;
    request.cluster = std::move(*cluster);
    request.profile_path = profile_path_;
    request.global_batch = global_batch_;
    request.steps = steps_;
    request.repeats = repeats_;
    request.rounds = rounds_;
    request.planner_check = !no_planner_check_;
    request.out_dir = out_dir_;
    return Status::Ok();
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
