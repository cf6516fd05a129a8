// The wire between ranks, behind one narrow interface: point-to-point sends and receives that
// overlap compute, a sum over a group of ranks (data-parallel gradients), and a barrier.
// Implementations: c10d (Gloo on CPU, NCCL on GPUs; c10d_communicator.cpp), an in-process hub
// for tests where ranks are threads (local_communicator.cpp, tags matched exactly) and an
// in-process wire with NCCL's rules (nccl_emulation.cpp). The executor posts a pair's receives in
// the order of its sends (core/schedule/wire.h), which is what NCCL, ignoring tags, needs; tags
// (core/schedule/wire.h's MessageTag) are for Gloo and for errors. Every wait is bounded: a peer
// that died or stopped answering turns into an error naming it, never a hang.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace gpipe::executor {

/// A started send or receive.
class PendingWork {
 public:
  virtual ~PendingWork() = default;
  /// Returns once the data may be used: on CPU the host blocks until done; on NCCL the current
  /// CUDA stream waits for it (the host goes on queueing work). Throws std::runtime_error naming
  /// the peer on failure or timeout.
  virtual void Wait() = 0;
  /// True once done (never blocks).
  virtual bool Done() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "gloo", "nccl", "in-process" or "nccl-emulated".
  virtual std::string backend() const = 0;

  /// Starts sending `tensor` to `peer`; the tensor must stay unchanged until the work is done.
  /// Messages from one rank to another arrive in the order sent; NCCL ignores `tag`.
  virtual std::unique_ptr<PendingWork> Send(const torch::Tensor& tensor, int peer, int tag) = 0;
  /// Starts receiving into `into` (allocated with the message's shape and dtype) from `peer`.
  virtual std::unique_ptr<PendingWork> Recv(const torch::Tensor& into, int peer, int tag) = 0;
  /// Sums `tensor` in place over `group` (sorted global ranks, this one among them).
  virtual void AllReduceSum(torch::Tensor& tensor, const std::vector<int>& group) = 0;
  /// The sharded optimizer's two collectives over `group` (as AllReduceSum's), this rank being
  /// member i (its place in `group`) of G. ReduceScatterSum: `input` (G x n elements, the same
  /// shape on every member) summed over the group, and of the sum, elements [i n, (i + 1) n) into
  /// `output` (n elements). AllGather: every member's `input` (n elements) into `output` (G x n),
  /// member j's at [j n, (j + 1) n). c10d runs the collectives themselves (Gloo and NCCL); these
  /// defaults make them of AllReduceSum (the in-process wires), with the same results.
  virtual void ReduceScatterSum(const torch::Tensor& input, torch::Tensor& output, const std::vector<int>& group);
  virtual void AllGather(const torch::Tensor& input, torch::Tensor& output, const std::vector<int>& group);
  /// Returns once every rank has called it.
  virtual void Barrier() = 0;
  /// Every rank passes a string; rank 0 gets all of them in rank order, the others nothing.
  virtual std::vector<std::string> GatherToRankZero(const std::string& mine) = 0;
};

}  // namespace gpipe::executor
