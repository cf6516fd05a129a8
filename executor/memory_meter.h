// How much memory a rank holds. On GPU: the CUDA caching allocator's allocated bytes (current and
// peak), as torch.cuda.max_memory_allocated reports them. On CPU there is no such allocator, so
// the meter installs one: a counting wrapper around c10's CPU allocator that charges every tensor
// allocation to the meter of the thread that made it (ranks that are threads in tests are apart)
// and credits it back when the storage is freed, whichever thread frees it. It counts tensor
// storage (weights, gradients, optimizer state, activations kept for backward, message buffers),
// the same things the simulator's memory model counts; not the library's own scratch or heap.
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
  /// The peak restarts from the current value.
  void ResetPeak();
  /// One sentence: what the figures count.
  std::string Describe() const;

 private:
  torch::Device device_;
  MemoryCounter* counter_ = nullptr;
};

}  // namespace gpipe::executor
