#include "core/schedule/lower.h"

#include <cassert>
#include <vector>

namespace gpipe {

Schedule AddCommunication(const Schedule& schedule) {
  Schedule lowered = schedule;
  const int stages = schedule.num_stages();
  const auto crosses = [&](int from, int to) {
    return to >= 0 && to < stages && schedule.stage_rank[from] != schedule.stage_rank[to];
  };
  for (int r = 0; r < schedule.num_ranks(); ++r) {
    std::vector<Action> actions;
    actions.reserve(schedule.ranks[r].size() * 2);
    for (const Action& a : schedule.ranks[r]) {
      assert(IsCompute(a.op));
      const bool backward = a.op == Op::kBackward || a.op == Op::kBackwardInput;
      if (a.op == Op::kForward && crosses(a.stage, a.stage - 1)) {
        actions.push_back({Op::kRecvActivation, a.stage, a.microbatch});
      }
      if (backward && crosses(a.stage, a.stage + 1)) {
        actions.push_back({Op::kRecvGradient, a.stage, a.microbatch});
      }
      actions.push_back(a);
      if (a.op == Op::kForward && crosses(a.stage, a.stage + 1)) {
        actions.push_back({Op::kSendActivation, a.stage, a.microbatch});
      }
      if (backward && crosses(a.stage, a.stage - 1)) {
        actions.push_back({Op::kSendGradient, a.stage, a.microbatch});
      }
    }
    lowered.ranks[r] = std::move(actions);
  }
  return lowered;
}

Schedule PostReceivesInSendOrder(const Schedule& schedule) {
  const int ranks = schedule.num_ranks();
  // The receive each send is matched with: SEND_F(s, i) -> RECV_F(s + 1, i), SEND_B(s, i) ->
  // RECV_B(s - 1, i); and the rank that sends what a receive takes.
  const auto receive_of = [](const Action& send) {
    return send.op == Op::kSendActivation ? Action{Op::kRecvActivation, send.stage + 1, send.microbatch}
                                          : Action{Op::kRecvGradient, send.stage - 1, send.microbatch};
  };
  const auto sender_of = [&](const Action& receive) {
    return schedule.stage_rank[receive.op == Op::kRecvActivation ? receive.stage - 1 : receive.stage + 1];
  };
  // sent[from][to]: what `from` sends `to`, in `from`'s order, as the receives they match.
  std::vector<std::vector<std::vector<Action>>> sent(ranks, std::vector<std::vector<Action>>(ranks));
  for (int from = 0; from < ranks; ++from) {
    for (const Action& a : schedule.ranks[from]) {
      if (a.op != Op::kSendActivation && a.op != Op::kSendGradient) continue;
      const Action receive = receive_of(a);
      sent[from][schedule.stage_rank[receive.stage]].push_back(receive);
    }
  }
  Schedule posted = schedule;
  for (int to = 0; to < ranks; ++to) {
    std::vector<Action> actions;
    actions.reserve(schedule.ranks[to].size());
    std::vector<size_t> next(ranks, 0);  // per sender: its messages to `to` posted so far
    // Whether a receive is posted already, by op, stage and micro-batch.
    std::vector<char> done(2 * static_cast<size_t>(schedule.num_stages()) * schedule.num_microbatches, 0);
    const auto slot = [&](const Action& receive) -> char& {
      const size_t op = receive.op == Op::kRecvActivation ? 0 : 1;
      return done[(op * schedule.num_stages() + receive.stage) * schedule.num_microbatches + receive.microbatch];
    };
    for (const Action& a : schedule.ranks[to]) {
      if (a.op != Op::kRecvActivation && a.op != Op::kRecvGradient) {
        actions.push_back(a);
        continue;
      }
      if (slot(a)) continue;  // brought forward by an earlier receive
      const int from = sender_of(a);
      const std::vector<Action>& queue = sent[from][to];
      // Post every message the sender sends before this one, then this one.
      while (next[from] < queue.size()) {
        const Action& receive = queue[next[from]++];
        actions.push_back(receive);
        slot(receive) = 1;
        if (receive == a) break;
      }
    }
    posted.ranks[to] = std::move(actions);
  }
  return posted;
}

Schedule ComputeOnly(const Schedule& schedule) {
  Schedule compute = schedule;
  for (auto& actions : compute.ranks) {
    std::erase_if(actions, [](const Action& a) { return !IsCompute(a.op); });
  }
  return compute;
}

}  // namespace gpipe
