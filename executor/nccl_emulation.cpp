#include "executor/nccl_emulation.h"

#include <algorithm>
#include <stdexcept>

#include "executor/memory_meter.h"

namespace gpipe::executor {

struct NcclHub::Op {
  int rank = 0;
  int peer = 0;
  bool send = false;
  int tag = 0;
  int group = 0;
  torch::Tensor tensor;
  bool done = false;
  std::string error;
};

namespace {

class EmulatedWork final : public PendingWork {
 public:
  EmulatedWork(std::shared_ptr<NcclHub> hub, int rank, std::shared_ptr<NcclHub::Op> op)
      : hub_(std::move(hub)), rank_(rank), op_(std::move(op)) {}
  void Wait() override { hub_->Wait(rank_, op_); }
  bool Done() override { return hub_->Done(op_); }

 private:
  std::shared_ptr<NcclHub> hub_;
  int rank_;
  std::shared_ptr<NcclHub::Op> op_;
};

class EmulatedCommunicator final : public Communicator {
 public:
  EmulatedCommunicator(std::shared_ptr<NcclHub> hub, int rank)
      : hub_(std::move(hub)), rank_(rank), records_(MakeLocalCommunicator(hub_->records(), rank)) {}
  ~EmulatedCommunicator() override { hub_->Leave(rank_); }
  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  std::string backend() const override {
    return hub_->queues() == NcclQueues::kPerDirection ? "nccl-emulated" : "nccl-emulated (one queue per pair)";
  }
  std::unique_ptr<PendingWork> Send(const torch::Tensor& tensor, int peer, int tag) override {
    return std::make_unique<EmulatedWork>(hub_, rank_, hub_->Post(rank_, peer, true, tag, tensor));
  }
  std::unique_ptr<PendingWork> Recv(const torch::Tensor& into, int peer, int tag) override {
    return std::make_unique<EmulatedWork>(hub_, rank_, hub_->Post(rank_, peer, false, tag, into));
  }
  void AllReduceSum(torch::Tensor& tensor, const std::vector<int>& group) override {
    tensor.copy_(hub_->Reduce(rank_, group, tensor));
  }
  void Barrier() override {
    std::vector<int> all(static_cast<size_t>(hub_->size()));
    for (int i = 0; i < hub_->size(); ++i) all[static_cast<size_t>(i)] = i;
    hub_->Reduce(rank_, all, torch::zeros({1}));
  }
  std::vector<std::string> GatherToRankZero(const std::string& mine) override {
    return records_->GatherToRankZero(mine);
  }

 private:
  std::shared_ptr<NcclHub> hub_;
  int rank_;
  std::unique_ptr<Communicator> records_;  // host-side, as c10d's store is: no NCCL rules
};

}  // namespace

NcclHub::Key NcclHub::QueueOf(int rank, int peer, bool send) const {
  return {rank, peer, queues_ == NcclQueues::kSharedByPair ? 0 : (send ? 0 : 1)};
}

NcclHub::Key NcclHub::Facing(const Key& key) const {
  const auto [rank, peer, lane] = key;
  return {peer, rank, queues_ == NcclQueues::kSharedByPair ? 0 : 1 - lane};
}

std::string NcclHub::Describe(const Op& op) const {
  return std::string(op.send ? "send of the " : "receive of the ") + TagToText(op.tag) +
         (op.send ? " to rank " : " from rank ") + std::to_string(op.peer);
}

void NcclHub::ThrowIfAborted() const {
  if (!abort_reason_.empty()) throw std::runtime_error("stopped: " + abort_reason_);
}

void NcclHub::Enqueue(int rank, int peer, bool send, int tag, const torch::Tensor& tensor, int group,
                      std::shared_ptr<Op>* out) {
  if (peer < 0 || peer >= size_ || peer == rank) {
    throw std::logic_error("rank " + std::to_string(rank) + " addressed rank " + std::to_string(peer));
  }
  auto op = std::make_shared<Op>();
  op->rank = rank;
  op->peer = peer;
  op->send = send;
  op->tag = tag;
  op->group = group;
  op->tensor = tensor;
  queue_[QueueOf(rank, peer, send)].push_back(op);
  *out = op;
}

std::shared_ptr<NcclHub::Op> NcclHub::Post(int rank, int peer, bool send, int tag, const torch::Tensor& tensor) {
  std::lock_guard<std::mutex> lock(mutex_);
  ThrowIfAborted();
  std::shared_ptr<Op> op;
  Enqueue(rank, peer, send, tag, tensor, next_group_++, &op);
  Match(QueueOf(rank, peer, send));
  return op;
}

std::vector<std::shared_ptr<NcclHub::Op>> NcclHub::PostGroup(
    int rank, const std::vector<std::tuple<int, bool, int, torch::Tensor>>& ops) {
  std::lock_guard<std::mutex> lock(mutex_);
  ThrowIfAborted();
  const int group = next_group_++;
  std::vector<std::shared_ptr<Op>> posted(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto& [peer, send, tag, tensor] = ops[i];
    Enqueue(rank, peer, send, tag, tensor, group, &posted[i]);
  }
  for (const std::shared_ptr<Op>& op : posted) Match(QueueOf(rank, op->peer, op->send));
  return posted;
}

void NcclHub::Complete(const std::shared_ptr<Op>& op) {
  op->done = true;
  if (waiting_[static_cast<size_t>(op->rank)] == op.get()) waiting_[static_cast<size_t>(op->rank)] = nullptr;
}

void NcclHub::Match(const Key& key) {
  std::deque<std::shared_ptr<Op>>& mine = queue_[key];
  std::deque<std::shared_ptr<Op>>& theirs = queue_[Facing(key)];
  // The head group of each queue is in flight; within it a direction's operations keep their order.
  const auto first = [](std::deque<std::shared_ptr<Op>>& q, bool send) {
    for (auto it = q.begin(); it != q.end() && (*it)->group == q.front()->group; ++it) {
      if ((*it)->send == send) return it;
    }
    return q.end();
  };
  bool progressed = true;
  while (progressed && !mine.empty() && !theirs.empty()) {
    progressed = false;
    for (const bool i_send : {true, false}) {
      auto a = first(mine, i_send);
      auto b = first(theirs, !i_send);
      if (a == mine.end() || b == theirs.end()) continue;
      const std::shared_ptr<Op> send = i_send ? *a : *b;
      const std::shared_ptr<Op> recv = i_send ? *b : *a;
      if (send->tag != recv->tag) {
        recv->error = send->error = "on NCCL, which ignores tags, rank " + std::to_string(recv->rank) + "'s receive of the " +
                                    TagToText(recv->tag) + " would get rank " + std::to_string(send->rank) + "'s " +
                                    TagToText(send->tag) + ": a pair's receives must be posted in the order of its sends";
      } else if (send->tensor.sizes() != recv->tensor.sizes() || send->tensor.dtype() != recv->tensor.dtype()) {
        recv->error = send->error = "rank " + std::to_string(recv->rank) + " posted a " + c10::str(recv->tensor.sizes()) +
                                    " " + std::string(recv->tensor.dtype().name()) + " buffer for the " +
                                    TagToText(recv->tag) + " but rank " + std::to_string(send->rank) + " sent " +
                                    c10::str(send->tensor.sizes()) + " " + std::string(send->tensor.dtype().name());
      } else {
        recv->tensor.copy_(send->tensor);
      }
      send->tensor = torch::Tensor();
      Complete(send);
      Complete(recv);
      mine.erase(a);
      theirs.erase(b);
      changed_.notify_all();
      progressed = true;
      break;
    }
  }
}

bool NcclHub::Done(const std::shared_ptr<Op>& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  return op->done;
}

void NcclHub::CheckDeadlock() {
  if (!abort_reason_.empty()) return;
  for (int r = 0; r < size_; ++r) {
    if (!left_[static_cast<size_t>(r)] && waiting_[static_cast<size_t>(r)] == nullptr) return;
  }
  std::string why = std::string("would deadlock on NCCL (") +
                    (queues_ == NcclQueues::kSharedByPair ? "one queue per pair of ranks" : "one queue per pair and direction") +
                    "): every rank waits and none can move";
  for (int r = 0; r < size_; ++r) {
    if (left_[static_cast<size_t>(r)]) continue;
    why += "\n  rank " + std::to_string(r) + " waits";
    for (const auto& [key, queue] : queue_) {
      if (std::get<0>(key) != r || queue.empty()) continue;
      why += "; its queue " + std::string(queues_ == NcclQueues::kSharedByPair ? "with" : (std::get<2>(key) == 0 ? "to" : "from")) +
             " rank " + std::to_string(std::get<1>(key)) + " starts with the " + Describe(*queue.front());
    }
    for (const auto& [key, queue] : queue_) {
      for (const auto& op : queue) {
        if (op.get() == waiting_[static_cast<size_t>(r)]) why += "; it waits for the " + Describe(*op);
      }
    }
  }
  abort_reason_ = why;
  changed_.notify_all();
}

void NcclHub::Wait(int rank, const std::shared_ptr<Op>& op) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!op->done) {
    waiting_[static_cast<size_t>(rank)] = op.get();
    CheckDeadlock();
    const bool finished =
        changed_.wait_for(lock, timeout_, [&] { return op->done || !abort_reason_.empty(); });
    waiting_[static_cast<size_t>(rank)] = nullptr;
    if (!op->done) {
      ThrowIfAborted();
      if (!finished) {
        throw std::runtime_error("rank " + std::to_string(rank) + " waited " + std::to_string(timeout_.count()) +
                                 " ms for its " + Describe(*op));
      }
    }
  }
  if (!op->error.empty()) throw std::runtime_error(op->error);
}

torch::Tensor NcclHub::Reduce(int rank, const std::vector<int>& group, const torch::Tensor& contribution) {
  UnchargedAllocations wire;  // the running sum and the copies handed back are the wire's
  std::unique_lock<std::mutex> lock(mutex_);
  ThrowIfAborted();
  Reduction& r = reductions_[group];
  const int generation = r.generation;
  r.sum = r.arrived == 0 ? contribution.detach().clone() : r.sum + contribution.detach();
  if (++r.arrived == static_cast<int>(group.size())) {
    r.result = r.sum;
    r.arrived = 0;
    ++r.generation;
    for (int w : r.waiters) waiting_[static_cast<size_t>(w)] = nullptr;
    r.waiters.clear();
    changed_.notify_all();
    return r.result.clone();
  }
  r.waiters.push_back(rank);
  waiting_[static_cast<size_t>(rank)] = &r;
  CheckDeadlock();
  const bool done =
      changed_.wait_for(lock, timeout_, [&] { return r.generation != generation || !abort_reason_.empty(); });
  if (r.generation == generation) {
    waiting_[static_cast<size_t>(rank)] = nullptr;
    ThrowIfAborted();
    if (!done) throw std::runtime_error("a group sum waited " + std::to_string(timeout_.count()) + " ms for ranks that never came");
  }
  return r.result.clone();
}

void NcclHub::Leave(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  left_[static_cast<size_t>(rank)] = true;
  bool anyone = false;
  for (int r = 0; r < size_; ++r) anyone = anyone || !left_[static_cast<size_t>(r)];
  if (anyone) CheckDeadlock();
}

void NcclHub::Abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (abort_reason_.empty()) abort_reason_ = reason;
    changed_.notify_all();
  }
  records_->Abort(reason);
}

std::unique_ptr<Communicator> MakeNcclEmulation(std::shared_ptr<NcclHub> hub, int rank) {
  return std::make_unique<EmulatedCommunicator>(std::move(hub), rank);
}

}  // namespace gpipe::executor
