#include "executor/action_clock.h"

#include <stdexcept>
#include <thread>

#ifdef GPIPE_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace gpipe::executor {

#ifdef GPIPE_WITH_CUDA
// Events are kept across steps (creating one costs more than recording it).
struct ActionClock::Device {
  at::cuda::CUDAEvent start{cudaEventDefault};
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> marks;
  std::vector<double> ms;
  size_t used = 0;
};
#else
struct ActionClock::Device {};
#endif

ActionClock::ActionClock(const torch::Device& device, std::chrono::milliseconds deadline)
    : device_(device), deadline_(deadline) {
#ifdef GPIPE_WITH_CUDA
  if (device.is_cuda()) cuda_ = std::make_unique<Device>();
#endif
  if (device.is_cuda() && cuda_ == nullptr) throw std::logic_error("this build has no CUDA: cannot time actions on " + device.str());
}

ActionClock::~ActionClock() = default;

std::string ActionClock::name() const { return cuda_ != nullptr ? "cuda-events" : "host"; }

void ActionClock::BeginStep() {
  host_ms_.clear();
  start_ = std::chrono::steady_clock::now();
#ifdef GPIPE_WITH_CUDA
  if (cuda_ != nullptr) {
    cuda_->used = 0;
    cuda_->ms.clear();
    cuda_->start.record();
  }
#endif
}

int ActionClock::Mark() {
#ifdef GPIPE_WITH_CUDA
  if (cuda_ != nullptr) {
    if (cuda_->used == cuda_->marks.size()) cuda_->marks.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    cuda_->marks[cuda_->used]->record();
    return static_cast<int>(cuda_->used++);
  }
#endif
  host_ms_.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count());
  return static_cast<int>(host_ms_.size()) - 1;
}

double ActionClock::EndStep() {
#ifdef GPIPE_WITH_CUDA
  if (cuda_ != nullptr) {
    const int end = Mark();
    // The host polls only here, once per step, when it has nothing left to queue.
    const auto since = std::chrono::steady_clock::now();
    while (!cuda_->marks[static_cast<size_t>(end)]->query()) {
      if (deadline_.count() > 0 && std::chrono::steady_clock::now() - since > deadline_) {
        throw std::runtime_error("the GPU did not finish the step within " + std::to_string(deadline_.count() / 1000) +
                                 " s of its last queued work: a stream waits for a message that never came "
                                 "(is a peer rank stuck or dead?)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    c10::cuda::device_synchronize();
    for (size_t i = 0; i < cuda_->used; ++i) cuda_->ms.push_back(cuda_->start.elapsed_time(*cuda_->marks[i]));
    return cuda_->ms[static_cast<size_t>(end)];
  }
#endif
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
}

double ActionClock::At(int mark) const {
#ifdef GPIPE_WITH_CUDA
  if (cuda_ != nullptr) return cuda_->ms.at(static_cast<size_t>(mark));
#endif
  return host_ms_.at(static_cast<size_t>(mark));
}

}  // namespace gpipe::executor
