// Calibration: fitting what a profile cannot know (core/calibration.h) from run records of
// plans, on the records' own action times (compare/calibration_samples.h reads them; the
// records' first steps, warm-up, are left out):
//   - compute: each (run, rank, op, stage)'s mean action time = scale[ranks on the node] x the
//     profile's time + an overhead per forward or backward action, by least squares per
//     ranks-per-node count (overheads that come out negative are dropped and the scales refitted;
//     means, not medians: a step pays every action, stalls included);
//   - sends: the mean time a send occupies its rank;
//   - links: for every message whose receiver was already waiting when the send ended, the time
//     from the send's end to the receive's end = latency + bytes / bandwidth, by least squares
//     over messages of different sizes (of one size: the cluster's bandwidth is kept and the
//     latency is the median of what is left);
//   - the tail: each step's end minus the last action's end (less the predicted all-reduce) =
//     step overhead + optimizer time per GiB of the last rank's parameters, by least squares when
//     those parameters differ (else the median tail); plus the median start of a step's first
//     action.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/calibration.h"
#include "core/cluster.h"
#include "core/plan.h"
#include "core/run_record.h"
#include "core/status.h"

namespace gpipe {

struct CalibrationRun {
  std::string name;  // for reports, e.g. the record's path
  Plan plan;
  RunRecord record;
};

struct CalibrationFit {
  Calibration calibration;
  /// The intra-node link as the executor saw it (absent when no message was seen waiting).
  std::optional<Link> link;
  int compute_samples = 0;
  int messages = 0;
  int steps = 0;
  /// Root mean square of the compute fit's residuals, ms.
  double compute_rms_ms = 0;
  /// One line per fitted quantity: its value, from how many samples.
  std::vector<std::string> notes;
};

/// The record at `record_path` with its plan: `plan_path`, or else the plan the record names
/// (as written, or next to the record). With `cluster`, the plan is costed on it instead of
/// its own (e.g. a calibrated one).
Expected<CalibrationRun> LoadCalibrationRun(const std::string& record_path, const std::string& plan_path = "",
                                            const Cluster* cluster = nullptr);

/// Errors name the run whose plan and record disagree, or say what is missing.
Expected<CalibrationFit> FitCalibration(const std::vector<CalibrationRun>& runs);

/// `cluster` with the fit applied: its calibration, and its default link when one was fitted.
Cluster ApplyCalibration(const Cluster& cluster, const CalibrationFit& fit);

}  // namespace gpipe
