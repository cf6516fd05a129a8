// Replays every input in tests/fuzz_regressions/FORMAT/ (inputs that once crashed a loader or made
// it misbehave under scripts/fuzz.sh) through the same check as the fuzz targets, in a normal build:
// each must load, or be rejected with one line that names the file. Runs under the sanitizers in
// build-asan/ too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fuzz/load_input.h"

namespace gpipe::fuzz {
namespace {

const std::filesystem::path kSource = GPIPE_SOURCE_DIR;

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TEST(FuzzRegressions, EveryKeptInputLoadsOrGetsOneLine) {
  int replayed = 0;
  for (const auto& folder : std::filesystem::directory_iterator(kSource / "tests/fuzz_regressions")) {
    const std::optional<InputFormat> format = FormatFromName(folder.path().filename().string());
    ASSERT_TRUE(format.has_value()) << folder.path() << " is not named after a format (profile, cluster, ...)";
    const std::string base_dir = (kSource / (*format == InputFormat::kModel ? "models" : "profiles/plans")).string();
    for (const auto& input : std::filesystem::directory_iterator(folder.path())) {
      const LoadOutcome outcome = LoadInput(*format, ReadFile(input.path()), base_dir);
      EXPECT_EQ(outcome.violation, "") << input.path();
      ++replayed;
    }
  }
  EXPECT_GE(replayed, 3);
}

}  // namespace
}  // namespace gpipe::fuzz
