#include "compare/probe_rounds.h"

#include <gtest/gtest.h>

namespace gpipe {
namespace {

// Round r of a machine whose speed in that round is speed[r]: every count's figure is its true
// factor times that speed.
std::vector<std::vector<ProbeFigures>> Rounds(const std::vector<double>& speed, const std::vector<double>& factor) {
  std::vector<std::vector<ProbeFigures>> rounds;
  for (double s : speed) {
    std::vector<ProbeFigures> round;
    for (size_t n = 0; n < factor.size(); ++n) {
      round.push_back({s * factor[n], 0.1 * static_cast<double>(n + 1), n == 0 ? 0.0 : s * 0.3});
    }
    rounds.push_back(round);
  }
  return rounds;
}

TEST(ProbeRounds, DriftBetweenRoundsCancels) {
  // The machine ran at 0.69x, 1.33x and 0.92x of the profile's speed in three rounds (the spread
  // seen across three profiles of the tiny GPT); two ranks are 1.3x one, four 2.2x.
  const Expected<ProbeFactors> factors = CombineProbeRounds(Rounds({0.69, 1.33, 0.92}, {1.0, 1.3, 2.2}), {0.96, 0.02});
  ASSERT_TRUE(factors.ok()) << factors.status().message();
  ASSERT_EQ(factors->compute_scale.size(), 3u);
  EXPECT_DOUBLE_EQ(factors->compute_scale[0].median, 0.96);
  EXPECT_DOUBLE_EQ(factors->compute_scale[0].spread, 0.02);
  EXPECT_NEAR(factors->compute_scale[1].median, 0.96 * 1.3, 1e-12);
  EXPECT_NEAR(factors->compute_scale[2].median, 0.96 * 2.2, 1e-12);
  EXPECT_NEAR(factors->compute_scale[2].spread, 0.0, 1e-12);
  EXPECT_NEAR(factors->action_gap_ms[1].median, 0.2, 1e-12);
  // Sends are timed, not scaled: the median over the rounds (one rank has none).
  EXPECT_EQ(factors->send_ms[0].median, 0.0);
  EXPECT_NEAR(factors->send_ms[2].median, 0.92 * 0.3, 1e-12);
}

TEST(ProbeRounds, ASlowRunWithinARoundIsOutvoted) {
  // Round 2's two-rank run hit a slow spell (1.8x instead of 1.3x): the median keeps 1.3.
  auto rounds = Rounds({1.0, 1.0, 1.0}, {1.0, 1.3});
  rounds[1][1].scale = 1.8;
  const Expected<ProbeFactors> factors = CombineProbeRounds(rounds, {1.0, 0.0});
  ASSERT_TRUE(factors.ok());
  EXPECT_DOUBLE_EQ(factors->compute_scale[1].median, 1.3);
  EXPECT_GT(factors->compute_scale[1].spread, 0.0);
}

TEST(ProbeRounds, RefusesMissingCountsAndNonPositiveFactors) {
  auto rounds = Rounds({1.0, 1.0}, {1.0, 1.3});
  rounds[1].pop_back();
  Expected<ProbeFactors> factors = CombineProbeRounds(rounds, {1.0, 0.0});
  ASSERT_FALSE(factors.ok());
  EXPECT_NE(factors.status().message().find("round 2 measured 1 counts"), std::string::npos) << factors.status().message();
  rounds = Rounds({1.0}, {1.0, 0.0});
  factors = CombineProbeRounds(rounds, {1.0, 0.0});
  ASSERT_FALSE(factors.ok());
  EXPECT_NE(factors.status().message().find("round 1, 2 rank(s)"), std::string::npos) << factors.status().message();
  EXPECT_FALSE(CombineProbeRounds({}, {1.0, 0.0}).ok());
}

}  // namespace
}  // namespace gpipe
