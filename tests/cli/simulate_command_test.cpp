// gpipe-plan simulate, run in-process as a user would type it.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "tests/cli/run_cli.h"

namespace gpipe::cli {
namespace {

const std::string kPlans = std::string(GPIPE_SOURCE_DIR) + "/profiles/plans/";


TEST(SimulateCommand, PrintsASummary) {
  const Outcome o = Cli({"simulate", kPlans + "tiny-gpt-gpipe.json"});
  EXPECT_EQ(o.code, kExitOk) << o.err;
  for (const char* words : {"step time", "throughput", "bubble", "(K-1)/(M+K-1) = 20.0%", "rank", "fits"}) {
    EXPECT_NE(o.out.find(words), std::string::npos) << words << "\n" << o.out;
  }
}

TEST(SimulateCommand, JsonHasTheContractKeys) {
  const Outcome o = Cli({"simulate", kPlans + "gpt3-13b-8xa100-1f1b.json", "--json"});
  ASSERT_EQ(o.code, kExitOk) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out);
  EXPECT_GT(j["step_time_ms"].get<double>(), 0);
  EXPECT_GT(j["bubble_fraction"].get<double>(), 0);
  EXPECT_LT(j["bubble_fraction"].get<double>(), 1);
  EXPECT_GT(j["throughput_samples_per_s"].get<double>(), 0);
  ASSERT_EQ(j["ranks"].size(), 8u);
  for (const nlohmann::json& rank : j["ranks"]) {
    EXPECT_GT(rank["busy_ms"].get<double>(), 0);
    EXPECT_GT(rank["peak_memory_bytes"].get<double>(), 0);
  }
}

// A plan that does not fit says so before any figure, and --json carries it.
TEST(SimulateCommand, APlanThatDoesNotFitSaysSoFirst) {
  const Outcome o = Cli({"simulate", kPlans + "gpt3-13b-8xa100-interleaved-over-memory.json"});
  ASSERT_EQ(o.code, kExitOk) << o.err;
  const size_t says = o.out.find("DOES NOT FIT: peak memory exceeds the device's 80 GB = 74.51 GiB on rank ");
  ASSERT_NE(says, std::string::npos) << o.out;
  EXPECT_LT(says, o.out.find("step time")) << o.out;
  const Outcome json = Cli({"simulate", kPlans + "gpt3-13b-8xa100-interleaved-over-memory.json", "--json"});
  ASSERT_EQ(json.code, kExitOk) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_FALSE(j["fits"].get<bool>());
  EXPECT_GT(j["peak_memory_bytes"].get<double>(), j["memory_limit_bytes"].get<double>());
}

// Every other shipped example plan fits its devices.
TEST(SimulateCommand, ShippedExamplePlansFit) {
  for (const char* name : {"gpt3-13b-8xa100-1f1b.json", "gpt3-13b-8xa100-zb-h1.json", "tiny-gpt-gpipe.json",
                           "tiny-gpt-1f1b-remat.json"}) {
    const Outcome o = Cli({"simulate", kPlans + name, "--json"});
    ASSERT_EQ(o.code, kExitOk) << name << ": " << o.err;
    EXPECT_TRUE(nlohmann::json::parse(o.out)["fits"].get<bool>()) << name;
  }
}

TEST(SimulateCommand, WritesTraceAndSvg) {
  const std::string dir = testing::TempDir();
  const Outcome o = Cli({"simulate", kPlans + "gpt3-13b-8xa100-zb-h1.json", "--trace", dir + "/t.json", "--svg",
                         dir + "/t.svg"});
  ASSERT_EQ(o.code, kExitOk) << o.err;
  std::ifstream trace(dir + "/t.json");
  EXPECT_FALSE(nlohmann::json::parse(trace)["traceEvents"].empty());
  std::ifstream svg(dir + "/t.svg");
  std::stringstream text;
  text << svg.rdbuf();
  EXPECT_NE(text.str().find("</svg>"), std::string::npos);
}

TEST(SimulateCommand, PrintsTheScheduleTextForm) {
  const Outcome o = Cli({"simulate", kPlans + "tiny-gpt-gpipe.json", "--print-schedule"});
  ASSERT_EQ(o.code, kExitOk) << o.err;
  EXPECT_NE(o.out.find("rank 0: 0F0 0SEND_F0 0F1"), std::string::npos) << o.out;
}

TEST(SimulateCommand, BadInputGetsOneLineAndExitOne) {
  const std::string path = testing::TempDir() + "/bad-plan.json";
  std::ifstream good(kPlans + "tiny-gpt-gpipe.json");
  nlohmann::json plan = nlohmann::json::parse(good);
  plan["profile"] = std::string(GPIPE_SOURCE_DIR) + "/profiles/tiny-gpt-cpu.json";
  plan["cluster"] = std::string(GPIPE_SOURCE_DIR) + "/profiles/clusters/cpu-2.json";
  plan["microbatches"] = 3;
  std::ofstream(path) << plan.dump();
  const Outcome o = Cli({"simulate", path});
  EXPECT_EQ(o.code, kExitFailure);
  EXPECT_EQ(o.err, "gpipe-plan simulate: " + path +
                       ".global_batch: the global batch 32 does not split into D x M = 1 x 3 micro-batches of "
                       "whole samples; use a multiple of 3\n");
  const Outcome missing = Cli({"simulate", "/no/such/plan.json"});
  EXPECT_EQ(missing.code, kExitFailure);
  EXPECT_NE(missing.err.find("/no/such/plan.json: cannot open the file"), std::string::npos);
}

TEST(SimulateCommand, ZbH1NeedsWeightGradientTimes) {
  const std::string path = testing::TempDir() + "/zb.json";
  std::ifstream good(kPlans + "tiny-gpt-gpipe.json");
  nlohmann::json plan = nlohmann::json::parse(good);
  std::ifstream profile_file(std::string(GPIPE_SOURCE_DIR) + "/profiles/tiny-gpt-cpu.json");
  plan["profile"] = nlohmann::json::parse(profile_file);
  plan["profile"]["layers"][1].erase("backward_weight_ms");
  plan["cluster"] = std::string(GPIPE_SOURCE_DIR) + "/profiles/clusters/cpu-2.json";
  plan["schedule"] = "zb-h1";
  std::ofstream(path) << plan.dump();
  const Outcome o = Cli({"simulate", path});
  EXPECT_EQ(o.code, kExitFailure);
  EXPECT_NE(o.err.find("profile layers[1] (\"block0\") has no backward_weight_ms"), std::string::npos) << o.err;
}

TEST(SimulateCommand, HelpShowsExamplesAndUsageErrorsExitTwo) {
  const Outcome help = Cli({"simulate", "--help"});
  EXPECT_EQ(help.code, kExitOk);
  EXPECT_NE(help.out.find("Examples:"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--trace"), std::string::npos);
  const Outcome top = Cli({"--help"});
  EXPECT_EQ(top.code, kExitOk);
  EXPECT_NE(top.out.find("simulate"), std::string::npos);
  const Outcome unknown = Cli({"simulate", kPlans + "tiny-gpt-gpipe.json", "--jsn"});
  EXPECT_EQ(unknown.code, kExitUsage);
  EXPECT_NE(unknown.err.find("--jsn"), std::string::npos) << unknown.err;
  EXPECT_EQ(Cli({}).code, kExitUsage);
}

}  // namespace
}  // namespace gpipe::cli
