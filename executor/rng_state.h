// The device's default generator, whose state a remat stage saves at its forward and replays in
// the recompute, so that dropout draws the same masks both times; and what that saved state
// costs in the memory the executor meters on the device (Profile::rng_state_bytes).
#pragma once

#include <mutex>

#include <torch/torch.h>

namespace gpipe::executor {

inline at::Generator GeneratorOf(const torch::Device& device) { return at::globalContext().defaultGenerator(device); }

inline torch::Tensor SaveRng(const torch::Device& device) {
  at::Generator gen = GeneratorOf(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

inline void RestoreRng(const torch::Device& device, const torch::Tensor& state) {
  at::Generator gen = GeneratorOf(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

/// Bytes of one saved state on `device` itself: a CPU generator's state is a CPU tensor (5,056
/// bytes), a CUDA generator's a host tensor, not in the device's memory (0).
inline int64_t RngStateBytesOn(const torch::Device& device) {
  const torch::Tensor state = SaveRng(device);
  return state.device() == device ? static_cast<int64_t>(state.nbytes()) : 0;
}

}  // namespace gpipe::executor
