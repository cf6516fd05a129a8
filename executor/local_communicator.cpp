#include "executor/local_communicator.h"

#include <stdexcept>

#include "executor/memory_meter.h"

namespace gpipe::executor {
namespace {

class LocalWork final : public PendingWork {
 public:
  // A receive: Wait() takes the message and copies it into `into`.
  // A send (into undefined) is done at once; a receive's Wait() copies the message into `into`.
  LocalWork(std::shared_ptr<LocalHub> hub, int from, int to, int tag, torch::Tensor into)
      : hub_(std::move(hub)), from_(from), to_(to), tag_(tag), into_(std::move(into)) {}
  void Wait() override {
    if (!into_.defined() || done_) return;
    torch::Tensor message = hub_->Take(from_, to_, tag_);
    if (message.sizes() != into_.sizes() || message.dtype() != into_.dtype()) {
      throw std::runtime_error("rank " + std::to_string(to_) + " expected a message of shape " +
                               c10::str(into_.sizes()) + " from rank " + std::to_string(from_) + ", got " +
                               c10::str(message.sizes()));
    }
    into_.copy_(message);
    done_ = true;
  }
  bool Done() override { return !into_.defined() || done_ || hub_->Ready(from_, to_, tag_); }

 private:
  std::shared_ptr<LocalHub> hub_;
  int from_, to_, tag_;
  torch::Tensor into_;
  bool done_ = false;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  std::string backend() const override { return "in-process"; }

  std::unique_ptr<PendingWork> Send(const torch::Tensor& tensor, int peer, int tag) override {
    torch::Tensor message;
    {
      UnchargedAllocations wire;  // the mailbox's copy is the wire's, not this rank's
      message = tensor.detach().clone();
    }
    hub_->Post(rank_, peer, tag, std::move(message));
    return std::make_unique<LocalWork>(hub_, rank_, peer, tag, torch::Tensor());
  }
  std::unique_ptr<PendingWork> Recv(const torch::Tensor& into, int peer, int tag) override {
    return std::make_unique<LocalWork>(hub_, peer, rank_, tag, into);
  }
  void AllReduceSum(torch::Tensor& tensor, const std::vector<int>& group) override {
    tensor.copy_(hub_->Reduce(group, tensor));
  }
  void Barrier() override {
    std::vector<int> all(static_cast<size_t>(hub_->size()));
    for (int i = 0; i < hub_->size(); ++i) all[static_cast<size_t>(i)] = i;
    hub_->Reduce(all, torch::zeros({1}));
  }
  std::vector<std::string> GatherToRankZero(const std::string& mine) override {
    hub_->PostString(rank_, mine);
    std::vector<std::string> all;
    if (rank_ != 0) return all;
    for (int r = 0; r < hub_->size(); ++r) all.push_back(hub_->TakeString(r));
    return all;
  }

 private:
  std::shared_ptr<LocalHub> hub_;
  int rank_;
};

}  // namespace

void LocalHub::Abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (abort_reason_.empty()) abort_reason_ = reason;
  changed_.notify_all();
}

void LocalHub::ThrowIfAborted() const {
  if (!abort_reason_.empty()) throw std::runtime_error("stopped: " + abort_reason_);
}

void LocalHub::Post(int from, int to, int tag, torch::Tensor tensor) {
  std::lock_guard<std::mutex> lock(mutex_);
  mailboxes_[{from, to, tag}].push_back(std::move(tensor));
  changed_.notify_all();
}

bool LocalHub::Ready(int from, int to, int tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = mailboxes_.find({from, to, tag});
  return it != mailboxes_.end() && !it->second.empty();
}

torch::Tensor LocalHub::Take(int from, int to, int tag) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto& box = mailboxes_[{from, to, tag}];
  const bool arrived = changed_.wait_for(lock, timeout_, [&] { return !box.empty() || !abort_reason_.empty(); });
  ThrowIfAborted();
  if (!arrived) {
    throw std::runtime_error("rank " + std::to_string(to) + " waited " + std::to_string(timeout_.count()) +
                             " ms for a message from rank " + std::to_string(from) + " (tag " +
                             std::to_string(tag) + ") that never came");
  }
  torch::Tensor message = std::move(box.front());
  box.pop_front();
  return message;
}

void LocalHub::PostString(int from, std::string text) {
  std::lock_guard<std::mutex> lock(mutex_);
  strings_[from].push_back(std::move(text));
  changed_.notify_all();
}

std::string LocalHub::TakeString(int from) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto& box = strings_[from];
  const bool arrived = changed_.wait_for(lock, timeout_, [&] { return !box.empty() || !abort_reason_.empty(); });
  ThrowIfAborted();
  if (!arrived) throw std::runtime_error("rank 0 waited for rank " + std::to_string(from) + "'s record in vain");
  std::string text = std::move(box.front());
  box.pop_front();
  return text;
}

torch::Tensor LocalHub::Reduce(const std::vector<int>& group, const torch::Tensor& contribution) {
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
    changed_.notify_all();
    return r.result.clone();
  }
  const bool done =
      changed_.wait_for(lock, timeout_, [&] { return r.generation != generation || !abort_reason_.empty(); });
  ThrowIfAborted();
  if (!done) {
    throw std::runtime_error("a group sum waited " + std::to_string(timeout_.count()) +
                             " ms for ranks that never came");
  }
  return r.result.clone();
}

std::unique_ptr<Communicator> MakeLocalCommunicator(std::shared_ptr<LocalHub> hub, int rank) {
  return std::make_unique<LocalCommunicator>(std::move(hub), rank);
}

}  // namespace gpipe::executor
