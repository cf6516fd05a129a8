// Mixed precision as the executor runs a 16-bit plan (bf16 or fp16), the way PyTorch's automatic
// mixed precision does: the weights, their gradients and the optimizer's state stay fp32 (the
// weights are the master copy), and the layers run under autocast, which computes matrix products
// and convolutions in the 16-bit type and what needs the range (softmax, losses) in fp32. The
// loss is taken in fp32. Gradients are accumulated over micro-batches, summed over replicas and
// clipped in fp32. What crosses a stage boundary is what the layer returned: 16-bit activations and
// their 16-bit gradients. The memory model counts the same (core/plan.h, StaticBytesPerParamByte).
//
// fp16's narrow range needs a loss scale (LossScaler): the loss is multiplied by it before the
// backward, and the gradients divided by it before the update; a step whose gradients hold an inf
// or a NaN on any rank is skipped on every rank and the scale halved.
#pragma once

#include <optional>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace gpipe::executor {

/// The type the layers compute in under `precision` ("bf16", "fp16"); none for "fp32".
std::optional<c10::ScalarType> ComputeType(const std::string& precision);

/// While alive, what runs on this thread computes under autocast to `type` on `device`'s kind
/// (nothing when `type` is none). Under grad mode autocast caches the 16-bit copy it makes of each
/// weight, so that every micro-batch of a step shares one (from the step's first forward to
/// ClearWeightCopies); under no_grad it caches nothing, since a copy made there has no path back to
/// its weight and a later forward that took it from the cache would leave the weight without a
/// gradient. TorchScript layers take the same path as built-in ones (the dispatcher's autocast, not
/// TorchScript's own pass, which would cast without the cache).
class AutocastScope {
 public:
  AutocastScope(std::optional<c10::ScalarType> type, const c10::Device& device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_type_;
  bool was_enabled_ = false;
  c10::ScalarType was_type_ = c10::ScalarType::Float;
  bool was_caching_ = true;
};

/// Drops this thread's cached 16-bit weight copies: before a step (the weights were updated since
/// they were made) and after it (so that they are not held between steps).
void ClearWeightCopies();

/// fp16's dynamic loss scale, as torch.amp.GradScaler keeps it: starts at 2^16, halves on a step
/// whose gradients are not finite (the step is skipped), doubles after `growth_interval` finite
/// steps in a row. Every rank keeps one and sees the same global verdict, so they stay equal.
class LossScaler {
 public:
  /// A scaler that is always 1 and never skips (fp32 and bf16).
  LossScaler() = default;
  static LossScaler ForFp16(int growth_interval = 2000) {
    LossScaler s;
    s.scale_ = 65536.0;
    s.dynamic_ = true;
    s.growth_interval_ = growth_interval;
    return s;
  }
  bool dynamic() const { return dynamic_; }
  double scale() const { return scale_; }
  /// After a step's backward, given whether its gradients were finite everywhere (the global
  /// verdict): updates the scale for the next step and says whether to apply this step's update
  /// (always, without a dynamic scale).
  bool Update(bool finite);

 private:
  double scale_ = 1.0;
  bool dynamic_ = false;
  int growth_interval_ = 2000;
  int finite_in_a_row_ = 0;
};

}  // namespace gpipe::executor
