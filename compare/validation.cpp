#include "compare/validation.h"

#include <algorithm>
#include <cmath>

#include "compare/compare.h"
#include "core/schedule/placement.h"
#include "core/text.h"
#include "core/units.h"

namespace gpipe {

std::string ValidationConfig::Name() const {
  return Sprintf("k%d-m%d-%s%s", stages, microbatches, std::string(ScheduleName(schedule)).c_str(),
                 remat == RematPolicy::kOn ? "-remat" : "");
}

std::vector<ValidationConfig> ValidationMatrix(const std::vector<int>& stages, const std::vector<int>& microbatches,
                                               const std::vector<ScheduleKind>& schedules,
                                               const std::vector<RematPolicy>& remat, const std::vector<int>& calibrate_on,
                                               int64_t global_batch) {
  std::vector<ValidationConfig> out;
  for (int k : stages) {
    for (int m : microbatches) {
      if (global_batch % m != 0) continue;
      for (size_t i = 0; i < schedules.size(); ++i) {
        if (k == 1 && i > 0) continue;  // one rank: the schedules coincide
        if (LayoutOf(schedules[i]) != StageLayout::kOnePerRank && k < 2) continue;
        if (!CheckMicrobatchCount(schedules[i], k, m).ok()) continue;
        for (RematPolicy r : remat) {
          ValidationConfig c;
          c.stages = k;
          c.microbatches = m;
          c.schedule = schedules[i];
          c.remat = r;
          c.calibration = std::find(calibrate_on.begin(), calibrate_on.end(), m) != calibrate_on.end();
          out.push_back(c);
        }
      }
    }
  }
  return out;
}

ValidationSummary Summarize(const std::vector<ValidationResult>& results) {
  ValidationSummary s;
  const bool any_held_out = std::any_of(results.begin(), results.end(), [](const auto& r) { return !r.config.calibration; });
  std::vector<double> errors, uncalibrated;
  for (const ValidationResult& r : results) {
    if (any_held_out && r.config.calibration) continue;
    errors.push_back(std::abs(r.error));
    uncalibrated.push_back(std::abs((r.uncalibrated_ms - r.measured_ms) / r.measured_ms));
    s.max_abs_memory_error = std::max(s.max_abs_memory_error, std::abs(r.memory_error));
  }
  s.held_out = any_held_out ? static_cast<int>(errors.size()) : 0;
  if (errors.empty()) return s;
  s.median_abs_error = Median(errors);
  s.max_abs_error = *std::max_element(errors.begin(), errors.end());
  s.uncalibrated_median_abs_error = Median(uncalibrated);
  s.uncalibrated_max_abs_error = *std::max_element(uncalibrated.begin(), uncalibrated.end());
  return s;
}

std::string ValidationTable(const std::vector<ValidationResult>& results, const ValidationSummary& summary) {
  std::string out = Sprintf("%-22s %-9s %12s %12s %16s %8s %16s %8s  %s\n", "configuration", "role", "uncalibrated",
                            "predicted", "measured", "error", "peak memory", "error", "rounds (ms)");
  for (const ValidationResult& r : results) {
    std::string rounds;
    for (const double ms : r.round_ms) rounds += (rounds.empty() ? "" : " ") + Sprintf("%.0f", ms);
    out += Sprintf("%-22s %-9s %9.2f ms %9.2f ms %9.2f ±%4.1f ms %+7.1f%% %16s %+7.1f%%  %s\n", r.config.Name().c_str(),
                   r.config.calibration ? "fit" : "held out", r.uncalibrated_ms, r.predicted_ms, r.measured_ms,
                   r.measured_spread_ms, 100 * r.error, FormatBytes(r.measured_peak_bytes).c_str(), 100 * r.memory_error,
                   rounds.c_str());
  }
  out += Sprintf("\nheld out: %d configurations; step time |error| median %.1f%%, largest %.1f%% (uncalibrated: median "
                 "%.1f%%, largest %.1f%%); peak memory |error| largest %.1f%%\n",
                 summary.held_out, 100 * summary.median_abs_error, 100 * summary.max_abs_error,
                 100 * summary.uncalibrated_median_abs_error, 100 * summary.uncalibrated_max_abs_error,
                 100 * summary.max_abs_memory_error);
  return out;
}

nlohmann::json ValidationToJson(const std::vector<ValidationResult>& results, const ValidationSummary& summary) {
  nlohmann::json configs = nlohmann::json::array();
  for (const ValidationResult& r : results) {
    configs.push_back({{"name", r.config.Name()},
                       {"stages", r.config.stages},
                       {"microbatches", r.config.microbatches},
                       {"schedule", std::string(ScheduleName(r.config.schedule))},
                       {"remat", std::string(RematPolicyName(r.config.remat))},
                       {"held_out", !r.config.calibration},
                       {"uncalibrated_ms", r.uncalibrated_ms},
                       {"predicted_ms", r.predicted_ms},
                       {"measured_ms", r.measured_ms},
                       {"measured_spread_ms", r.measured_spread_ms},
                       {"round_ms", r.round_ms},
                       {"error", r.error},
                       {"predicted_peak_memory_bytes", r.predicted_peak_bytes},
                       {"measured_peak_memory_bytes", r.measured_peak_bytes},
                       {"memory_error", r.memory_error}});
  }
  return {{"configs", configs},
          {"held_out", summary.held_out},
          {"median_abs_error", summary.median_abs_error},
          {"max_abs_error", summary.max_abs_error},
          {"max_abs_memory_error", summary.max_abs_memory_error},
          {"uncalibrated_median_abs_error", summary.uncalibrated_median_abs_error},
          {"uncalibrated_max_abs_error", summary.uncalibrated_max_abs_error}};
}

}  // namespace gpipe
