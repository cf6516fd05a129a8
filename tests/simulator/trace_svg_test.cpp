// The pictures: the Chrome trace has a track per rank and per link and memory counters; the SVG
// draws every compute action with its tooltip.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "core/schedule/generators.h"
#include "core/schedule/lower.h"
#include "simulator/simulator.h"
#include "simulator/svg.h"
#include "simulator/trace.h"

namespace gpipe {
namespace {

Timeline SmallTimeline() {
  CostModel costs = UniformCostModel(3, 3, 1.0, 2.0);
  for (StageCost& stage : costs.stages) {
    stage.output_bytes = stage.input_bytes = 1e6;
    stage.activation_bytes = 100;
  }
  costs.stages[1].remat = true;
  costs.stages[1].remat_forward_ms = costs.stages[1].forward_ms;
  for (auto& row : costs.links) {
    for (Link& link : row) link = Link{1e9, 0.1};
  }
  Expected<Schedule> schedule = GenerateSchedule(ScheduleKind::k1F1B, 3, 3, 4);
  Expected<SimResult> result = Simulate(AddCommunication(*schedule), costs);
  EXPECT_TRUE(result.ok());
  return TimelineFromSim(*result, "test <&> title");
}

TEST(ChromeTrace, OneTrackPerRankAndLinkWithCounters) {
  const nlohmann::json trace = TimelineToChromeTrace(SmallTimeline());
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::set<std::string> threads;
  int compute = 0, recompute = 0, transfers = 0, counters = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "thread_name") threads.insert(e["args"]["name"].get<std::string>());
    if (ph == "X" && (e["cat"] == "forward" || e["cat"] == "backward")) ++compute;
    if (ph == "X" && e["name"] == "recompute") ++recompute;
    if (ph == "X" && e.contains("args") && e["args"].contains("bytes")) ++transfers;
    if (ph == "C") ++counters;
  }
  EXPECT_TRUE(threads.count("rank 0") && threads.count("rank 1") && threads.count("rank 2"));
  EXPECT_TRUE(threads.count("link 0->1") && threads.count("link 1->0"));
  EXPECT_EQ(compute, 3 * 4 * 2);
  EXPECT_EQ(recompute, 4);  // stage 1's four backwards
  EXPECT_EQ(transfers, 2 * 2 * 4);
  EXPECT_GT(counters, 3);
}

TEST(ChromeTrace, WritesAtomicallyAndReportsBadPaths) {
  const std::string path = testing::TempDir() + "/trace.json";
  ASSERT_TRUE(WriteChromeTrace(path, SmallTimeline()).ok());
  std::ifstream in(path);
  const nlohmann::json parsed = nlohmann::json::parse(in, nullptr, false);
  EXPECT_FALSE(parsed.is_discarded());
  EXPECT_TRUE(parsed.contains("traceEvents"));
  const Status bad = WriteChromeTrace("/nonexistent-dir/trace.json", SmallTimeline());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("/nonexistent-dir/trace.json"), std::string::npos) << bad.message();
}

TEST(Svg, DrawsEveryComputeActionWithATooltip) {
  const std::string svg = TimelineToSvg(SmallTimeline());
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("rank 2"), std::string::npos);
  EXPECT_NE(svg.find("test &lt;&amp;&gt; title"), std::string::npos);  // escaped
  EXPECT_NE(svg.find("1B3"), std::string::npos);
  size_t titles = 0;
  for (size_t at = svg.find("<title>"); at != std::string::npos; at = svg.find("<title>", at + 1)) ++titles;
  EXPECT_GE(titles, 3u * 4 * 2);
  EXPECT_EQ(TimelineToSvg(SmallTimeline()), svg);  // deterministic
}

}  // namespace
}  // namespace gpipe
