// An in-process Communicator: ranks are threads sharing one LocalHub. Sends copy the tensor into
// a mailbox keyed by (from, to, tag), charged to no rank's memory meter (a real wire's buffers are in
// neither rank's tensors); receives wait on it. Used by the tests that run every
// schedule against a single-process reference without spawning processes. Abort() wakes every
// waiter with the reason, as a dead peer would on a real wire.
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

#include "executor/communicator.h"

namespace gpipe::executor {

class LocalHub {
 public:
  LocalHub(int size, std::chrono::milliseconds timeout) : size_(size), timeout_(timeout) {}
  int size() const { return size_; }
  /// Every blocked and later wait throws with `reason`.
  void Abort(const std::string& reason);

  void Post(int from, int to, int tag, torch::Tensor tensor);
  /// Waits for the next message from `from` to `to` with `tag`; throws on timeout or abort.
  torch::Tensor Take(int from, int to, int tag);
  /// True when a message is waiting.
  bool Ready(int from, int to, int tag);
  /// Sums over the group's members; each caller gets the sum.
  torch::Tensor Reduce(const std::vector<int>& group, const torch::Tensor& contribution);
  /// Stores rank `from`'s string of a gather; rank 0 then takes them in order.
  void PostString(int from, std::string text);
  std::string TakeString(int from);

 private:
  void ThrowIfAborted() const;

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::tuple<int, int, int>, std::deque<torch::Tensor>> mailboxes_;
  struct Reduction {
    torch::Tensor sum;
    int arrived = 0;
    int taken = 0;
    int generation = 0;
    torch::Tensor result;
  };
  std::map<std::vector<int>, Reduction> reductions_;
  std::map<int, std::deque<std::string>> strings_;
  std::string abort_reason_;
};

std::unique_ptr<Communicator> MakeLocalCommunicator(std::shared_ptr<LocalHub> hub, int rank);

}  // namespace gpipe::executor
