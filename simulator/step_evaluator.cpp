#include "simulator/step_evaluator.h"

#include <algorithm>
#include <cassert>
#include <limits>

#include "simulator/simulator.h"

namespace gpipe {

StepEvaluator::StepEvaluator(const Schedule& schedule) : schedule_(schedule) {
  const int ranks = schedule.num_ranks();
  const int stages = schedule.num_stages();
  const int microbatches = schedule.num_microbatches;
  // Message slots: activations into stage s and gradients into stage s, per micro-batch.
  const auto slot = [&](bool gradient, int stage, int microbatch) {
    return (int{gradient} * stages + stage) * microbatches + microbatch;
  };
  num_messages_ = 2 * stages * microbatches;
  std::vector<char> sent(num_messages_, 0);
  std::vector<size_t> next(ranks, 0);
  size_t remaining = schedule.num_actions();
  order_.reserve(remaining);
  // Lockstep rounds as in DryRun: a receive may go once its send has been placed earlier.
  while (remaining > 0) {
    bool progress = false;
    for (int r = 0; r < ranks; ++r) {
      while (next[r] < schedule.ranks[r].size()) {
        const Action& a = schedule.ranks[r][next[r]];
        Step step{r, a.op, a.stage, -1, -1};
        if (a.op == Op::kSendActivation || a.op == Op::kSendGradient) {
          const bool gradient = a.op == Op::kSendGradient;
          const int to_stage = PeerStage(a);
          step.peer = schedule.stage_rank[to_stage];
          step.message = slot(gradient, to_stage, a.microbatch);
          sent[step.message] = 1;
        } else if (a.op == Op::kRecvActivation || a.op == Op::kRecvGradient) {
          step.message = slot(a.op == Op::kRecvGradient, a.stage, a.microbatch);
          if (!sent[step.message]) break;
        }
        order_.push_back(step);
        ++next[r];
        --remaining;
        progress = true;
      }
    }
    assert(progress && "StepEvaluator needs a deadlock-free schedule");
    if (!progress) break;
  }
  rank_time_.resize(ranks);
  arrival_.resize(num_messages_);
  link_free_.resize(static_cast<size_t>(ranks) * ranks);
}

double StepEvaluator::StepTimeMs(const CostModel& costs) const {
  if (!costs.active_rate.empty()) {
    // Core sharing makes a compute's end depend on what the other ranks do at each moment: the
    // event queue's order, not this per-rank pass.
    const Expected<SimResult> simulated = Simulate(schedule_, costs, SimOptions{false});
    return simulated.ok() ? simulated->step_time_ms : std::numeric_limits<double>::infinity();
  }
  const int ranks = schedule_.num_ranks();
  std::fill(rank_time_.begin(), rank_time_.end(), 0.0);
  std::fill(link_free_.begin(), link_free_.end(), 0.0);
  double last_arrival = 0;
  for (const Step& step : order_) {
    double& now = rank_time_[step.rank];
    const StageCost& c = costs.stages[step.stage];
    switch (step.op) {
      case Op::kForward:
      case Op::kBackward:
      case Op::kBackwardInput:
      case Op::kBackwardWeight: now = now + ComputeMs(c, step.op); break;
      case Op::kSendActivation:
      case Op::kSendGradient: {
        const double bytes = CostModel::SentBytes(c, step.op);
        const Link& link = costs.links[step.rank][step.peer];
        now = now + costs.SendIssueMs(bytes);
        double& free_at = link_free_[static_cast<size_t>(step.rank) * ranks + step.peer];
        const double start = std::max(now, free_at);
        const double wire_end = start + (bytes > 0 ? bytes / link.bandwidth_bytes_per_s * 1e3 : 0.0);
        free_at = wire_end;
        arrival_[step.message] = wire_end + link.latency_ms;
        last_arrival = std::max(last_arrival, arrival_[step.message]);
        break;
      }
      case Op::kRecvActivation:
      case Op::kRecvGradient: now = std::max(now, arrival_[step.message]); break;
    }
  }
  double step = last_arrival;
  for (int r = 0; r < ranks; ++r) {
    step = std::max(step, rank_time_[r] + costs.AfterLastActionMs(r));
  }
  return step;
}

}  // namespace gpipe
