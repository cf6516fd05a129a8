#include "core/schedule/wire.h"

#include <cassert>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "core/schedule/validate.h"

namespace gpipe {
namespace {

std::string KindText(MessageKind kind) { return kind == MessageKind::kActivation ? "activation" : "gradient"; }

Message HeaderOf(const Message& m) { return {m.kind, m.from_stage, 0, true}; }

// Each rank's sends in its own order, with the first step's headers, as (peer, message).
std::vector<std::vector<std::pair<int, Message>>> SendOrders(const Schedule& schedule, bool first_step) {
  std::vector<std::vector<std::pair<int, Message>>> orders(static_cast<size_t>(schedule.num_ranks()));
  for (int r = 0; r < schedule.num_ranks(); ++r) {
    std::set<std::pair<MessageKind, int>> headed;
    for (const Action& a : schedule.ranks[static_cast<size_t>(r)]) {
      if (!IsSend(a.op)) continue;
      const Message m = MessageOf(a);
      const int peer = schedule.stage_rank[static_cast<size_t>(m.to_stage())];
      if (first_step && headed.insert({m.kind, m.from_stage}).second) orders[static_cast<size_t>(r)].push_back({peer, HeaderOf(m)});
      orders[static_cast<size_t>(r)].push_back({peer, m});
    }
  }
  return orders;
}

// One rank's receiving side while its program is built: per peer, what that peer sends it in
// order and how far this rank has posted; the shapes it knows.
class ReceiveSide {
 public:
  ReceiveSide(const Schedule& schedule, int rank, const std::vector<std::vector<std::pair<int, Message>>>& sends,
              bool first_step, WirePosting posting)
      : posting_(posting), first_step_(first_step) {
    for (int p = 0; p < schedule.num_ranks(); ++p) {
      for (const auto& [peer, m] : sends[static_cast<size_t>(p)]) {
        if (peer == rank) expected_[p].push_back(m);
      }
    }
  }

  // Steps that post the receives up to `m` from `peer`. Ahead of time (`blocking` false) they
  // stop before a header, which needs a wait; at the RECV itself they wait for headers.
  void PostUpTo(const Message& m, int peer, bool blocking, std::vector<WireStep>* steps) {
    if (posted_.count(m) > 0) return;
    if (posting_ == WirePosting::kAheadInOwnOrder) {
      const bool known = !first_step_ || known_.count({m.kind, m.from_stage}) > 0;
      if (!known) {
        if (!blocking) return;
        steps->push_back({WireOp::kRecvHeader, HeaderOf(m), peer});
        known_.insert({m.kind, m.from_stage});
      }
      steps->push_back({WireOp::kPostRecv, m, peer});
      posted_.insert(m);
      return;
    }
    std::vector<Message>& expected = expected_[peer];
    size_t& next = cursor_[peer];
    while (posted_.count(m) == 0 && next < expected.size()) {
      const Message& e = expected[next];
      if (e.header) {
        if (!blocking) return;
        steps->push_back({WireOp::kRecvHeader, e, peer});
      } else {
        steps->push_back({WireOp::kPostRecv, e, peer});
        posted_.insert(e);
      }
      ++next;
    }
  }

 private:
  WirePosting posting_;
  bool first_step_;
  std::map<int, std::vector<Message>> expected_;
  std::map<int, size_t> cursor_;
  std::set<Message> posted_;
  std::set<std::pair<MessageKind, int>> known_;
};

}  // namespace

std::string MessageToText(const Message& m) {
  if (m.header) return "shape header of stage " + std::to_string(m.from_stage) + "'s " + KindText(m.kind) + "s";
  return KindText(m.kind) + " of stage " + std::to_string(m.from_stage) + ", micro-batch " + std::to_string(m.microbatch);
}

Message MessageOf(const Action& a) {
  switch (a.op) {
    case Op::kSendActivation: return {MessageKind::kActivation, a.stage, a.microbatch, false};
    case Op::kRecvActivation: return {MessageKind::kActivation, a.stage - 1, a.microbatch, false};
    case Op::kSendGradient: return {MessageKind::kGradient, a.stage, a.microbatch, false};
    case Op::kRecvGradient: return {MessageKind::kGradient, a.stage + 1, a.microbatch, false};
    default: break;
  }
  assert(false && "MessageOf: not a send or receive");
  return {};
}

int MessageTag(const Message& m) {
  return (m.from_stage << 2) | (static_cast<int>(m.kind) << 1) | (m.header ? 1 : 0);
}

std::string TagToText(int tag) {
  const Message m{static_cast<MessageKind>((tag >> 1) & 1), tag >> 2, 0, (tag & 1) != 0};
  if (m.header) return MessageToText(m);
  return KindText(m.kind) + "s of stage " + std::to_string(m.from_stage);
}

std::string WireStepToText(const WireStep& s) {
  const std::string peer = " (rank " + std::to_string(s.peer) + ")";
  switch (s.op) {
    case WireOp::kPostRecv: return "post receive of " + MessageToText(s.message) + peer;
    case WireOp::kRecvHeader: return "receive " + MessageToText(s.message) + peer;
    case WireOp::kWaitRecv: return "wait for " + MessageToText(s.message) + peer;
    case WireOp::kCompute: return "compute";
    case WireOp::kSendHeader: return "send " + MessageToText(s.message) + peer;
    case WireOp::kSend: return "send " + MessageToText(s.message) + peer;
  }
  return "?";
}

WireProgram BuildWireProgram(const Schedule& schedule, bool first_step, WirePosting posting) {
  const auto sends = SendOrders(schedule, first_step);
  WireProgram program;
  program.ranks.resize(static_cast<size_t>(schedule.num_ranks()));
  for (int r = 0; r < schedule.num_ranks(); ++r) {
    const std::vector<Action>& actions = schedule.ranks[static_cast<size_t>(r)];
    auto& out = program.ranks[static_cast<size_t>(r)];
    out.resize(actions.size());
    ReceiveSide receive(schedule, r, sends, first_step, posting);
    std::set<std::pair<MessageKind, int>> headed;
    const auto peer_of = [&](int stage) { return schedule.stage_rank[static_cast<size_t>(stage)]; };
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      std::vector<WireStep>& steps = out[i];
      if (IsCompute(a.op)) {
        // What the next compute action receives is posted now, so it arrives during this one.
        for (size_t j = i + 1; j < actions.size() && !IsCompute(actions[j].op); ++j) {
          if (!IsRecv(actions[j].op)) continue;
          const Message m = MessageOf(actions[j]);
          receive.PostUpTo(m, peer_of(m.from_stage), /*blocking=*/false, &steps);
        }
        steps.push_back({WireOp::kCompute, {}, -1});
      } else if (IsRecv(a.op)) {
        const Message m = MessageOf(a);
        receive.PostUpTo(m, peer_of(m.from_stage), /*blocking=*/true, &steps);
        steps.push_back({WireOp::kWaitRecv, m, peer_of(m.from_stage)});
      } else {
        const Message m = MessageOf(a);
        const int peer = peer_of(m.to_stage());
        if (first_step && headed.insert({m.kind, m.from_stage}).second) steps.push_back({WireOp::kSendHeader, HeaderOf(m), peer});
        steps.push_back({WireOp::kSend, m, peer});
      }
    }
  }
  return program;
}

namespace {

// The dry run's state: every rank's place in its program and every queue of posted operations.
class NcclPlay {
 public:
  NcclPlay(const Schedule& schedule, const WireProgram& program, NcclQueues queues)
      : schedule_(schedule), program_(program), queues_(queues), ranks_(program.ranks.size()) {}

  Status Play() {
    std::deque<int> runnable;
    for (size_t r = 0; r < ranks_.size(); ++r) runnable.push_back(static_cast<int>(r));
    while (!runnable.empty()) {
      const int r = runnable.front();
      runnable.pop_front();
      GPIPE_RETURN_IF_ERROR(Run(r, &runnable));
    }
    for (const RankState& s : ranks_) {
      if (!s.finished) return Deadlock();
    }
    for (const auto& [key, queue] : queue_) {
      if (!queue.empty()) {
        return Status::Invalid("wire: rank " + std::to_string(std::get<0>(key)) + " posted a receive of " +
                               MessageToText(queue.front().message) + " that no send meets");
      }
    }
    return Status::Ok();
  }

 private:
  struct Posted {
    bool send = false;
    Message message;
  };
  struct RankState {
    size_t action = 0;
    size_t step = 0;
    bool header_posted = false;
    bool finished = false;
    int sends_in_flight = 0;
    std::set<Message> arrived;
  };
  using Key = std::tuple<int, int, int>;  // (rank, peer, lane)

  int Lane(bool send) const { return queues_ == NcclQueues::kSharedByPair ? 0 : (send ? 0 : 1); }
  Key Facing(const Key& k) const {
    const auto [rank, peer, lane] = k;
    return {peer, rank, queues_ == NcclQueues::kSharedByPair ? 0 : 1 - lane};
  }

  Status Post(int r, const WireStep& s, bool send, std::deque<int>* runnable) {
    const Key key{r, s.peer, Lane(send)};
    queue_[key].push_back({send, s.message});
    if (send) ++ranks_[static_cast<size_t>(r)].sends_in_flight;
    return Match(key, runnable);
  }

  // Completes the heads of `key`'s queue and its facing queue while they are a send and its receive.
  Status Match(const Key& key, std::deque<int>* runnable) {
    const Key facing = Facing(key);
    std::deque<Posted>& mine = queue_[key];
    std::deque<Posted>& theirs = queue_[facing];
    while (!mine.empty() && !theirs.empty() && mine.front().send != theirs.front().send) {
      const bool i_send = mine.front().send;
      const Posted& send = i_send ? mine.front() : theirs.front();
      const Posted& recv = i_send ? theirs.front() : mine.front();
      const int sender = i_send ? std::get<0>(key) : std::get<0>(facing);
      const int receiver = i_send ? std::get<0>(facing) : std::get<0>(key);
      if (!(send.message == recv.message)) {
        return Status::Invalid("wire: NCCL would deliver the " + MessageToText(send.message) + " (from rank " +
                               std::to_string(sender) + ") where rank " + std::to_string(receiver) + " expects the " +
                               MessageToText(recv.message) +
                               ": NCCL ignores tags, so a pair's receives must be posted in the order of its sends");
      }
      ranks_[static_cast<size_t>(receiver)].arrived.insert(recv.message);
      --ranks_[static_cast<size_t>(sender)].sends_in_flight;
      mine.pop_front();
      theirs.pop_front();
      runnable->push_back(sender);
      runnable->push_back(receiver);
    }
    return Status::Ok();
  }

  Status Run(int r, std::deque<int>* runnable) {
    RankState& s = ranks_[static_cast<size_t>(r)];
    const auto& actions = program_.ranks[static_cast<size_t>(r)];
    while (!s.finished) {
      if (s.action == actions.size()) {
        if (s.sends_in_flight == 0) s.finished = true;
        return Status::Ok();
      }
      if (s.step == actions[s.action].size()) {
        ++s.action;
        s.step = 0;
        continue;
      }
      const WireStep& step = actions[s.action][s.step];
      switch (step.op) {
        case WireOp::kPostRecv: GPIPE_RETURN_IF_ERROR(Post(r, step, false, runnable)); break;
        case WireOp::kSend:
        case WireOp::kSendHeader: GPIPE_RETURN_IF_ERROR(Post(r, step, true, runnable)); break;
        case WireOp::kRecvHeader:
          if (!s.header_posted) {
            s.header_posted = true;
            GPIPE_RETURN_IF_ERROR(Post(r, step, false, runnable));
          }
          if (s.arrived.count(step.message) == 0) return Status::Ok();
          s.header_posted = false;
          break;
        case WireOp::kWaitRecv:
          if (s.arrived.count(step.message) == 0) return Status::Ok();
          break;
        case WireOp::kCompute: break;
      }
      ++s.step;
    }
    return Status::Ok();
  }

  std::string QueueHeads(int r) const {
    std::string text;
    for (const auto& [key, queue] : queue_) {
      if (std::get<0>(key) != r || queue.empty()) continue;
      const Posted& head = queue.front();
      text += "; its queue " + std::string(queues_ == NcclQueues::kSharedByPair ? "with" : (head.send ? "to" : "from")) +
              " rank " + std::to_string(std::get<1>(key)) + " starts with " + (head.send ? "the send of " : "the receive of ") +
              MessageToText(head.message);
    }
    return text;
  }

  Status Deadlock() const {
    std::string why = "would deadlock on NCCL (" +
                      std::string(queues_ == NcclQueues::kSharedByPair ? "one queue per pair of ranks"
                                                                       : "one queue per pair and direction") +
                      "): no rank can take its next step";
    std::vector<size_t> next;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const RankState& s = ranks_[r];
      next.push_back(s.action);
      if (s.finished) continue;
      why += "\n  rank " + std::to_string(r);
      if (s.action == program_.ranks[r].size()) {
        why += " waits for its sends to complete";
      } else {
        why += " is stuck at: " + WireStepToText(program_.ranks[r][s.action][s.step]);
      }
      why += QueueHeads(static_cast<int>(r));
    }
    return Status::Invalid("wire:\n" + RenderScheduleGrid(schedule_, next, why));
  }

  const Schedule& schedule_;
  const WireProgram& program_;
  NcclQueues queues_;
  std::vector<RankState> ranks_;
  std::map<Key, std::deque<Posted>> queue_;
};

}  // namespace

Status NcclDryRun(const Schedule& schedule, const WireProgram& program, NcclQueues queues) {
  return NcclPlay(schedule, program, queues).Play();
}

Status CheckWireOnNccl(const Schedule& schedule) {
  for (const bool first_step : {true, false}) {
    Status status = NcclDryRun(schedule, BuildWireProgram(schedule, first_step), NcclQueues::kPerDirection);
    if (!status.ok()) {
      return Status::Invalid(std::string(first_step ? "the first step (with shape headers): " : "a later step: ") +
                             status.message());
    }
  }
  return Status::Ok();
}

}  // namespace gpipe
