// How much memory a rank holds. On GPU: the CUDA caching allocator's allocated bytes (current and
// peak), as torch.cuda.max_memory_allocated reports them. On CPU there is no such allocator, so
// the meter installs one: a counting wrapper around c10's CPU allocator that charges every tensor
// allocation to the meter of the thread that made it (ranks that are threads in tests are apart)
// and credits it back when the storage is freed, whichever thread frees it. It counts tensor
// storage (weights, gradients, optimizer state, activations kept for backward, message buffers),
// the same things the simulator's memory model counts; not the library's own scratch or heap.
// Reserved bytes (CUDA only): what the caching allocator holds from the driver, i.e. allocated
// bytes plus cached free blocks and fragmentation (torch.cuda.memory_reserved); the figure that
// must fit in the GPU. CPU has no reservation (freed storage goes straight back to the heap), so
// there it reads 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <torch/torch.h>

namespace gpipe::executor {

struct MemoryCounter;

class MemoryMeter {
 public:
  /// Starts charging this thread's CPU allocations to a new counter (CPU), or reads the CUDA
  /// allocator of `device`.
  explicit MemoryMeter(const torch::Device& device);
  ~MemoryMeter();
  MemoryMeter(const MemoryMeter&) = delete;
  MemoryMeter& operator=(const MemoryMeter&) = delete;

  int64_t CurrentBytes() const;
  int64_t PeakBytes() const;
  /// CUDA: bytes the caching allocator has reserved from the driver now, and their peak
  /// (torch.cuda.memory_reserved / max_memory_reserved). CPU: 0, there is no reservation.
  int64_t ReservedBytes() const;
  int64_t PeakReservedBytes() const;
  /// The peak restarts from the current value (on CUDA, the reserved peak too).
  void ResetPeak();
  /// One sentence: what the figures count.
  std::string Describe() const;

 private:
  torch::Device device_;
  MemoryCounter* counter_ = nullptr;
};

/// While one lives, this thread's CPU allocations are charged to no rank's meter. For an
/// in-process wire's own copies (a message waiting in a mailbox, a group sum): on a real wire they
/// sit in the transport's buffers, in neither rank's tensors, and charging them to the sender
/// would make its peak depend on when the receiver takes them.
class UnchargedAllocations {
 public:
  UnchargedAllocations();
  ~UnchargedAllocations();
  UnchargedAllocations(const UnchargedAllocations&) = delete;
  UnchargedAllocations& operator=(const UnchargedAllocations&) = delete;

 private:
  MemoryCounter* saved_;
};

}  // namespace gpipe::executor
