// How a model trains: the optimizer's settings, the learning-rate schedule and gradient clipping,
// the "training" section of a gpipe-model/1 file. The plan's optimizer picks the algorithm, since
// its state is what the memory model prices (sgd: none, momentum: one buffer, adam and adam-mixed:
// two moments); this section gives its settings:
//
//   "training": {"learning_rate": 6e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1,
//                "decay_1d": false, "momentum": 0.9, "clip_grad_norm": 1.0,
//                "schedule": {"warmup_steps": 100, "decay": "cosine", "decay_steps": 5000,
//                             "min_learning_rate": 6e-5}}
//
// adam and adam-mixed run AdamW (decoupled weight decay; with weight_decay 0 it is Adam); sgd and
// momentum run SGD, momentum with `momentum`. Weight decay skips one-dimensional parameters
// (biases, norms' scales and shifts) unless decay_1d is true. Clipping scales every gradient by
// min(1, clip / (norm + 1e-6)), norm the L2 norm over all parameters of the model (every stage,
// a tied parameter once), as torch.nn.utils.clip_grad_norm_ does on one process.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gpipe {

class ObjectReader;

enum class LrDecay { kConstant, kLinear, kCosine };
const char* LrDecayName(LrDecay decay);

/// Linear warm-up from learning_rate / warmup_steps to learning_rate over the first warmup_steps
/// steps, then `decay` to min_learning_rate at step decay_steps, and min_learning_rate after it.
struct LrSchedule {
  int64_t warmup_steps = 0;
  LrDecay decay = LrDecay::kConstant;
  /// The step at which the decay reaches min_learning_rate (counted from step 0, warm-up
  /// included); unused for kConstant.
  int64_t decay_steps = 0;
  double min_learning_rate = 0;
};

struct TrainingSpec {
  /// The peak learning rate (after warm-up).
  double learning_rate = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  /// Whether one-dimensional parameters (biases, norms) are decayed too.
  bool decay_1d = false;
  /// SGD's momentum for plans whose optimizer is "momentum".
  double momentum = 0.9;
  /// The largest global gradient norm; 0: no clipping.
  double clip_grad_norm = 0;
  LrSchedule schedule;
};

/// The learning rate of step `step` (0-based).
double LearningRateAt(const TrainingSpec& training, int64_t step);

/// Reads the "training" section of a model file (absent: defaults). `legacy_learning_rate`, the
/// model's top-level "learning_rate" when it has one, is the same setting in its older place;
/// giving both is an error.
TrainingSpec TrainingFromJson(ObjectReader& model, bool has_legacy_learning_rate, double legacy_learning_rate);
nlohmann::json TrainingToJson(const TrainingSpec& training);

}  // namespace gpipe
