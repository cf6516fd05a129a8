#include "executor/precision.h"

#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/passes/autocast.h>

namespace gpipe::executor {

std::optional<c10::ScalarType> ComputeType(const std::string& precision) {
  if (precision == "bf16") return c10::ScalarType::BFloat16;
  if (precision == "fp16") return c10::ScalarType::Half;
  return std::nullopt;
}

AutocastScope::AutocastScope(std::optional<c10::ScalarType> type, const c10::Device& device)
    : device_type_(device.type()) {
  if (!type) return;
  // Process-wide and never turned back on: TorchScript's pass would cast every weight afresh.
  static const bool script_pass_off = [] {
    torch::jit::setAutocastMode(false);
    return true;
  }();
  (void)script_pass_off;
  active_ = true;
  was_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  was_type_ = at::autocast::get_autocast_dtype(device_type_);
  was_caching_ = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::set_autocast_dtype(device_type_, *type);
  at::autocast::set_autocast_cache_enabled(c10::GradMode::is_enabled());
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  at::autocast::set_autocast_enabled(device_type_, was_enabled_);
  at::autocast::set_autocast_dtype(device_type_, was_type_);
  at::autocast::set_autocast_cache_enabled(was_caching_);
}

void ClearWeightCopies() { at::autocast::clear_cache(); }

bool LossScaler::Update(bool finite) {
  if (!dynamic_) return true;
  if (!finite) {
    scale_ *= 0.5;
    finite_in_a_row_ = 0;
    return false;
  }
  if (++finite_in_a_row_ >= growth_interval_) {
    scale_ *= 2.0;
    finite_in_a_row_ = 0;
  }
  return true;
}

}  // namespace gpipe::executor
