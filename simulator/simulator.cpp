#include "simulator/simulator.h"

#include <algorithm>
#include <string>

#include "core/schedule/validate.h"
#include "simulator/bubble.h"
#include "simulator/event_queue.h"
#include "simulator/memory_model.h"

namespace gpipe {
namespace {

// A change of a rank's memory at a time (for the drawn timeline).
struct MemoryDelta {
  double time_ms;
  double bytes;
};

struct Event {
  enum class Kind : uint8_t { kRankFree, kArrival } kind;
  int rank;      // kRankFree: the rank; kArrival: the receiving rank
  int64_t key;   // kRankFree: the rank's version when pushed (older ones are void); kArrival: the message
};

struct RankState {
  size_t next = 0;
  size_t next_posted = 0;  // into the rank's ReceivePosting
  bool computing = false;
  double compute_start = 0;
  int64_t waiting_for = -1;
  double wait_start = 0;
  // Core sharing: the compute runs among the ranks sharing the node; its work left at rate 1.
  bool shared = false;
  double remaining = 0;
  // Bumped whenever the rank's end is pushed again (core sharing changes its rate).
  int64_t version = 0;
};

class Simulation {
 public:
  Simulation(const Schedule& schedule, const CostModel& costs, const SimOptions& options)
      : schedule_(schedule), costs_(costs), options_(options),
        ranks_(schedule.num_ranks()), deltas_(schedule.num_ranks()),
        arrived_(2 * static_cast<size_t>(schedule.num_stages()) * schedule.num_microbatches, -1.0),
        delayed_(arrived_.size(), false),
        link_free_(schedule.num_ranks(), std::vector<double>(schedule.num_ranks(), 0.0)),
        posted_(ReceivesPostedAt(schedule)) {
    result_.ranks.resize(schedule.num_ranks());
    result_.num_actions = schedule.num_actions();
    for (int r = 0; r < schedule.num_ranks(); ++r) {
      result_.ranks[r].static_bytes = StaticBytesOfRank(schedule, r, costs);
    }
  }

  Expected<SimResult> Run() {
    for (int r = 0; r < schedule_.num_ranks(); ++r) queue_.Push(0.0, {Event::Kind::kRankFree, r, 0});
    while (!queue_.empty()) {
      const double now = queue_.top_time();
      const Event event = queue_.Pop();
      if (event.kind == Event::Kind::kArrival) {
        if (WakesLate(event, now)) continue;
        arrived_[event.key] = now;
        RankState& state = ranks_[event.rank];
        if (state.waiting_for == event.key) {
          state.waiting_for = -1;
          result_.ranks[event.rank].wait_ms += now - state.wait_start;
          const Action& recv = schedule_.ranks[event.rank][state.next];
          Record(event.rank, recv, state.wait_start, now, 0.0);
          ++state.next;
          Advance(event.rank, now);
        }
      } else {
        RankState& state = ranks_[event.rank];
        if (event.key != state.version) continue;  // pushed again since: its rate changed
        if (state.computing) Finish(event.rank, now);
        Advance(event.rank, now);
      }
    }
    for (int r = 0; r < schedule_.num_ranks(); ++r) {
      if (ranks_[r].next != schedule_.ranks[r].size()) {
        return Status::Invalid("simulator: rank " + std::to_string(r) + " never finished; it is stuck at " +
                               ActionToText(schedule_.ranks[r][ranks_[r].next]) +
                               " (run DryRun on the schedule to see the deadlock)");
      }
    }
    Summarize();
    return std::move(result_);
  }

 private:
  // Message key of what RECV_F (activation) or RECV_B (gradient) of `stage` waits for.
  int64_t Key(bool gradient, int stage, int microbatch) const {
    return (int64_t{gradient} * schedule_.num_stages() + stage) * schedule_.num_microbatches + microbatch;
  }
  // Records one of the changes of memory_model.h at `time` (for the timeline only; the peak is
  // computed from the action list alone).
  void Change(int rank, double time, const MemoryChange& change) {
    const double bytes = change.activation_bytes + change.buffer_bytes;
    if (options_.record_timeline && bytes != 0) deltas_[rank].push_back({time, bytes});
  }
  void Record(int rank, const Action& action, double start, double end, double recompute) {
    if (options_.record_timeline) result_.actions.push_back({rank, action, start, end, recompute});
  }

  // A message reaching a rank that waits for it while the node's cores are all computing: the
  // rank runs CostModel::saturated_wakeup_ms later (the arrival is pushed again, once).
  bool WakesLate(const Event& arrival, double now) {
    if (costs_.saturated_wakeup_ms <= 0 || costs_.saturated_computing <= 0 || delayed_[arrival.key] ||
        ranks_[arrival.rank].waiting_for != arrival.key ||
        sharing_.size() < static_cast<size_t>(costs_.saturated_computing)) {
      return false;
    }
    delayed_[arrival.key] = true;
    queue_.Push(now + costs_.saturated_wakeup_ms, arrival);
    last_arrival_ms_ = std::max(last_arrival_ms_, now + costs_.saturated_wakeup_ms);
    return true;
  }

  // Runs rank r's actions from time `now` until it starts a compute, waits or runs out.
  void Advance(int r, double now) {
    RankState& state = ranks_[r];
    const auto& actions = schedule_.ranks[r];
    while (state.next < actions.size()) {
      const Action& a = actions[state.next];
      const StageCost& c = costs_.stages[a.stage];
      // The receive buffers the executor allocates as this action starts (their RECVs' start).
      AllocatePostedReceives(actions, posted_[r], state.next_posted, state.next, [&](const Action& recv) {
        Change(r, now, EffectOf(schedule_, recv, costs_.stages[recv.stage]).at_start);
      });
      switch (a.op) {
        case Op::kForward:
        case Op::kBackward:
        case Op::kBackwardInput:
        case Op::kBackwardWeight: {
          const double duration = ComputeMs(c, a.op);
          Change(r, now, EffectOf(schedule_, a, c).at_start);
          state.computing = true;
          state.compute_start = now;
          if (!costs_.active_rate.empty()) {
            Share(now);
            state.shared = true;
            state.remaining = duration;
            sharing_.push_back(r);
            Reschedule(now);
            return;
          }
          result_.ranks[r].busy_ms += duration;
          queue_.Push(now + duration, {Event::Kind::kRankFree, r, state.version});
          return;
        }
        case Op::kSendActivation:
        case Op::kSendGradient: {
          Change(r, now, EffectOf(schedule_, a, c).at_start);
          const double issue_ms = costs_.SendIssueMs(CostModel::SentBytes(c, a.op));
          if (issue_ms > 0) {
            // The rank is busy issuing the send; the message leaves when it is done (Finish).
            state.computing = true;
            state.compute_start = now;
            queue_.Push(now + issue_ms, {Event::Kind::kRankFree, r, state.version});
            return;
          }
          Send(r, a, now);
          Record(r, a, now, now, 0.0);
          ++state.next;
          break;
        }
        case Op::kRecvActivation:
        case Op::kRecvGradient: {
          const int64_t key = Key(a.op == Op::kRecvGradient, a.stage, a.microbatch);
          if (arrived_[key] < 0) {
            state.waiting_for = key;
            state.wait_start = now;
            return;
          }
          Record(r, a, now, now, 0.0);
          ++state.next;
          break;
        }
      }
    }
    result_.ranks[r].end_ms = std::max(result_.ranks[r].end_ms, now);
  }

  // Puts rank r's send `a` on its link at `now`.
  void Send(int r, const Action& a, double now) {
    const int to_stage = PeerStage(a);
    const int to = schedule_.stage_rank[to_stage];
    const StageCost& c = costs_.stages[a.stage];
    const double bytes = CostModel::SentBytes(c, a.op);
    const Link& link = costs_.links[r][to];
    Transfer t;
    t.from_rank = r;
    t.to_rank = to;
    t.send = a;
    t.bytes = bytes;
    t.start_ms = std::max(now, link_free_[r][to]);
    t.wire_end_ms = t.start_ms + (bytes > 0 ? bytes / link.bandwidth_bytes_per_s * 1e3 : 0.0);
    t.arrival_ms = t.wire_end_ms + link.latency_ms;
    link_free_[r][to] = t.wire_end_ms;
    last_arrival_ms_ = std::max(last_arrival_ms_, t.arrival_ms);
    queue_.Push(t.arrival_ms, {Event::Kind::kArrival, to, Key(a.op == Op::kSendGradient, to_stage, a.microbatch)});
    if (options_.record_timeline) result_.transfers.push_back(t);
  }

  // Core sharing: the computing ranks' work done since the last change of their count.
  void Share(double now) {
    for (int r : sharing_) ranks_[r].remaining = std::max(0.0, ranks_[r].remaining - (now - shared_since_) * shared_rate_);
    shared_since_ = now;
  }
  // Core sharing: the rate for the ranks computing now, and their ends at it.
  void Reschedule(double now) {
    const size_t count = std::min(sharing_.size(), costs_.active_rate.size() - 1);
    shared_rate_ = costs_.active_rate[count];
    for (int r : sharing_) {
      RankState& state = ranks_[r];
      queue_.Push(now + state.remaining / shared_rate_, {Event::Kind::kRankFree, r, ++state.version});
    }
  }

  // Ends rank r's running compute (or send) at `now`.
  void Finish(int r, double now) {
    RankState& state = ranks_[r];
    state.computing = false;
    if (state.shared) {
      Share(now);
      state.shared = false;
      sharing_.erase(std::find(sharing_.begin(), sharing_.end(), r));
      result_.ranks[r].busy_ms += now - state.compute_start;
      Reschedule(now);
    }
    const Action& a = schedule_.ranks[r][state.next];
    if (a.op == Op::kSendActivation || a.op == Op::kSendGradient) {
      Send(r, a, now);
      Record(r, a, state.compute_start, now, 0.0);
      result_.ranks[r].end_ms = now;
      ++state.next;
      return;
    }
    const StageCost& c = costs_.stages[a.stage];
    Change(r, now, EffectOf(schedule_, a, c).at_end);
    Record(r, a, state.compute_start, now, RecomputeMs(c, a.op));
    result_.ranks[r].end_ms = now;
    ++state.next;
  }

  void Summarize() {
    double step = last_arrival_ms_;
    std::vector<RankSpan> spans;
    for (size_t r = 0; r < result_.ranks.size(); ++r) {
      const RankResult& rank = result_.ranks[r];
      step = std::max(step, rank.end_ms + costs_.AfterLastActionMs(static_cast<int>(r)));
      spans.push_back({rank.wait_ms, rank.end_ms});
    }
    for (int r = 0; r < schedule_.num_ranks(); ++r) {
      RankResult& rank = result_.ranks[r];
      const MemoryPeak peak = RankMemoryPeak(schedule_, r, costs_, &posted_);
      rank.peak_memory_bytes = peak.peak_bytes;
      rank.peak_activation_bytes = peak.activation_bytes;
      rank.peak_buffer_bytes = peak.buffer_bytes;
      rank.max_in_flight = peak.max_in_flight;
      if (!options_.record_timeline) continue;
      double total = rank.static_bytes + StepStartInputBytes(schedule_, r, costs_.stages);
      rank.memory.push_back({0.0, total});
      for (const MemoryDelta& d : deltas_[r]) {
        total += d.bytes;
        rank.memory.push_back({d.time_ms, total});
      }
    }
    result_.step_time_ms = step;
    result_.bubble_fraction = BubbleFraction(spans);
    result_.throughput_samples_per_s = step > 0 ? static_cast<double>(costs_.global_batch) / step * 1e3 : 0.0;
  }

  const Schedule& schedule_;
  const CostModel& costs_;
  const SimOptions& options_;
  std::vector<RankState> ranks_;
  std::vector<std::vector<MemoryDelta>> deltas_;
  std::vector<double> arrived_;
  // Arrivals WakesLate pushed again.
  std::vector<bool> delayed_;
  std::vector<std::vector<double>> link_free_;
  // Per rank and action: the receives whose buffers are allocated as it starts.
  ReceivePosting posted_;
  double last_arrival_ms_ = 0;
  // Core sharing (CostModel::active_rate): the ranks computing, their rate, since when.
  std::vector<int> sharing_;
  double shared_rate_ = 1;
  double shared_since_ = 0;
  EventQueue<Event> queue_;
  SimResult result_;
};

}  // namespace

Expected<SimResult> Simulate(const Schedule& schedule, const CostModel& costs, const SimOptions& options) {
  if (static_cast<int>(costs.stages.size()) != schedule.num_stages() ||
      costs.num_ranks() != schedule.num_ranks()) {
    return Status::Invalid("simulator: the cost model has " + std::to_string(costs.stages.size()) + " stages and " +
                           std::to_string(costs.num_ranks()) + " ranks, the schedule " +
                           std::to_string(schedule.num_stages()) + " and " + std::to_string(schedule.num_ranks()));
  }
  return Simulation(schedule, costs, options).Run();
}

Expected<SimResult> SimulatePlan(const Plan& plan, const SimOptions& options) {
  Expected<Schedule> schedule = BuildSchedule(plan);
  if (!schedule.ok()) return schedule.status();
  Expected<CostModel> costs = BuildCostModel(plan);
  if (!costs.ok()) return costs.status();
  return Simulate(*schedule, *costs, options);
}

}  // namespace gpipe
