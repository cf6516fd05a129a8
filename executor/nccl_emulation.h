// An in-process wire with NCCL's point-to-point rules, so that a plan can be checked on the CPU
// before it runs on GPUs (`gpipe-plan run PLAN --in-process --wire nccl`, and the executor's
// equivalence tests). Ranks are threads sharing one NcclHub. As in ProcessGroupNCCL:
//   - the sends and receives a rank issues to one peer queue up in issue order, and a queue's
//     head completes only against the head of the peer's facing queue: with kSharedByPair one
//     queue per pair carries both directions (one process group); with kPerDirection there is
//     one per pair and direction (the executor's two process groups, core/schedule/wire.h);
//   - tags are ignored: the k-th send from a to b meets b's k-th receive from a; a tag that
//     differs is reported as the wrong message NCCL would deliver;
//   - a send completes only when its receive is matched, and the data is read then;
//   - a group call (Group) is matched as a whole: its operations join their queues together and
//     may complete in any order among themselves.
// Where NCCL would hang, every rank is woken with "would deadlock on NCCL" and what each rank
// waits for and the heads of its queues, instead of hanging: when every rank still in the job is
// waiting, nothing can move again. Waits block the host thread (NCCL's block the device stream),
// which makes the check stricter, never looser.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/schedule/wire.h"
#include "executor/communicator.h"
#include "executor/local_communicator.h"

namespace gpipe::executor {

class NcclHub : public std::enable_shared_from_this<NcclHub> {
 public:
  NcclHub(int size, NcclQueues queues, std::chrono::milliseconds timeout)
      : size_(size), queues_(queues), timeout_(timeout), waiting_(static_cast<size_t>(size), nullptr),
        left_(static_cast<size_t>(size), false), records_(std::make_shared<LocalHub>(size, timeout)) {}
  int size() const { return size_; }
  NcclQueues queues() const { return queues_; }

  struct Op;
  /// Queues a send (tensor read at match time) or a receive (into `tensor`) of rank `rank`.
  std::shared_ptr<Op> Post(int rank, int peer, bool send, int tag, const torch::Tensor& tensor);
  /// Queues several operations of `rank` as one group.
  std::vector<std::shared_ptr<Op>> PostGroup(int rank, const std::vector<std::tuple<int, bool, int, torch::Tensor>>& ops);
  void Wait(int rank, const std::shared_ptr<Op>& op);
  bool Done(const std::shared_ptr<Op>& op);
  /// Sums over `group` (a collective on the group's own communicator); each caller gets the sum.
  torch::Tensor Reduce(int rank, const std::vector<int>& group, const torch::Tensor& contribution);
  /// Where the ranks' records are gathered (host-side, as c10d's store is: no NCCL rules).
  std::shared_ptr<LocalHub> records() { return records_; }
  /// Rank `rank` has left the job (done or failed); a wait on it can then never end.
  void Leave(int rank);
  void Abort(const std::string& reason);

 private:
  using Key = std::tuple<int, int, int>;  // (rank, peer, lane)
  Key QueueOf(int rank, int peer, bool send) const;
  Key Facing(const Key& key) const;
  void Enqueue(int rank, int peer, bool send, int tag, const torch::Tensor& tensor, int group, std::shared_ptr<Op>* out);
  void Match(const Key& key);
  void Complete(const std::shared_ptr<Op>& op);
  /// Called with the lock held when a rank starts waiting or leaves.
  void CheckDeadlock();
  std::string Describe(const Op& op) const;
  void ThrowIfAborted() const;

  const int size_;
  const NcclQueues queues_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<Key, std::deque<std::shared_ptr<Op>>> queue_;
  std::vector<const void*> waiting_;  // per rank: the op or reduction it waits on, else null
  std::vector<bool> left_;
  int next_group_ = 1;
  struct Reduction {
    torch::Tensor sum;
    int arrived = 0;
    int generation = 0;
    torch::Tensor result;
    std::vector<int> waiters;
  };
  std::map<std::vector<int>, Reduction> reductions_;
  std::shared_ptr<LocalHub> records_;
  std::string abort_reason_;
};

/// Rank `rank`'s end of the hub.
std::unique_ptr<Communicator> MakeNcclEmulation(std::shared_ptr<NcclHub> hub, int rank);

}  // namespace gpipe::executor
