// Profiler settings for the executor's tests (which link LibTorch; tests/executor/test_plans.h
// also serves tests that do not).
#pragma once

#include <cstdint>

#include "executor/profiler.h"

namespace gpipe::executor::testing {

/// Profiler settings for one micro-batch size and no warm-up round: tests read its bytes, which
/// do not depend on warming up, and its times only for their consistency.
inline ProfileSettings OneSizeSettings(int64_t microbatch_size, int repeats) {
  ProfileSettings settings;
  settings.microbatch_sizes = {microbatch_size};
  settings.warmup = 0;
  settings.repeats = repeats;
  return settings;
}

}  // namespace gpipe::executor::testing
