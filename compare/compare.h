// Predicted against measured: one plan's simulated step next to a run record of it. Per rank:
// busy time, when its last action ended, time spent waiting for messages, issuing sends and
// between actions, and peak memory; per (rank, op, stage): the median action against the
// simulator's; then the findings, largest first: which part of the difference comes from a slow
// stage, a slow link or a slow peer, overhead between actions, or work after the last action
// (optimizer step, step bookkeeping).
//
// Measured figures are medians over the record's steps after the first (the first warms up),
// or the one step there is: the step time is MeasuredStepMs and the throughput ThroughputOf, the
// figures `run` prints. Every error, in the table, the findings and the JSON, is
// (predicted - measured) / measured (RelativeError, core/statistics.h), and every difference in
// milliseconds predicted - measured: negative when the prediction is too low. The bubble is the
// pipeline bubble of simulator/bubble.h for both sides (0 for one rank); the time ranks spend not
// computing is the idle fraction, apart.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plan.h"
#include "core/run_record.h"
#include "core/statistics.h"
#include "core/status.h"
#include "simulator/trace.h"

namespace gpipe {

/// One kind of action on one rank: every micro-batch's F of stage 1 on rank 1, say.
struct OpComparison {
  int rank = 0;
  Op op = Op::kForward;
  int stage = 0;
  int count = 0;  // per step
  double predicted_ms = 0;
  double measured_ms = 0;
};

struct RankComparison {
  int rank = 0;
  double predicted_busy_ms = 0, measured_busy_ms = 0;
  double predicted_end_ms = 0, measured_end_ms = 0;
  double predicted_wait_ms = 0, measured_wait_ms = 0;
  double predicted_send_ms = 0, measured_send_ms = 0;
  /// Measured time between the rank's actions and before its first (the simulator has none).
  double measured_gap_ms = 0;
  double predicted_peak_bytes = 0, measured_peak_bytes = 0;
};

struct Comparison {
  std::string title;
  int measured_steps = 0;
  double predicted_step_ms = 0, measured_step_ms = 0;
  /// Half the interquartile range of the measured steps.
  double measured_step_spread_ms = 0;
  double predicted_throughput = 0, measured_throughput = 0;
  /// The pipeline bubble (simulator/bubble.h); measured: its median over the steps.
  double predicted_bubble = 0, measured_bubble = 0;
  /// 1 - busy rank-time / (ranks x step time): not computing, for whatever reason.
  double predicted_idle = 0, measured_idle = 0;
  /// From the last action's end (and all-reduce) to the step's end.
  double predicted_after_ms = 0, measured_after_ms = 0;
  std::vector<RankComparison> ranks;
  std::vector<OpComparison> ops;
  /// Sentences, largest difference first.
  std::vector<std::string> findings;
  /// The simulated step and the record's last step.
  Timeline predicted, measured;

  /// RelativeError(predicted, measured) of the step time: negative when the run was slower.
  double StepError() const { return RelativeError(predicted_step_ms, measured_step_ms); }
  /// The same for peak memory, on the rank with the largest |error|.
  double PeakMemoryError() const;
};

/// Errors when the record is not a run of this plan (ranks, micro-batches, schedule differ).
Expected<Comparison> Compare(const Plan& plan, const RunRecord& record);

std::string ComparisonTable(const Comparison& c);
nlohmann::json ComparisonToJson(const Comparison& c);


}  // namespace gpipe
