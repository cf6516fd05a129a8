// Parameters shared across layers (tied weights) in the profile: the field round-trips, bad
// entries get one line naming the field, and ParamBytesOfLayers counts a tied parameter once per
// set of layers (a stage, a rank) that holds it.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "core/profile.h"
#include "tests/core/tied_bytes_by_hand.h"

namespace gpipe {
namespace {

// Six layers of 100, 200, ..., 600 bytes; the first and the last share a 64-byte parameter.
nlohmann::json SixLayers() {
  nlohmann::json json = {{"format", "gpipe-profile/1"}, {"model", "tied"}, {"device", "cpu"}, {"microbatch_size", 1}};
  json["layers"] = nlohmann::json::array();
  for (int l = 0; l < 6; ++l) {
    json["layers"].push_back({{"name", "l" + std::to_string(l)},
                              {"forward_ms", 1},
                              {"backward_ms", 2},
                              {"param_bytes", 100 * (l + 1)},
                              {"activation_bytes", 10},
                              {"output_bytes", 4}});
  }
  json["tied_parameters"] = nlohmann::json::parse(R"([{"layers": [5, 0], "bytes": 64, "name": "wte.weight"}])");
  return json;
}

std::string Error(const nlohmann::json& json) {
  Expected<Profile> profile = ProfileFromJson(json, "profile.json");
  return profile.ok() ? "ok" : profile.status().message();
}

TEST(TiedParameters, RoundTripThroughJson) {
  Expected<Profile> profile = ProfileFromJson(SixLayers(), "profile.json");
  ASSERT_TRUE(profile.ok()) << profile.status().message();
  ASSERT_EQ(profile->tied_parameters.size(), 1u);
  EXPECT_EQ(profile->tied_parameters[0].layers, (std::vector<int>{0, 5}));  // sorted
  EXPECT_EQ(profile->tied_parameters[0].bytes, 64);
  EXPECT_EQ(profile->tied_parameters[0].name, "wte.weight");
  EXPECT_TRUE(profile->extra.empty()) << profile->extra.dump();  // a known field, not kept as unknown
  const nlohmann::json written = ProfileToJson(*profile);
  EXPECT_EQ(written["tied_parameters"], nlohmann::json::parse(R"([{"layers": [0, 5], "bytes": 64, "name": "wte.weight"}])"));
  Expected<Profile> again = ProfileFromJson(written, "again.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(ProfileToJson(*again), written);

  // Without a name, none is written; three layers and two parameters survive too.
  nlohmann::json json = SixLayers();
  json["tied_parameters"] = nlohmann::json::parse(R"([{"layers": [1, 3, 2], "bytes": 50}, {"layers": [0, 5], "bytes": 64}])");
  Expected<Profile> two = ProfileFromJson(json, "profile.json");
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(ProfileToJson(*two)["tied_parameters"],
            nlohmann::json::parse(R"([{"layers": [1, 2, 3], "bytes": 50}, {"layers": [0, 5], "bytes": 64}])"));
}

TEST(TiedParameters, AbsentOrEmptyMeansNoneAndIsNotWritten) {
  nlohmann::json json = SixLayers();
  json.erase("tied_parameters");
  Expected<Profile> none = ProfileFromJson(json, "profile.json");
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_TRUE(none->tied_parameters.empty());
  EXPECT_FALSE(ProfileToJson(*none).contains("tied_parameters"));
  json["tied_parameters"] = nlohmann::json::array();
  Expected<Profile> empty = ProfileFromJson(json, "profile.json");
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_TRUE(empty->tied_parameters.empty());
  EXPECT_FALSE(ProfileToJson(*empty).contains("tied_parameters"));
}

TEST(TiedParameters, BadEntriesGetErrorsNamingTheField) {
  struct BadCase {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    std::string expected;
  };
  const BadCase cases[] = {
      {"not an array", [](nlohmann::json& j) { j["tied_parameters"] = {{"layers", {0, 5}}}; },
       "profile.json.tied_parameters: expected a JSON array"},
      {"entry not an object", [](nlohmann::json& j) { j["tied_parameters"][0] = 3; },
       "profile.json.tied_parameters[0]: expected a JSON object, got 3"},
      {"no layers", [](nlohmann::json& j) { j["tied_parameters"][0].erase("layers"); },
       "profile.json.tied_parameters[0]: missing required field \"layers\""},
      {"layers not an array", [](nlohmann::json& j) { j["tied_parameters"][0]["layers"] = 5; },
       "profile.json.tied_parameters[0].layers: expected a JSON array, got 5"},
      {"no bytes", [](nlohmann::json& j) { j["tied_parameters"][0].erase("bytes"); },
       "profile.json.tied_parameters[0]: missing required field \"bytes\""},
      {"layer past the end", [](nlohmann::json& j) { j["tied_parameters"][0]["layers"] = {0, 6}; },
       "profile.json.tied_parameters[0].layers[1]: expected a layer index, a whole number in [0, 5] (the profile has 6 layers), got 6"},
      {"negative layer", [](nlohmann::json& j) { j["tied_parameters"][0]["layers"] = {-1, 5}; },
       "profile.json.tied_parameters[0].layers[0]: expected a layer index"},
      {"layer not a whole number", [](nlohmann::json& j) { j["tied_parameters"][0]["layers"] = {0, "wte"}; },
       "profile.json.tied_parameters[0].layers[1]: expected a layer index, a whole number in [0, 5] (the profile has 6 layers), got \"wte\""},
      {"one layer", [](nlohmann::json& j) { j["tied_parameters"][0]["layers"] = {2}; },
       "profile.json.tied_parameters[0].layers: lists 1 layer(s); a tied parameter is shared by at least 2 distinct layers"},
      {"a layer twice", [](nlohmann::json& j) { j["tied_parameters"][0]["layers"] = {0, 3, 0}; },
       "profile.json.tied_parameters[0].layers[2]: layer 0 is listed twice"},
      {"zero bytes", [](nlohmann::json& j) { j["tied_parameters"][0]["bytes"] = 0; },
       "profile.json.tied_parameters[0].bytes: expected a byte count > 0, got 0"},
      {"negative bytes", [](nlohmann::json& j) { j["tied_parameters"][0]["bytes"] = -4; },
       "profile.json.tied_parameters[0].bytes: expected a number >= 0, got -4"},
      {"more than a layer holds", [](nlohmann::json& j) { j["tied_parameters"][0]["bytes"] = 101; },
       "profile.json.tied_parameters[0].bytes: 101 is more than layers[0] (\"l0\")'s param_bytes (100)"},
      {"together more than a layer holds",
       [](nlohmann::json& j) { j["tied_parameters"].push_back({{"layers", {0, 1}}, {"bytes", 40}}); },
       "profile.json.tied_parameters[1].bytes: with the tied parameters before it, layers[0] (\"l0\") holds 104 bytes "
       "of tied parameters, more than its param_bytes (100)"},
      {"empty name", [](nlohmann::json& j) { j["tied_parameters"][0]["name"] = ""; },
       "profile.json.tied_parameters[0].name: expected a non-empty string"},
  };
  for (const BadCase& c : cases) {
    nlohmann::json json = SixLayers();
    c.edit(json);
    const std::string error = Error(json);
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.what << ":\n  got      " << error
                                                         << "\n  expected " << c.expected;
    EXPECT_EQ(error.find('\n'), std::string::npos) << c.what << ": not one line: " << error;
  }
  // Inside a plan the path says so.
  Expected<Profile> nested = ProfileFromJson([] {
    nlohmann::json j = SixLayers();
    j["tied_parameters"][0]["bytes"] = 0;
    return j;
  }(), "plan.json.profile");
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("plan.json.profile.tied_parameters[0].bytes"), std::string::npos)
      << nested.status().message();
}

TEST(TiedParameters, CheckTiedParametersOnAProfileBuiltInCode) {
  Expected<Profile> profile = ProfileFromJson(SixLayers(), "profile.json");
  ASSERT_TRUE(profile.ok());
  EXPECT_TRUE(CheckTiedParameters(*profile, "built").ok());
  profile->tied_parameters.push_back({{4, 2}, 10, "any order"});
  EXPECT_TRUE(CheckTiedParameters(*profile, "built").ok());
  profile->tied_parameters.push_back({{4, 9}, 10, ""});
  EXPECT_NE(CheckTiedParameters(*profile, "built").message().find("built.tied_parameters[2].layers[1]"), std::string::npos)
      << CheckTiedParameters(*profile, "built").message();
}

// Independent of the helper (tests/core/tied_bytes_by_hand.h).
int64_t BruteForce(const Profile& profile, const LayerRanges& ranges) {
  std::set<int> held;
  for (const auto& [first, end] : ranges) {
    for (int l = first; l < end; ++l) held.insert(l);
  }
  return TiedBytesByHand(profile, held);
}

TEST(TiedParameters, CountedOncePerSetOfLayers) {
  Expected<Profile> profile = ProfileFromJson(SixLayers(), "profile.json");
  ASSERT_TRUE(profile.ok());
  const int64_t all = 100 + 200 + 300 + 400 + 500 + 600;
  // One stage holding every layer: the 64 bytes once.
  EXPECT_EQ(ParamBytesOfLayers(*profile, 0, 6), all - 64);
  EXPECT_EQ(TiedBytesCountedTwice(*profile, 0, 6), 64);
  // Two stages [0, 3) and [3, 6): each holds a copy.
  EXPECT_EQ(ParamBytesOfLayers(*profile, 0, 3), 600);
  EXPECT_EQ(ParamBytesOfLayers(*profile, 3, 6), 1500);
  EXPECT_EQ(TiedBytesCountedTwice(*profile, 0, 3), 0);
  // One rank holding both (interleaved): once.
  EXPECT_EQ(ParamBytesOfLayers(*profile, LayerRanges{{0, 3}, {3, 6}}), all - 64);
  EXPECT_EQ(ParamBytesOfLayers(*profile, LayerRanges{{0, 1}, {5, 6}}), 100 + 600 - 64);
  EXPECT_EQ(ParamBytesOfLayers(*profile, LayerRanges{}), 0);

  // Every set of ranges against the brute force, with a three-layer parameter added.
  profile->tied_parameters.push_back({{1, 2, 4}, 150, "shared"});
  ASSERT_TRUE(CheckTiedParameters(*profile, "p").ok());
  for (int mask = 0; mask < (1 << 6); ++mask) {
    LayerRanges ranges;
    for (int l = 0; l < 6; ++l) {
      if ((mask >> l) & 1) ranges.emplace_back(l, l + 1);
    }
    EXPECT_EQ(ParamBytesOfLayers(*profile, ranges), BruteForce(*profile, ranges)) << "mask " << mask;
  }
  for (int a = 0; a < 6; ++a) {
    for (int e = a + 1; e <= 6; ++e) {
      EXPECT_EQ(ParamBytesOfLayers(*profile, a, e), BruteForce(*profile, {{a, e}})) << a << " " << e;
    }
  }
  // Without tied parameters: the plain sum.
  profile->tied_parameters.clear();
  EXPECT_EQ(ParamBytesOfLayers(*profile, 0, 6), all);
  EXPECT_EQ(TiedBytesCountedTwice(*profile, LayerRanges{{0, 3}, {3, 6}}), 0);
}

}  // namespace
}  // namespace gpipe
