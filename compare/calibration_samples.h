// What calibration fits from: the run records of plans read into samples, each plan costed on its
// cluster without calibration (so the profile's own times stand against the measured ones). The
// records' first steps (warm-up) are left out, unless a record holds one step only.
//   - compute: per (run, rank, op, stage), the mean measured time of the action over steps and
//     micro-batches, against the profile's time (simulator/cost_model.h ComputeMs);
//   - sends: how long each send occupied its rank;
//   - messages: each one whose receiver was already waiting when the send ended, its bytes and the
//     time from the send's end to the receive's end (the arrival);
//   - tails: per step, its end minus its last action's end, less the all-reduce predicted for the
//     rank that ended last; that rank's parameter bytes; when the step's first action started.
// compare/calibrate.cpp fits the calibration to them.
#pragma once

#include <vector>

#include "compare/calibrate.h"
#include "core/status.h"

namespace gpipe {

/// One (run, rank, op, stage): measured ~ scale x base_ms + forwards x forward overhead +
/// backwards x backward overhead.
struct ComputeSample {
  int ranks_per_node;
  /// How many forward and backward overheads the action pays (a remat backward recomputes a
  /// forward first: one of each).
  int forwards;
  int backwards;
  /// The profile's time of the action; measured_ms the mean over the record's actions.
  double base_ms;
  double measured_ms;
};

/// Gathered over every run, in the order of runs, ranks and actions.
struct CalibrationSamples {
  std::vector<ComputeSample> compute;
  std::vector<double> sends;
  /// Messages whose receiver was waiting: bytes and ms, index by index.
  std::vector<double> message_bytes, message_ms;
  /// Per step: tail ms, the last rank's parameter bytes, the first action's start, index by index.
  std::vector<double> tail_ms, tail_params, first_starts;
  /// Steps read (those with a tail).
  int steps = 0;
};

/// Adds `run`'s samples. Fails when the record is not a run of its plan (K, D, M differ) or the
/// plan cannot be costed; both errors name the run.
Status GatherCalibrationSamples(const CalibrationRun& run, CalibrationSamples& samples);

}  // namespace gpipe
