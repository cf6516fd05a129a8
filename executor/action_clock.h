// When actions run, on the clock of the device they run on. On CPU that is the host's steady
// clock, read when an action starts and ends. On CUDA kernels run after the host queues them, so
// a host clock would time the queueing: there each mark is an event recorded on the current
// stream, read once the step is over and the device synchronised, so an action's time is the
// stream's, waits on the wire included (a receive makes the stream wait, not the host).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace gpipe::executor {

class ActionClock {
 public:
  /// `deadline`: how long EndStep waits for the device before it throws (CUDA; 0: forever).
  explicit ActionClock(const torch::Device& device, std::chrono::milliseconds deadline = std::chrono::milliseconds(0));
  ~ActionClock();
  ActionClock(const ActionClock&) = delete;
  ActionClock& operator=(const ActionClock&) = delete;

  /// "host" (steady clock) or "cuda-events" (events on the compute stream).
  std::string name() const;
  /// Starts a step: marks are measured from here.
  void BeginStep();
  /// A point in the step; its time is known after EndStep.
  int Mark();
  /// Ends the step (on CUDA: waits for the device) and returns its length in ms. Throws when the
  /// device has not finished the step within the deadline (a stream waits for a message that
  /// never comes), so that the error is ours, not a hang or NCCL's watchdog.
  double EndStep();
  /// The time of `mark` in ms from BeginStep. REQUIRES: EndStep was called after the mark.
  double At(int mark) const;

 private:
  struct Device;
  torch::Device device_;
  std::chrono::milliseconds deadline_;
  std::chrono::steady_clock::time_point start_;
  std::vector<double> host_ms_;
  std::unique_ptr<Device> cuda_;  // null on CPU
};

}  // namespace gpipe::executor
