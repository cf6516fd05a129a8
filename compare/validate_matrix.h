// The validate loop, run on this machine over a matrix of configurations (compare/validation.h):
//   1. profile the model at every micro-batch size of the matrix (unless given a profile);
//   2. plan each configuration with its dimensions pinned (K stages, one replica, M micro-batches,
//      its schedule and remat);
//   3. run every plan for real, one process per rank, round after round (round 1 runs them all,
//      then round 2, ...); a configuration is judged on its fastest round, the one with the
//      smallest median step time, since a slow spell of a shared machine only ever slows a run;
//   4. fit the calibration on the fastest rounds of the configurations marked for it, and judge
//      every configuration's prediction with and without it;
//   5. unless told not to, plan on the calibrated cluster with nothing pinned, run the planner's
//      choice the same number of rounds, and set its fastest against the best configuration.
// Everything goes to the output directory: profile.json, <config>.plan.json, <config>.run.json
// and <config>.log (later rounds: <config>.round<N>.*), calibrated-cluster.json, the planner's
// choice as planner-choice.*, and validate.json (ValidateReportJson).
//
// Runs start the current program's `run` subcommand: REQUIRES the caller is the gpipe-plan
// binary. Profiling needs the executor, so this is built only with GPIPE_WITH_TORCH.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/validation.h"
#include "core/cluster.h"
#include "core/model.h"
#include "core/status.h"

namespace gpipe {

struct ValidateRequest {
  ModelSpec model;
  /// The model's file, handed to every run.
  std::string model_path;
  /// This machine. Its calibration, if any, is dropped: the loop fits its own.
  Cluster cluster;
  /// A profile to use instead of profiling the model first ("": profile).
  std::string profile_path;
  /// REQUIRES: not empty; every M divides global_batch (ValidationMatrix's output).
  std::vector<ValidationConfig> matrix;
  int64_t global_batch = 64;
  /// Training steps per run (the first is left out of every measure).
  int steps = 10;
  /// Profiler repeats per layer.
  int repeats = 20;
  /// Runs of every configuration.
  int rounds = 5;
  bool planner_check = true;
  std::string out_dir = "validate-out";
};

/// The planner's own choice, run, against the best configuration of the matrix.
struct PlannerChoice {
  /// "1f1b K=2 D=1 M=8".
  std::string plan;
  double measured_ms = 0;
  /// The configuration with the smallest measured step time, and that time.
  std::string best_in_matrix;
  double best_in_matrix_ms = 0;
  /// (measured_ms - best_in_matrix_ms) / best_in_matrix_ms.
  double slower_than_best = 0;
};

struct ValidateReport {
  /// One per configuration, in the matrix's order.
  std::vector<ValidationResult> results;
  ValidationSummary summary;
  /// The calibration fit's notes (empty when no configuration was marked for it).
  std::vector<std::string> calibration_notes;
  /// Absent when the planner check was not asked for.
  std::optional<PlannerChoice> planner_choice;
};

/// Runs the loop. Progress (profiling, each run's measured step time, failed ranks) goes to
/// `progress`. Errors name the configuration or file they concern; a failed run's points to its
/// ranks' log.
Expected<ValidateReport> RunValidate(const ValidateRequest& request, std::ostream& progress);

/// The report as validate.json holds it: ValidationToJson's object with "calibration" (the
/// notes) and, when run, "planner_choice".
nlohmann::json ValidateReportJson(const ValidateReport& report);

}  // namespace gpipe
