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

// export writes PyTorch's CSV and the split points; simulate --schedule-csv reads the CSV back to
// the plan's own prediction; what cannot be said or read is an error naming why.
TEST(ExportCommand, PytorchCsvRoundTripsThroughSimulate) {
  const std::string dir = testing::TempDir();
  const std::string plan = kPlans + "gpt3-13b-8xa100-zb-h1.json";
  const Outcome exported = Cli({"export", plan, "--format", "pytorch-csv", "-o", dir + "/s.csv"});
  ASSERT_EQ(exported.code, kExitOk) << exported.err;
  std::ifstream stages_file(dir + "/s.stages.json");
  const nlohmann::json stages = nlohmann::json::parse(stages_file);
  EXPECT_EQ(stages["pytorch_schedule"], "ScheduleInterleavedZeroBubble");
  EXPECT_EQ(stages["csv_format"], "compute_only");
  EXPECT_EQ(stages["stages"].size(), 8u);
  EXPECT_EQ(stages["stages"][0]["layers"], nlohmann::json::parse("[0, 6]"));
  const Outcome own = Cli({"simulate", plan, "--json"});
  const Outcome from_csv = Cli({"simulate", plan, "--json", "--schedule-csv", dir + "/s.csv"});
  ASSERT_EQ(from_csv.code, kExitOk) << from_csv.err;
  EXPECT_EQ(nlohmann::json::parse(from_csv.out)["step_time_ms"], nlohmann::json::parse(own.out)["step_time_ms"]);

  const Outcome with_comms = Cli({"export", plan, "--format", "pytorch-csv", "--with-communication"});
  ASSERT_EQ(with_comms.code, kExitOk) << with_comms.err;
  EXPECT_NE(with_comms.out.find("0SEND_F0"), std::string::npos);
  EXPECT_NE(with_comms.out.find("1RECV_F0"), std::string::npos);

  const Outcome layout = Cli({"export", plan, "--format", "megatron-layout"});
  ASSERT_EQ(layout.code, kExitOk) << layout.err;
  EXPECT_EQ(layout.out.rfind("--pipeline-model-parallel-size 8 --pipeline-model-parallel-layout \"Et*5|", 0), 0u)
      << layout.out;
}

TEST(ExportCommand, ErrorsSayWhy) {
  const Outcome format = Cli({"export", kPlans + "tiny-gpt-gpipe.json", "--format", "csv"});
  EXPECT_EQ(format.code, kExitUsage);
  EXPECT_NE(format.err.find("--format"), std::string::npos) << format.err;
  const Outcome missing = Cli({"simulate", kPlans + "tiny-gpt-gpipe.json", "--schedule-csv", "/no/such.csv"});
  EXPECT_EQ(missing.code, kExitFailure);
  EXPECT_NE(missing.err.find("/no/such.csv: cannot open the file"), std::string::npos) << missing.err;
  const std::string bad = testing::TempDir() + "/bad.csv";
  std::ofstream(bad) << "0F0,0F1,0F2,0F3,0B0\n";
  const Outcome wrong = Cli({"simulate", kPlans + "tiny-gpt-gpipe.json", "--schedule-csv", bad});
  EXPECT_EQ(wrong.code, kExitFailure);
  EXPECT_NE(wrong.err.find("bad.csv: schedule: stage 1 has no actions"), std::string::npos) << wrong.err;
}

}  // namespace
}  // namespace gpipe::cli
