// One input of one file format, loaded as `gpipe-plan` loads a file, and checked the way the fuzz
// targets and the fuzz regression test check it: the loader either accepts the bytes, and then its
// writer's output loads back to the same file, or rejects them with one line that starts with the
// file's name. Shared by fuzz/*_fuzzer.cpp (libFuzzer) and tests/core/fuzz_regressions_test.cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace gpipe::fuzz {

enum class InputFormat { kProfile, kCluster, kPlan, kModel, kRunRecord };

/// "profile", "cluster", "plan", "model", "run-record": the folder names of the regression inputs.
const char* FormatName(InputFormat format);
std::optional<InputFormat> FormatFromName(std::string_view name);

/// What a loader made of some bytes.
struct LoadOutcome {
  /// The loader's verdict on the input.
  Status status;
  /// Empty when the loader behaved; otherwise what it did wrong (a message on several lines, one
  /// not naming the file, a written file that does not load back or loads back different).
  std::string violation;
};

/// Loads `bytes` as a file named "input.json" of `format`. Paths inside a plan or a model resolve
/// against `base_dir`.
LoadOutcome LoadInput(InputFormat format, std::string_view bytes, const std::string& base_dir);

}  // namespace gpipe::fuzz
