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
  struct Step {
    int rank;
    Op op;
    int stage;
    int peer;      // send: the receiving rank
    int message;   // send/recv: the message slot
  };

  Schedule schedule_;
  std::vector<Step> order_;
  int num_messages_ = 0;
  // Scratch space reused by StepTimeMs (the evaluator is not thread-safe).
  mutable std::vector<double> rank_time_;
  mutable std::vector<double> arrival_;
  mutable std::vector<double> link_free_;
};

}  // namespace gpipe
