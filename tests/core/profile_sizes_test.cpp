// A profile measured at several micro-batch sizes answers for any size: measured, interpolated
// between the nearest two, extrapolated beyond them (and says which).
#include <gtest/gtest.h>

#include <cmath>

#include "core/profile_sizes.h"
#include "core/step_costs.h"

namespace gpipe {
namespace {

// Layer times 1 ms per sample at size 4, 0.75 ms per sample at size 8 (better use of the device).
Profile TwoSizes() {
  Profile p;
  p.model = "m";
  p.device = "d";
  p.microbatch_size = 4;
  p.input_bytes = 32;
  LayerProfile l;
  l.name = "a";
  l.forward_ms = 4;
  l.backward_ms = 8;
  l.backward_weight_ms = 4;
  l.param_bytes = 100;
  l.activation_bytes = 400;
  l.output_bytes = 40;
  p.layers = {l};
  p.extra["measurements"] = nlohmann::json::parse(R"([
    {"microbatch_size": 4, "input_bytes": 32, "layers": [{"name": "a", "forward": {"median_ms": 4}, "backward": {"median_ms": 8},
      "backward_weight": {"median_ms": 4}, "param_bytes": 100, "activation_bytes": 400, "output_bytes": 40}]},
    {"microbatch_size": 8, "input_bytes": 64, "layers": [{"name": "a", "forward": {"median_ms": 6}, "backward": {"median_ms": 12},
      "backward_weight": {"median_ms": 5}, "param_bytes": 100, "activation_bytes": 800, "output_bytes": 80}]}])");
  return p;
}

TEST(ProfileSizesTest, ListsTheMeasuredSizes) {
  EXPECT_EQ(MeasuredMicrobatchSizes(TwoSizes()), (std::vector<int64_t>{4, 8}));
  Profile one = TwoSizes();
  one.extra.erase("measurements");
  EXPECT_EQ(MeasuredMicrobatchSizes(one), (std::vector<int64_t>{4}));
}

TEST(ProfileSizesTest, TheColocatedFiguresFollowTheSize) {
  Profile p = TwoSizes();
  StepCosts costs;
  costs.compute_scale = {{1.0, 0.0}, {1.1, 0.0}};
  costs.by_microbatch_size = {{4, {{1.0, 0.0}, {1.3, 0.0}}, {}, {}}, {8, {{1.0, 0.0}, {1.1, 0.0}}, {}, {}}};
  p.step_costs = costs;
  EXPECT_EQ(ProfileAtMicrobatch(p, 4).step_costs->compute_scale[1].median, 1.3);
  EXPECT_NEAR(ProfileAtMicrobatch(p, 6).step_costs->compute_scale[1].median, 1.3 - 0.2 * std::log(1.5) / std::log(2.0), 1e-12);
  EXPECT_EQ(ProfileAtMicrobatch(p, 16).step_costs->compute_scale[1].median, 1.1);
  EXPECT_EQ(ProfileAtMicrobatch(p, 16).step_costs->by_microbatch_size.size(), 2u);
}

TEST(ProfileSizesTest, MeasuredInterpolatedExtrapolated) {
  std::string note;
  const Profile at8 = ProfileAtMicrobatch(TwoSizes(), 8, &note);
  EXPECT_EQ(note, "");
  EXPECT_EQ(at8.microbatch_size, 8);
  EXPECT_DOUBLE_EQ(at8.layers[0].forward_ms, 6);
  EXPECT_EQ(at8.input_bytes, 64);

  const Profile at6 = ProfileAtMicrobatch(TwoSizes(), 6, &note);
  EXPECT_DOUBLE_EQ(at6.layers[0].forward_ms, 5);
  EXPECT_DOUBLE_EQ(at6.layers[0].backward_ms, 10);
  EXPECT_DOUBLE_EQ(*at6.layers[0].backward_weight_ms, 4.5);
  EXPECT_EQ(at6.layers[0].activation_bytes, 600);
  EXPECT_EQ(at6.layers[0].param_bytes, 100);
  EXPECT_EQ(note, "interpolated linearly to micro-batches of 6 from the sizes the profile measured (4, 8)");

  const Profile at16 = ProfileAtMicrobatch(TwoSizes(), 16, &note);
  EXPECT_DOUBLE_EQ(at16.layers[0].forward_ms, 10);
  EXPECT_EQ(at16.layers[0].output_bytes, 160);
  EXPECT_NE(note.find("extrapolated linearly to micro-batches of 16"), std::string::npos) << note;

  // A profile made for one size (as a planner's plan embeds) still says how it was made.
  std::string again;
  ProfileAtMicrobatch(at16, 16, &again);
  EXPECT_EQ(again, note);
}

TEST(ProfileSizesTest, TheFiguresMeasuredAsInsideAStageFollowTheSizesWhereMeasured) {
  // Each of the two on its own: the full backward's workspace and I's peak, each as inside a stage.
  for (const auto& [field, member] : kInnerFields) {
    SCOPED_TRACE(field);
    Profile p = TwoSizes();
    p.layers[0].*member = 100;  // the profile's own size, 4
    p.extra["measurements"][0]["layers"][0][field] = 100;
    p.extra["measurements"][1]["layers"][0][field] = 300;
    EXPECT_EQ(ProfileAtMicrobatch(p, 6).layers[0].*member, 200);
    EXPECT_EQ(ProfileAtMicrobatch(p, 8).layers[0].*member, 300);
    // One size without it: absent, so the held figure stands in (an upper bound), not a guess.
    p.extra["measurements"][1]["layers"][0].erase(field);
    EXPECT_EQ(ProfileAtMicrobatch(p, 6).layers[0].*member, std::nullopt);
    // A file round-trips it, and one without it reads as absent.
    Profile one = TwoSizes();
    one.extra.erase("measurements");
    one.layers[0].*member = 123;
    Expected<Profile> read = ProfileFromJson(ProfileToJson(one), "p.json");
    ASSERT_TRUE(read.ok()) << read.status().message();
    EXPECT_EQ(read->layers[0].*member, 123);
    for (const auto& [other, other_member] : kInnerFields) {
      if (other_member != member) {
        EXPECT_EQ(read->layers[0].*other_member, std::nullopt) << other;
      }
    }
    EXPECT_EQ(ProfileAtMicrobatch(one, 2).layers[0].*member, 62);  // scaled, rounded
    one.layers[0].*member = std::nullopt;
    read = ProfileFromJson(ProfileToJson(one), "p.json");
    ASSERT_TRUE(read.ok()) << read.status().message();
    EXPECT_EQ(read->layers[0].*member, std::nullopt);
    nlohmann::json bad = ProfileToJson(one);
    bad["layers"][0][field] = -1;
    const Expected<Profile> refused = ProfileFromJson(bad, "p.json");
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find(field), std::string::npos) << refused.status().message();
  }
  // Absent, the held figures stand in.
  Profile p = TwoSizes();
  p.layers[0].backward_workspace_bytes = 40;
  EXPECT_EQ(p.layers[0].InnerBackwardWorkspaceBytes(), 40);
  EXPECT_EQ(p.layers[0].InnerBackwardInputPeakBytes(), 0);  // no split backward measured
  p.layers[0].split_backward = SplitBackwardBytes{30, 0, 0, 0};
  EXPECT_EQ(p.layers[0].InnerBackwardInputPeakBytes(), 30);
  p.layers[0].inner_backward_input_peak_bytes = 20;
  EXPECT_EQ(p.layers[0].InnerBackwardInputPeakBytes(), 20);
  // How many tensors leave the layer (1 is not written) round-trips and follows the sizes.
  Profile one = TwoSizes();
  one.extra.erase("measurements");
  one.layers[0].output_tensors = 3;
  Expected<Profile> read = ProfileFromJson(ProfileToJson(one), "p.json");
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->layers[0].output_tensors, 3);
  EXPECT_EQ(ProfileAtMicrobatch(one, 2).layers[0].output_tensors, 3);
  nlohmann::json bad = ProfileToJson(one);
  bad["layers"][0]["output_tensors"] = 0;
  EXPECT_FALSE(ProfileFromJson(bad, "p.json").ok());
}

// The forward under no_grad (what a remat stage's forward runs) follows the sizes where every
// size measured it, and is absent where one did not (it then costs the recorded forward).
TEST(ProfileSizesTest, TheNoGradForwardFollowsTheSizes) {
  Profile p = TwoSizes();
  p.layers[0].forward_no_grad_ms = 3;
  p.extra["measurements"][0]["layers"][0]["forward_no_grad"] = {{"median_ms", 3}};
  p.extra["measurements"][1]["layers"][0]["forward_no_grad"] = {{"median_ms", 4}};
  EXPECT_DOUBLE_EQ(*ProfileAtMicrobatch(p, 8).layers[0].forward_no_grad_ms, 4);
  EXPECT_DOUBLE_EQ(*ProfileAtMicrobatch(p, 6).layers[0].forward_no_grad_ms, 3.5);
  EXPECT_DOUBLE_EQ(*ProfileAtMicrobatch(p, 16).layers[0].forward_no_grad_ms, 6);
  // Round trip through the file.
  Expected<Profile> read = ProfileFromJson(ProfileToJson(p), "p.json");
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_DOUBLE_EQ(*read->layers[0].forward_no_grad_ms, 3);
  EXPECT_DOUBLE_EQ(*ProfileAtMicrobatch(*read, 6).layers[0].forward_no_grad_ms, 3.5);

  p.extra["measurements"][1]["layers"][0].erase("forward_no_grad");
  const Profile at6 = ProfileAtMicrobatch(p, 6);
  EXPECT_FALSE(at6.layers[0].forward_no_grad_ms.has_value());
  EXPECT_DOUBLE_EQ(at6.layers[0].ForwardNoGradMs(), 5);
  Profile one = TwoSizes();
  one.extra.erase("measurements");
  one.layers[0].forward_no_grad_ms = 3;
  EXPECT_DOUBLE_EQ(*ProfileAtMicrobatch(one, 2).layers[0].forward_no_grad_ms, 1.5);
  nlohmann::json negative = ProfileToJson(one);
  negative["layers"][0]["forward_no_grad_ms"] = -1;
  EXPECT_NE(ProfileFromJson(negative, "p.json").status().message().find("forward_no_grad_ms"), std::string::npos);
}

TEST(ProfileSizesTest, OneSizeScalesLinearly) {
  Profile one = TwoSizes();
  one.extra.erase("measurements");
  std::string note;
  const Profile at2 = ProfileAtMicrobatch(one, 2, &note);
  EXPECT_DOUBLE_EQ(at2.layers[0].forward_ms, 2);
  EXPECT_EQ(at2.layers[0].activation_bytes, 200);
  EXPECT_NE(note.find("scaled linearly"), std::string::npos);
}

TEST(ProfileSizesTest, TheSplitBackwardsBytesFollowTheSizesAndComeAllFourOrNone) {
  Profile p = TwoSizes();
  p.layers[0].split_backward = SplitBackwardBytes{100, 10, 50, 20};  // the profile's own size, 4
  const auto put = [&p](int m, int64_t scale) {
    nlohmann::json& l = p.extra["measurements"][m]["layers"][0];
    l["backward_input_peak_bytes"] = 100 * scale;
    l["weight_pass_cut_bytes"] = 10 * scale;
    l["backward_weight_peak_bytes"] = 50 * scale;
    l["backward_weight_freed_bytes"] = 20 * scale;
  };
  put(0, 1);
  put(1, 3);
  const std::optional<SplitBackwardBytes> mixed = ProfileAtMicrobatch(p, 6).layers[0].split_backward;
  ASSERT_TRUE(mixed.has_value());
  EXPECT_EQ(mixed->input_peak, 200);
  EXPECT_EQ(mixed->weight_cut, 20);
  EXPECT_EQ(mixed->weight_peak, 100);
  EXPECT_EQ(mixed->weight_freed, 40);
  // One size without them: absent, so the full backward's workspace stands in.
  p.extra["measurements"][1]["layers"][0].erase("backward_input_peak_bytes");
  EXPECT_EQ(ProfileAtMicrobatch(p, 6).layers[0].split_backward.has_value(), false);
  // A file round-trips them, scaled with the micro-batch where one size was measured.
  Profile one = TwoSizes();
  one.extra.erase("measurements");
  one.layers[0].split_backward = SplitBackwardBytes{101, 11, 51, 21};
  Expected<Profile> read = ProfileFromJson(ProfileToJson(one), "p.json");
  ASSERT_TRUE(read.ok()) << read.status().message();
  ASSERT_TRUE(read->layers[0].split_backward.has_value());
  EXPECT_EQ(read->layers[0].split_backward->weight_freed, 21);
  EXPECT_EQ(ProfileAtMicrobatch(one, 8).layers[0].split_backward->input_peak, 202);
  // Three of the four: an error that names the missing one and what to do.
  nlohmann::json bad = ProfileToJson(one);
  bad["layers"][0].erase("weight_pass_cut_bytes");
  Expected<Profile> partial = ProfileFromJson(bad, "p.json");
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().message().find("weight_pass_cut_bytes"), std::string::npos) << partial.status().message();
  EXPECT_NE(partial.status().message().find("profile the model again"), std::string::npos) << partial.status().message();
  bad = ProfileToJson(one);
  bad["layers"][0]["backward_weight_peak_bytes"] = -5;
  EXPECT_FALSE(ProfileFromJson(bad, "p.json").ok());
}

}  // namespace
}  // namespace gpipe
