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
  routes_.assign(2 * static_cast<size_t>(stages), SendRoute{});
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
        Step step{r, Kind::kCompute, ComputeIndex(a.stage, a.op), -1, -1};
        if (a.op == Op::kSendActivation || a.op == Op::kSendGradient) {
          const bool gradient = a.op == Op::kSendGradient;
          const int to_stage = PeerStage(a);
          const int peer = schedule.stage_rank[to_stage];
          step.kind = Kind::kSend;
          step.cost = 2 * a.stage + int{gradient};
          step.link = r * ranks + peer;
          step.message = slot(gradient, to_stage, a.microbatch);
          // A stage's sends of one kind all take one route: its rank's to its peer stage's.
          assert(routes_[step.cost].from < 0 || (routes_[step.cost].from == r && routes_[step.cost].to == peer));
          routes_[step.cost] = {r, peer};
          sent[step.message] = 1;
        } else if (a.op == Op::kRecvActivation || a.op == Op::kRecvGradient) {
          step.kind = Kind::kRecv;
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
  compute_ms_.resize(4 * static_cast<size_t>(stages));
  issue_ms_.resize(2 * static_cast<size_t>(stages));
  wire_ms_.resize(2 * static_cast<size_t>(stages));
  latency_ms_.resize(2 * static_cast<size_t>(stages));
}

int StepEvaluator::ComputeIndex(int stage, Op op) {
  switch (op) {
    case Op::kForward: return 4 * stage;
    case Op::kBackward: return 4 * stage + 1;
    case Op::kBackwardInput: return 4 * stage + 2;
    case Op::kBackwardWeight: return 4 * stage + 3;
    default: return -1;  // (sends and receives are priced by their own tables)
  }
}

double StepEvaluator::StepTimeMs(const CostModel& costs) const {
  if (!costs.active_rate.empty()) {
    // Core sharing makes a compute's end depend on what the other ranks do at each moment: the
    // event queue's order, not this per-rank pass.
    const Expected<SimResult> simulated = Simulate(schedule_, costs, SimOptions{false});
    return simulated.ok() ? simulated->step_time_ms : std::numeric_limits<double>::infinity();
  }
  const int ranks = schedule_.num_ranks();
  const int stages = schedule_.num_stages();
  for (int s = 0; s < stages; ++s) {
    const StageCost& c = costs.stages[s];
    compute_ms_[4 * s] = ComputeMs(c, Op::kForward);
    compute_ms_[4 * s + 1] = ComputeMs(c, Op::kBackward);
    compute_ms_[4 * s + 2] = ComputeMs(c, Op::kBackwardInput);
    compute_ms_[4 * s + 3] = ComputeMs(c, Op::kBackwardWeight);
    for (int gradient = 0; gradient < 2; ++gradient) {
      const size_t k = 2 * static_cast<size_t>(s) + gradient;
      if (routes_[k].from < 0) continue;  // (no such send)
      const double bytes = CostModel::SentBytes(c, gradient ? Op::kSendGradient : Op::kSendActivation);
      const Link& link = costs.links[routes_[k].from][routes_[k].to];
      issue_ms_[k] = costs.SendIssueMs(bytes);
      wire_ms_[k] = bytes > 0 ? bytes / link.bandwidth_bytes_per_s * 1e3 : 0.0;
      latency_ms_[k] = link.latency_ms;
    }
  }
  std::fill(rank_time_.begin(), rank_time_.end(), 0.0);
  std::fill(link_free_.begin(), link_free_.end(), 0.0);
  double last_arrival = 0;
  for (const Step& step : order_) {
    double& now = rank_time_[step.rank];
    switch (step.kind) {
      case Kind::kCompute: now = now + compute_ms_[step.cost]; break;
      case Kind::kSend: {
        now = now + issue_ms_[step.cost];
        double& free_at = link_free_[step.link];
        const double start = std::max(now, free_at);
        const double wire_end = start + wire_ms_[step.cost];
        free_at = wire_end;
        arrival_[step.message] = wire_end + latency_ms_[step.cost];
        last_arrival = std::max(last_arrival, arrival_[step.message]);
        break;
      }
      case Kind::kRecv: now = std::max(now, arrival_[step.message]); break;
    }
  }
  double step = last_arrival;
  for (int r = 0; r < ranks; ++r) {
    step = std::max(step, rank_time_[r] + costs.AfterLastActionMs(r));
  }
  return step;
}

}  // namespace gpipe
