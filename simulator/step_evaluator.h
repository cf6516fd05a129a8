// The simulator's step time without the event queue: a schedule compiled once into a
// topological order of its actions, then evaluated for any costs in one pass. It applies the
// same rules as Simulate (ranks run their actions in order; a link carries one message at a time,
// in its sender's order; a receive waits for its arrival), with the same arithmetic, so its step
// time equals Simulate's exactly. The planner calls it thousands of times per search.
#pragma once

#include <cstdint>
#include <vector>

#include "core/schedule/schedule.h"
#include "simulator/cost_model.h"

namespace gpipe {

class StepEvaluator {
 public:
  /// REQUIRES: `schedule` is lowered, valid and free of deadlock (BuildSchedule's output).
  explicit StepEvaluator(const Schedule& schedule);

  /// The step time Simulate(schedule, costs) would report (Simulate's own, under core sharing).
  double StepTimeMs(const CostModel& costs) const;

  const Schedule& schedule() const { return schedule_; }

 private:
  // The entry of compute action `op` of `stage` in compute_ms_ (-1 for sends and receives).
  static int ComputeIndex(int stage, Op op);

  enum class Kind : uint8_t { kCompute, kSend, kRecv };
  struct Step {
    int rank;
    Kind kind;
    int cost;     // compute: its entry in compute_ms_; send: its entry in the send tables
    int link;     // send: rank x ranks + the receiving rank (its entry in link_free_)
    int message;  // send/recv: the message slot
  };
  // A stage's sends: activations to the next stage's rank, gradients to the previous one's.
  struct SendRoute {
    int from = -1;
    int to = -1;
  };

  Schedule schedule_;
  std::vector<Step> order_;
  std::vector<SendRoute> routes_;  // per stage x {activation, gradient}
  int num_messages_ = 0;
  // Scratch space reused by StepTimeMs (the evaluator is not thread-safe): per rank, message and
  // link; and the costs' per-stage durations, priced once per call rather than once per action
  // (the same expressions, so the same bits): compute per stage x {F, B, I, W}, and per stage x
  // {activation, gradient} a send's issue, wire time and latency.
  mutable std::vector<double> rank_time_;
  mutable std::vector<double> arrival_;
  mutable std::vector<double> link_free_;
  mutable std::vector<double> compute_ms_;
  mutable std::vector<double> issue_ms_;
  mutable std::vector<double> wire_ms_;
  mutable std::vector<double> latency_ms_;
};

}  // namespace gpipe
