#include "core/units.h"

#include <gtest/gtest.h>

namespace gpipe {
namespace {

TEST(ParseBytes, AcceptsBinaryAndDecimalSuffixes) {
  const std::pair<const char*, int64_t> cases[] = {
      {"80GiB", 80LL << 30}, {"80GB", 80'000'000'000LL}, {"512MiB", 512LL << 20},
      {"1.5KiB", 1536},      {"123", 123},                {"1e9", 1'000'000'000LL},
      {"2 TiB", 2LL << 40},  {"64kb", 64'000},            {"0", 0},
  };
  for (const auto& [text, bytes] : cases) {
    Expected<int64_t> parsed = ParseBytes(text);
    ASSERT_TRUE(parsed.ok()) << text;
    EXPECT_EQ(*parsed, bytes) << text;
  }
}

TEST(ParseBytes, RejectsWithAHint) {
  for (const char* bad : {"", "GiB", "80 gigs", "-1GiB", "80GiBs", "nan", "1e30TB"}) {
    Expected<int64_t> parsed = ParseBytes(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("e.g. 80GiB"), std::string::npos);
  }
}

TEST(FormatBytes, PicksAReadableUnit) {
  EXPECT_EQ(FormatBytes(12), "12 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(80.0 * (1LL << 30)), "80.00 GiB");
}

TEST(FormatMs, PicksAReadableUnit) {
  EXPECT_EQ(FormatMs(1.2344), "1.234 ms");
  EXPECT_EQ(FormatMs(123.45), "123.5 ms");
  EXPECT_EQ(FormatMs(12345.0), "12.35 s");
}

}  // namespace
}  // namespace gpipe
