// libFuzzer target for one file loader, chosen at build time by GPIPE_FUZZ_FORMAT (profile,
// cluster, plan, model or run record; fuzz/CMakeLists.txt builds one binary each). Any input must
// either load, and then survive its writer and load back the same, or be rejected with one line
// naming the file; anything else aborts, and so do crashes, hangs and sanitizer reports.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "fuzz/load_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const gpipe::fuzz::LoadOutcome outcome =
      gpipe::fuzz::LoadInput(gpipe::fuzz::InputFormat::GPIPE_FUZZ_FORMAT, bytes, GPIPE_FUZZ_BASE_DIR);
  if (!outcome.violation.empty()) {
    std::fprintf(stderr, "loader misbehaved: %s\n", outcome.violation.c_str());
    std::abort();
  }
  return 0;
}
