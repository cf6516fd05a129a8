// gpipe-plan plan, run in-process: the table, the JSON that simulate accepts, pins, infeasible
// budgets and bad flags.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "tests/cli/run_cli.h"

namespace gpipe::cli {
namespace {

const std::string kProfiles = std::string(GPIPE_SOURCE_DIR) + "/profiles/";


std::vector<std::string> Tiny(std::vector<std::string> more) {
  std::vector<std::string> args = {"plan", "--profile", kProfiles + "tiny-gpt-cpu.json", "--cluster",
                                   kProfiles + "clusters/cpu-2.json", "--global-batch", "64", "-q"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(PlanCommand, PrintsTheBestPlanAndAlternatives) {
  const Outcome o = Cli(Tiny({}));
  ASSERT_EQ(o.code, kExitOk) << o.err;
  for (const char* words : {"best plan:", "proven optimal", "step time", "bubble", "alternatives", "fits"}) {
    EXPECT_NE(o.out.find(words), std::string::npos) << words << "\n" << o.out;
  }
}

// A what-if with fewer devices than a measured cluster's link list names: the plan written must
// load again (its cluster loses the links to devices it no longer has).
TEST(PlanCommand, FewerDevicesDropTheirLinksSoThePlanLoads) {
  const std::string path = testing::TempDir() + "/one-device.json";
  const Outcome o = Cli({"plan", "--profile", kProfiles + "tiny-gpt-cpu-measured.json", "--cluster",
                         kProfiles + "clusters/cpu-2-measured.json", "--global-batch", "16", "--devices", "1", "-q", "-o",
                         path});
  ASSERT_EQ(o.code, kExitOk) << o.err;
  const Outcome sim = Cli({"simulate", path});
  EXPECT_EQ(sim.code, kExitOk) << sim.err;
}

TEST(PlanCommand, WritesAPlanThatSimulateRunsWithTheSameStep) {
  const std::string path = testing::TempDir() + "/planned.json";
  const Outcome o = Cli(Tiny({"--stages", "2", "-o", path}));
  ASSERT_EQ(o.code, kExitOk) << o.err;
  std::ifstream in(path);
  const nlohmann::json plan = nlohmann::json::parse(in);
  EXPECT_EQ(plan["format"], "gpipe-plan/1");
  std::set<int> ranks;  // K = 2 (two stages, or more of them on two ranks)
  for (const auto& stage : plan["stages"]) ranks.insert(stage["rank"].get<int>());
  EXPECT_EQ(ranks.size(), 2u);
  const Outcome simulated = Cli({"simulate", path, "--json"});
  ASSERT_EQ(simulated.code, kExitOk) << simulated.err;
  const nlohmann::json sim = nlohmann::json::parse(simulated.out);
  EXPECT_EQ(sim["step_time_ms"], plan["prediction"]["step_time_ms"]);
  EXPECT_EQ(sim["bubble_fraction"], plan["prediction"]["bubble_fraction"]);
}

TEST(PlanCommand, JsonHasThePredictionAndTheAlternatives) {
  const Outcome o = Cli(Tiny({"--json"}));
  ASSERT_EQ(o.code, kExitOk) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out);
  EXPECT_GT(j["prediction"]["step_time_ms"].get<double>(), 0);
  EXPECT_GT(j["prediction"]["throughput_samples_per_s"].get<double>(), 0);
  EXPECT_TRUE(j["prediction"]["proven_optimal"].get<bool>());
  // Proven: the lower bound is the step itself, gap 0.
  EXPECT_EQ(j["prediction"]["lower_bound_ms"], j["prediction"]["step_time_ms"]);
  EXPECT_EQ(j["prediction"]["gap"].get<double>(), 0.0);
  EXPECT_FALSE(j["alternatives"].empty());
}

TEST(PlanCommand, ReportsTheGapAndTakesTimeAndGapLimits) {
  const Outcome o = Cli(Tiny({"--time-limit", "60", "--gap", "0.5"}));
  ASSERT_EQ(o.code, kExitOk) << o.err;
  for (const char* words : {"best step", "lower bound", ", gap "}) {
    EXPECT_NE(o.out.find(words), std::string::npos) << words << "\n" << o.out;
  }
  // Bad values are a bad command line: exit 2.
  const Outcome negative = Cli(Tiny({"--gap", "-1"}));
  EXPECT_EQ(negative.code, 2);
  EXPECT_NE(negative.err.find("--gap: must be a fraction at least 0"), std::string::npos) << negative.err;
  const Outcome below_zero = Cli(Tiny({"--time-limit", "-1"}));
  EXPECT_EQ(below_zero.code, 2);
  EXPECT_NE(below_zero.err.find("--time-limit: must be a number of seconds, 0 for no limit"), std::string::npos)
      << below_zero.err;
  // 0: no limit, the search to the end (the tiny model is proven optimal either way).
  const Outcome unlimited = Cli(Tiny({"--time-limit", "0", "--json"}));
  ASSERT_EQ(unlimited.code, kExitOk) << unlimited.err;
  EXPECT_TRUE(nlohmann::json::parse(unlimited.out)["prediction"]["proven_optimal"].get<bool>());
}

TEST(PlanCommand, TightMemoryTurnsOnRematWhereNeeded) {
  // Without remat rank 0 needs 45.5 MiB and rank 1 47.1 MiB: at 46 MiB only rank 1 recomputes.
  const Outcome o = Cli(Tiny({"--stages", "2", "--microbatches", "2", "--schedule", "gpipe", "--memory", "46MiB", "--json"}));
  ASSERT_EQ(o.code, kExitOk) << o.err << o.out;
  const nlohmann::json j = nlohmann::json::parse(o.out);
  int remat = 0;
  for (const nlohmann::json& stage : j["stages"]) remat += stage["remat"].get<bool>() ? 1 : 0;
  EXPECT_EQ(remat, 1);
  for (const nlohmann::json& rank : j["prediction"]["ranks"]) {
    EXPECT_LE(rank["peak_memory_bytes"].get<double>(), 46.0 * (1 << 20));
  }
}

// Nothing fits: the report leads with the least memory any plan needs and the fewest devices,
// and suggests only what would make a plan fit. On two devices the tiny GPT's least-memory plan
// (1f1b, K=2, micro-batches of one sample, remat) needs 2.37 MiB, more than 2 MiB.
TEST(PlanCommand, InfeasibleBudgetsLeadWithTheLeastMemoryAndTheFewestDevices) {
  const Outcome o = Cli(Tiny({"--memory", "2MiB"}));
  EXPECT_EQ(o.code, kExitFailure);
  EXPECT_EQ(o.err, "");
  const size_t header = o.out.find("No plan fits in 2.00 MiB per device on 2 devices at global batch 64.");
  const size_t least = o.out.find("The smallest plan with one stage per device needs ");
  const size_t fewest = o.out.find("Fewest devices that fit at this batch: ");
  ASSERT_NE(header, std::string::npos) << o.out;
  ASSERT_NE(least, std::string::npos) << o.out;
  ASSERT_NE(fewest, std::string::npos) << o.out;
  EXPECT_LT(header, least);
  EXPECT_LT(least, fewest);
  EXPECT_NE(o.out.find("M=64 micro-batches of 1 sample"), std::string::npos) << o.out;
  // Remat and more micro-batches are already in the least-memory plan: not offered as help.
  EXPECT_EQ(o.out.find("--remat"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("--microbatches"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("What would help"), std::string::npos) << o.out;
}

// The fewest devices are searched, not guessed: the report's count fits and one fewer does not.
TEST(PlanCommand, TheFewestDevicesReportedFitAndOneFewerDoesNot) {
  const Outcome o = Cli(Tiny({"--memory", "2MiB", "--json"}));
  ASSERT_EQ(o.code, kExitFailure) << o.err;
  const nlohmann::json report = nlohmann::json::parse(o.out);
  EXPECT_FALSE(report["fits"].get<bool>());
  EXPECT_GT(report["least_memory_bytes"].get<double>(), 2.0 * (1 << 20));
  ASSERT_TRUE(report["fewest_devices"].is_number()) << report.dump(1);
  const int fewest = report["fewest_devices"].get<int>();
  EXPECT_LE(report["fewest_devices_plan"]["peak_memory_bytes"].get<double>(), 2.0 * (1 << 20));
  // Done well inside the default limit: nothing was cut short.
  for (const char* key : {"search_stopped_by_time", "changes_stopped_by_time", "fewest_devices_stopped_by_time"}) {
    ASSERT_TRUE(report[key].is_boolean()) << key << ": " << report.dump(1);
    EXPECT_FALSE(report[key].get<bool>()) << key;
  }
  const Outcome fits = Cli(Tiny({"--memory", "2MiB", "--devices", std::to_string(fewest)}));
  EXPECT_EQ(fits.code, kExitOk) << fits.out;
  const Outcome short_one = Cli(Tiny({"--memory", "2MiB", "--devices", std::to_string(fewest - 1)}));
  EXPECT_EQ(short_one.code, kExitFailure) << short_one.out;
}

// With remat off, turning it on is a change that fits, and the report names it.
TEST(PlanCommand, InfeasibleReportOffersOnlyChangesThatFit) {
  // (One micro-batch: 1F1B on one rank holds one micro-batch's activations whatever M is.)
  const Outcome o = Cli(Tiny({"--memory", "40MiB", "--remat", "off", "--stages", "1", "--microbatches", "1"}));
  ASSERT_EQ(o.code, kExitFailure) << o.err;
  EXPECT_NE(o.out.find("and the pinned dimensions"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("On these 2 devices a plan fits with:"), std::string::npos) << o.out;
}

TEST(PlanCommand, BadFlagsGetOneLineAndExitTwo) {
  const std::pair<std::vector<std::string>, const char*> cases[] = {
      {{"--stages", "7"}, "--stages 7: K = 7 ranks is more than the profile's 6 layers"},
      {{"--schedule", "1f1f"}, "--schedule: unknown schedule \"1f1f\""},
      {{"--remat", "sometimes"}, "--remat: unknown remat policy \"sometimes\"; known: off, on, auto, stages"},
      {{"--memory", "80 gigs"}, "--memory: \"80 gigs\" is not a byte size"},
      {{"--microbatches", "5"}, "--microbatches 5: the global batch 64 does not split into D x M = 1 x 5 micro-batches"},
      {{"--devices", "0"}, "--devices: must be at least 1, got 0"},
  };
  for (const auto& [flags, expected] : cases) {
    const Outcome o = Cli(Tiny(flags));
    EXPECT_EQ(o.code, kExitUsage) << expected;
    EXPECT_NE(o.err.find(expected), std::string::npos) << o.err;
    EXPECT_EQ(o.err.substr(o.err.find('\n')), "\n(run 'gpipe-plan plan --help' for usage)\n") << o.err;
  }
  const Outcome missing = Cli({"plan", "--profile", kProfiles + "tiny-gpt-cpu.json"});
  EXPECT_EQ(missing.code, kExitUsage);
  EXPECT_NE(missing.err.find("--cluster"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace gpipe::cli
