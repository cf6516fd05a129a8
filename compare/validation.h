// The validate matrix's bookkeeping: which configurations, which of them the calibration is
// fitted on (the rest are held out and judged), and the summary of predicted against measured.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plan.h"
#include "planner/partition.h"

namespace gpipe {

struct ValidationConfig {
  int stages = 1;
  int microbatches = 1;
  ScheduleKind schedule = ScheduleKind::kGpipe;
  RematPolicy remat = RematPolicy::kOff;
  /// Fitted on by the calibration (otherwise held out).
  bool calibration = false;

  /// "k2-m8-1f1b-remat" (file names, tables).
  std::string Name() const;
};

/// Every combination; one rank has one schedule (they coincide), and M must divide the batch.
/// Configurations whose M is in `calibrate_on` fit the calibration.
std::vector<ValidationConfig> ValidationMatrix(const std::vector<int>& stages, const std::vector<int>& microbatches,
                                               const std::vector<ScheduleKind>& schedules,
                                               const std::vector<RematPolicy>& remat, const std::vector<int>& calibrate_on,
                                               int64_t global_batch);

struct ValidationResult {
  ValidationConfig config;
  double uncalibrated_ms = 0;
  double predicted_ms = 0;
  double measured_ms = 0;
  double measured_spread_ms = 0;
  /// The median step time of each round run (measured_ms is the smallest).
  std::vector<double> round_ms;
  double predicted_peak_bytes = 0;  // the largest rank's
  double measured_peak_bytes = 0;
  /// (predicted - measured) / measured; the memory one is the rank with the largest |error|.
  double error = 0;
  double memory_error = 0;
};

struct ValidationSummary {
  int held_out = 0;
  double median_abs_error = 0;
  double max_abs_error = 0;
  double max_abs_memory_error = 0;
  /// The same over the held-out configurations without calibration.
  double uncalibrated_median_abs_error = 0;
  double uncalibrated_max_abs_error = 0;
};

/// Over the held-out results (all of them when none is held out).
ValidationSummary Summarize(const std::vector<ValidationResult>& results);

std::string ValidationTable(const std::vector<ValidationResult>& results, const ValidationSummary& summary);
nlohmann::json ValidationToJson(const std::vector<ValidationResult>& results, const ValidationSummary& summary);

}  // namespace gpipe
