// The saturated wake-up probe (executor/wakeup_probe.h): it times as many wake-ups as asked and its
// figures are ordered; too few samples is refused.
#include <gtest/gtest.h>

#include "executor/wakeup_probe.h"

namespace gpipe::executor {
namespace {

TEST(WakeupProbe, TimesTheWakeupsItWasAskedFor) {
  WakeupProbeSettings settings;
  settings.samples = 24;
  settings.interval_ms = 0.5;
  Expected<SaturatedWakeup> result = ProbeSaturatedWakeup(settings);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->samples, 24);
  EXPECT_GE(result->median_ms, 0.0);
  EXPECT_LE(result->median_ms, result->p90_ms);
  EXPECT_GE(result->mean_ms, 0.0);
  EXPECT_GE(result->spread_ms, 0.0);
  EXPECT_LT(result->p90_ms, 1000.0);  // a wake-up a second late is a broken probe, not a busy node
}

TEST(WakeupProbe, TooFewSamplesAreRefused) {
  WakeupProbeSettings settings;
  settings.samples = 3;
  Expected<SaturatedWakeup> result = ProbeSaturatedWakeup(settings);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(), "the wake-up probe needs at least 4 samples, not 3");
}

}  // namespace
}  // namespace gpipe::executor
