// Loading profiles, clusters and plans: the shipped files load, and bad input gets one line that
// names the file, the field and the value.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/cluster.h"
#include "core/json_reader.h"
#include "core/plan.h"
#include "core/profile.h"

namespace gpipe {
namespace {

const std::string kSource = GPIPE_SOURCE_DIR;

nlohmann::json TinyProfile() {
  return nlohmann::json::parse(R"({"format":"gpipe-profile/1","model":"m","device":"d","microbatch_size":2,
    "layers":[{"name":"a","forward_ms":1,"backward_ms":2,"backward_weight_ms":1,"param_bytes":10,"activation_bytes":100,"output_bytes":8},
              {"name":"b","forward_ms":1,"backward_ms":2,"param_bytes":10,"activation_bytes":100,"output_bytes":8},
              {"name":"c","forward_ms":1,"backward_ms":2,"param_bytes":10,"activation_bytes":100,"output_bytes":8}]})");
}

nlohmann::json TinyCluster() {
  return nlohmann::json::parse(R"({"format":"gpipe-cluster/1","devices":4,"device_memory_bytes":1000000,
    "link":{"bandwidth_bytes_per_s":1e9,"latency_ms":0.01}})");
}

nlohmann::json TinyPlan() {
  nlohmann::json plan = {{"format", "gpipe-plan/1"}, {"profile", TinyProfile()}, {"cluster", TinyCluster()},
                         {"schedule", "1f1b"},       {"microbatches", 2},        {"global_batch", 4}};
  plan["stages"] = nlohmann::json::parse(R"([{"layers":[0,1],"rank":0},{"layers":[1,3],"rank":1,"remat":true}])");
  return plan;
}

std::string PlanError(const nlohmann::json& json) {
  Expected<Plan> plan = PlanFromJson(json, "plan.json", "");
  return plan.ok() ? "ok" : plan.status().message();
}

TEST(Formats, ShippedProfilesAndClustersLoad) {
  int profiles = 0, clusters = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kSource + "/profiles")) {
    if (entry.path().extension() != ".json") continue;
    Expected<Profile> profile = LoadProfile(entry.path().string());
    EXPECT_TRUE(profile.ok()) << profile.status().message();
    ++profiles;
  }
  for (const auto& entry : std::filesystem::directory_iterator(kSource + "/profiles/clusters")) {
    Expected<Cluster> cluster = LoadCluster(entry.path().string());
    EXPECT_TRUE(cluster.ok()) << cluster.status().message();
    ++clusters;
  }
  EXPECT_GE(profiles, 19);
  EXPECT_GE(clusters, 5);
}

TEST(Formats, ShippedPlansLoadWithRelativePaths) {
  for (const auto& entry : std::filesystem::directory_iterator(kSource + "/profiles/plans")) {
    Expected<Plan> plan = LoadPlan(entry.path().string());
    EXPECT_TRUE(plan.ok()) << plan.status().message();
  }
}

TEST(Formats, PlanRoundTripsThroughJson) {
  Expected<Plan> plan = PlanFromJson(TinyPlan(), "plan.json", "");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->microbatch_size(), 2);
  EXPECT_EQ(plan->num_ranks(), 2);
  EXPECT_TRUE(plan->stages[1].remat);
  EXPECT_EQ(plan->optimizer, Optimizer::kAdam);  // fp32 profile
  const nlohmann::json written = PlanToJson(*plan);
  Expected<Plan> again = PlanFromJson(written, "again.json", "");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(PlanToJson(*again), written);
}

TEST(Formats, AProfilesGeneratorStateBytesRoundTripAndDefaultToNone) {
  Expected<Plan> plan = PlanFromJson(TinyPlan(), "plan.json", "");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->profile.rng_state_bytes, 0);
  EXPECT_FALSE(PlanToJson(*plan)["profile"].contains("rng_state_bytes"));
  nlohmann::json json = TinyPlan();
  json["profile"]["rng_state_bytes"] = 5056;
  Expected<Plan> with = PlanFromJson(json, "plan.json", "");
  ASSERT_TRUE(with.ok()) << with.status().message();
  EXPECT_EQ(with->profile.rng_state_bytes, 5056);
  EXPECT_EQ(PlanToJson(*with)["profile"]["rng_state_bytes"], 5056);
  json["profile"]["rng_state_bytes"] = -1;
  Expected<Plan> bad = PlanFromJson(json, "plan.json", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rng_state_bytes"), std::string::npos) << bad.status().message();
}

TEST(Formats, UnknownFieldsSurviveARewrite) {
  nlohmann::json json = TinyPlan();
  json["prediction"] = {{"step_time_ms", 12.5}};
  json["profile"]["source"] = "measured on a Tuesday";
  Expected<Plan> plan = PlanFromJson(json, "plan.json", "");
  ASSERT_TRUE(plan.ok());
  const nlohmann::json written = PlanToJson(*plan);
  EXPECT_EQ(written["prediction"]["step_time_ms"], 12.5);
  EXPECT_EQ(written["profile"]["source"], "measured on a Tuesday");
}

// Each row: a change to a good plan, and the words the one-line error must contain.
struct BadCase {
  const char* what;
  void (*edit)(nlohmann::json&);
  const char* expected;
};

TEST(Formats, BadPlansGetErrorsNamingTheField) {
  const BadCase cases[] = {
      {"format version", [](nlohmann::json& j) { j["format"] = "gpipe-plan/2"; },
       "plan.json.format: unsupported format \"gpipe-plan/2\"; this build reads \"gpipe-plan/1\""},
      {"negative time", [](nlohmann::json& j) { j["profile"]["layers"][1]["forward_ms"] = -1; },
       "plan.json.profile.layers[1].forward_ms: expected a number >= 0, got -1"},
      {"string time", [](nlohmann::json& j) { j["profile"]["layers"][0]["backward_ms"] = "2ms"; },
       "plan.json.profile.layers[0].backward_ms: expected a number, got \"2ms\""},
      {"weight part too big", [](nlohmann::json& j) { j["profile"]["layers"][0]["backward_weight_ms"] = 3; },
       "backward_weight_ms: is 3.000000, more than backward_ms"},
      {"missing field", [](nlohmann::json& j) { j["profile"]["layers"][2].erase("output_bytes"); },
       "plan.json.profile.layers[2]: missing required field \"output_bytes\""},
      {"duplicate layer", [](nlohmann::json& j) { j["profile"]["layers"][2]["name"] = "a"; },
       "layers[2].name: \"a\" names an earlier layer too"},
      {"zero devices", [](nlohmann::json& j) { j["cluster"]["devices"] = 0; },
       "plan.json.cluster.devices: expected a whole number in [1, 1048576], got 0"},
      {"zero bandwidth", [](nlohmann::json& j) { j["cluster"]["link"]["bandwidth_bytes_per_s"] = 0; },
       "plan.json.cluster.link.bandwidth_bytes_per_s: expected a number > 0, got 0"},
      {"schedule typo", [](nlohmann::json& j) { j["schedule"] = "1fb1"; },
       "plan.json.schedule: unknown schedule \"1fb1\"; known: gpipe, 1f1b, interleaved-1f1b, zb-h1, interleaved-zb, zb-v, dualpipe-v; did you mean \"1f1b\"?"},
      {"empty stage", [](nlohmann::json& j) { j["stages"][1]["layers"] = {1, 1}; },
       "plan.json.stages[1].layers: [1, 1) is empty; every stage needs at least one layer"},
      {"overlap", [](nlohmann::json& j) { j["stages"][1]["layers"] = {0, 3}; },
       "plan.json.stages[1].layers: [0, 3) should start at layer 1; it overlaps the stage before"},
      {"gap", [](nlohmann::json& j) { j["stages"][1]["layers"] = {2, 3}; },
       "layers in between belong to no stage"},
      {"short", [](nlohmann::json& j) { j["stages"][1]["layers"] = {1, 2}; },
       "the stages end at layer 2 but the profile has 3 layers"},
      {"past the end", [](nlohmann::json& j) { j["stages"][1]["layers"] = {1, 4}; },
       "[1, 4) runs past the profile's 3 layers"},
      {"layers not a pair", [](nlohmann::json& j) { j["stages"][0]["layers"] = {0}; },
       "expected [first, end) as two whole numbers"},
      {"rank gap", [](nlohmann::json& j) { j["stages"][1]["rank"] = 2; }, "no stage is on rank 1"},
      {"too many devices", [](nlohmann::json& j) { j["replicas"] = 3; }, "K x D = 2 ranks x 3 replicas = 6 devices is more than the cluster's 4"},
      {"batch split", [](nlohmann::json& j) { j["global_batch"] = 5; },
       "plan.json.global_batch: the global batch 5 does not split into D x M = 1 x 2 micro-batches"},
      {"two stages one rank", [](nlohmann::json& j) { j["stages"][1]["rank"] = 0; },
       "\"1f1b\" runs one stage per rank, but the plan puts 2 stages on 1 ranks"},
      {"optimizer typo", [](nlohmann::json& j) { j["optimizer"] = "adamw"; }, "unknown optimizer \"adamw\""},
      {"missing profile file", [](nlohmann::json& j) { j["profile"] = "nowhere.json"; },
       "plan.json.profile: names \"nowhere.json\", which did not load: nowhere.json: cannot open the file"},
      {"profile not object", [](nlohmann::json& j) { j["profile"] = 7; }, "plan.json.profile: expected an object or a file path, got 7"},
      {"no layers", [](nlohmann::json& j) { j["profile"]["layers"] = nlohmann::json::array(); },
       "the profile has no layers"},
      {"remat not bool", [](nlohmann::json& j) { j["stages"][0]["remat"] = "yes"; },
       "plan.json.stages[0].remat: expected true or false, got \"yes\""},
      {"nodes do not divide", [](nlohmann::json& j) { j["cluster"]["nodes"] = {{"devices_per_node", 3}, {"inter_node_link", {{"bandwidth_bytes_per_s", 1e9}, {"latency_ms", 0}}}}; },
       "devices_per_node: 3 does not divide devices (4)"},
  };
  for (const BadCase& c : cases) {
    nlohmann::json json = TinyPlan();
    c.edit(json);
    const std::string error = PlanError(json);
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.what << ":\n  got      " << error
                                                         << "\n  expected " << c.expected;
    EXPECT_EQ(error.find('\n'), std::string::npos) << c.what << ": not one line: " << error;
  }
}

TEST(Formats, InterleavedLayoutRules) {
  nlohmann::json json = TinyPlan();
  json["schedule"] = "interleaved-1f1b";
  json["stages"] = nlohmann::json::parse(R"([{"layers":[0,1],"rank":0},{"layers":[1,2],"rank":1},{"layers":[2,3],"rank":1}])");
  EXPECT_NE(PlanError(json).find("needs the same number of stages on every rank; 3 stages on 2 ranks"),
            std::string::npos) << PlanError(json);
  json["stages"] = nlohmann::json::parse(R"([{"layers":[0,1],"rank":1},{"layers":[1,3],"rank":0}])");
  EXPECT_NE(PlanError(json).find("stages[0].rank: is 1, expected 0 (interleaved-1f1b: the stages go round-robin"),
            std::string::npos) << PlanError(json);
  json["stages"] = nlohmann::json::parse(R"([{"layers":[0,1],"rank":0},{"layers":[1,3],"rank":1}])");
  json["microbatches"] = 3;  // one round of 3 (PyTorch's rule)
  json["global_batch"] = 3;
  EXPECT_EQ(PlanError(json), "ok");
  json["microbatches"] = 5;  // two rounds do not divide 5
  json["global_batch"] = 5;
  EXPECT_NE(PlanError(json).find("microbatches: interleaved-1f1b runs M micro-batches in max(1, M / K) rounds"),
            std::string::npos)
      << PlanError(json);
  EXPECT_NE(PlanError(json).find("try 4 or 6"), std::string::npos) << PlanError(json);
}

TEST(Formats, FileErrorsNameTheFile) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/broken.json";
  std::ofstream(path) << "{\"format\": \"gpipe-profile/1\",\n  \"model\": }";
  Expected<Profile> profile = LoadProfile(path);
  ASSERT_FALSE(profile.ok());
  EXPECT_NE(profile.status().message().find(path + ": not valid JSON: parse error at line 2"), std::string::npos)
      << profile.status().message();
  Expected<Cluster> cluster = LoadCluster(dir + "/absent.json");
  ASSERT_FALSE(cluster.ok());
  EXPECT_NE(cluster.status().message().find("absent.json: cannot open the file"), std::string::npos);
}

// profile-links writes each measured GPU pair's kind; it survives a round trip, and an absent kind
// stays absent (CPU ranks, hand-written files).
TEST(Formats, ClusterLinkKindRoundTrips) {
  nlohmann::json json = TinyCluster();
  json["links"] = nlohmann::json::parse(R"([
    {"from":0,"to":1,"bandwidth_bytes_per_s":3e11,"latency_ms":0.01,"kind":"nvlink"},
    {"from":1,"to":2,"bandwidth_bytes_per_s":2e10,"latency_ms":0.02,"kind":"pcie"},
    {"from":2,"to":3,"bandwidth_bytes_per_s":1e12,"latency_ms":0.001,"kind":"same-device"},
    {"from":3,"to":0,"bandwidth_bytes_per_s":1e9,"latency_ms":0.1}])");
  Expected<Cluster> cluster = ClusterFromJson(json, "cluster.json");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  ASSERT_EQ(cluster->links.size(), 4u);
  EXPECT_EQ(cluster->links[0].kind, std::optional<std::string>("nvlink"));
  EXPECT_EQ(cluster->links[1].kind, std::optional<std::string>("pcie"));
  EXPECT_EQ(cluster->links[2].kind, std::optional<std::string>("same-device"));
  EXPECT_FALSE(cluster->links[3].kind.has_value());
  const nlohmann::json written = ClusterToJson(*cluster);
  EXPECT_EQ(written["links"][0]["kind"], "nvlink");
  EXPECT_EQ(written["links"][2]["kind"], "same-device");
  EXPECT_FALSE(written["links"][3].contains("kind"));
  Expected<Cluster> again = ClusterFromJson(written, "cluster.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(again->links[i].kind, cluster->links[i].kind) << i;
  EXPECT_EQ(ClusterToJson(*again), written);

  json["links"][1]["kind"] = "NVLink";
  Expected<Cluster> bad = ClusterFromJson(json, "cluster.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "cluster.json.links[1].kind: is \"NVLink\"; expected \"nvlink\", \"pcie\" or \"same-device\", or no \"kind\" "
            "when not known");
}

// profile-links on a CPU writes how late a woken rank runs on a busy node; it round-trips, a file
// without it loads without it, and a negative time names the field.
TEST(Formats, ClusterSaturatedWakeupRoundTrips) {
  nlohmann::json json = TinyCluster();
  Expected<Cluster> without = ClusterFromJson(json, "cluster.json");
  ASSERT_TRUE(without.ok()) << without.status().message();
  EXPECT_FALSE(without->saturated_wakeup.has_value());
  EXPECT_FALSE(ClusterToJson(*without).contains("saturated_wakeup"));
  json["saturated_wakeup"] = {{"mean_ms", 0.85}, {"median_ms", 0.02}, {"spread_ms", 0.95}, {"p90_ms", 1.96}, {"samples", 400}};
  Expected<Cluster> cluster = ClusterFromJson(json, "cluster.json");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  ASSERT_TRUE(cluster->saturated_wakeup.has_value());
  EXPECT_DOUBLE_EQ(cluster->saturated_wakeup->mean_ms, 0.85);
  EXPECT_DOUBLE_EQ(cluster->saturated_wakeup->p90_ms, 1.96);
  EXPECT_EQ(cluster->saturated_wakeup->samples, 400);
  EXPECT_EQ(ClusterToJson(*cluster)["saturated_wakeup"], json["saturated_wakeup"]);
  EXPECT_TRUE(cluster->extra.empty() || !cluster->extra.contains("saturated_wakeup"));
  json["saturated_wakeup"]["mean_ms"] = -1;
  Expected<Cluster> bad = ClusterFromJson(json, "cluster.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cluster.json.saturated_wakeup.mean_ms"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace gpipe
