// The "training" section of a model file (core/training.h): the learning-rate schedule against
// its closed forms, the section's round trip, and one line naming the field for bad settings.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/model.h"
#include "core/run_record.h"
#include "core/training.h"

namespace gpipe {
namespace {

TrainingSpec Schedule(LrDecay decay, int64_t warmup, int64_t decay_steps, double peak, double min) {
  TrainingSpec t;
  t.learning_rate = peak;
  t.schedule = {warmup, decay, decay_steps, min};
  return t;
}

TEST(LearningRateTest, WarmUpRisesLinearlyToThePeak) {
  const TrainingSpec t = Schedule(LrDecay::kCosine, 4, 20, 1e-3, 1e-4);
  for (int64_t step = 0; step < 4; ++step) {
    EXPECT_DOUBLE_EQ(LearningRateAt(t, step), 1e-3 * static_cast<double>(step + 1) / 4.0) << step;
  }
  EXPECT_DOUBLE_EQ(LearningRateAt(t, 4), 1e-3);  // the decay's start
}

TEST(LearningRateTest, CosineAndLinearDecayMatchTheirClosedForms) {
  const double peak = 6e-4, min = 6e-5;
  const TrainingSpec cosine = Schedule(LrDecay::kCosine, 10, 110, peak, min);
  const TrainingSpec linear = Schedule(LrDecay::kLinear, 10, 110, peak, min);
  for (int64_t step = 10; step <= 110; step += 7) {
    const double progress = static_cast<double>(step - 10) / 100.0;
    EXPECT_NEAR(LearningRateAt(cosine, step), min + 0.5 * (1 + std::cos(std::numbers::pi * progress)) * (peak - min), 1e-15);
    EXPECT_NEAR(LearningRateAt(linear, step), min + (1 - progress) * (peak - min), 1e-15);
  }
  EXPECT_NEAR(LearningRateAt(cosine, 60), (peak + min) / 2, 1e-15);  // half way: the mean
  for (int64_t step : {110, 111, 5000}) {
    EXPECT_DOUBLE_EQ(LearningRateAt(cosine, step), min);
    EXPECT_DOUBLE_EQ(LearningRateAt(linear, step), min);
  }
}

TEST(LearningRateTest, ConstantWithoutAScheduleAndAfterWarmUp) {
  TrainingSpec t;
  t.learning_rate = 0.01;
  EXPECT_DOUBLE_EQ(LearningRateAt(t, 0), 0.01);
  EXPECT_DOUBLE_EQ(LearningRateAt(t, 999), 0.01);
  t.schedule.warmup_steps = 2;
  EXPECT_DOUBLE_EQ(LearningRateAt(t, 0), 0.005);
  EXPECT_DOUBLE_EQ(LearningRateAt(t, 2), 0.01);
}

nlohmann::json ModelWith(const nlohmann::json& training) {
  nlohmann::json json = nlohmann::json::parse(R"({"format":"gpipe-model/1","name":"m",
    "input":{"kind":"tokens","vocab":8,"seq_len":4},"data":{"kind":"random-tokens"},
    "layers":[{"type":"embedding","vocab":8,"dim":4,"max_seq":4},{"type":"lm-head","dim":4,"vocab":8}]})");
  if (!training.is_null()) json["training"] = training;
  return json;
}

std::string Error(const nlohmann::json& json) {
  Expected<ModelSpec> model = ModelFromJson(json, "m.json", "");
  return model.ok() ? "ok" : model.status().message();
}

TEST(TrainingSectionTest, ReadsEverySettingAndRoundTrips) {
  const nlohmann::json gpt3 = nlohmann::json::parse(R"({"learning_rate":6e-4,"betas":[0.9,0.95],"eps":1e-8,
    "weight_decay":0.1,"clip_grad_norm":1.0,
    "schedule":{"warmup_steps":100,"decay":"cosine","decay_steps":5000,"min_learning_rate":6e-5}})");
  Expected<ModelSpec> model = ModelFromJson(ModelWith(gpt3), "m.json", "");
  ASSERT_TRUE(model.ok()) << model.status().message();
  const TrainingSpec& t = model->training;
  EXPECT_DOUBLE_EQ(t.learning_rate, 6e-4);
  EXPECT_DOUBLE_EQ(t.betas[1], 0.95);
  EXPECT_DOUBLE_EQ(t.weight_decay, 0.1);
  EXPECT_FALSE(t.decay_1d);
  EXPECT_DOUBLE_EQ(t.clip_grad_norm, 1.0);
  EXPECT_EQ(t.schedule.decay, LrDecay::kCosine);
  EXPECT_EQ(t.schedule.decay_steps, 5000);
  Expected<ModelSpec> again = ModelFromJson(ModelToJson(*model), "again", "");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(ModelToJson(*again), ModelToJson(*model));
}

TEST(TrainingSectionTest, TheOlderTopLevelLearningRateStillReads) {
  nlohmann::json json = ModelWith(nullptr);
  json["learning_rate"] = 0.05;
  Expected<ModelSpec> model = ModelFromJson(json, "m.json", "");
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_DOUBLE_EQ(model->training.learning_rate, 0.05);
  EXPECT_DOUBLE_EQ(ModelToJson(*model)["training"]["learning_rate"].get<double>(), 0.05);
  EXPECT_FALSE(ModelToJson(*model).contains("learning_rate"));
  json["training"] = {{"learning_rate", 0.01}};
  EXPECT_EQ(Error(json), "m.json.training.learning_rate: is given here and at the top of the model; keep this one "
                         "and remove the other");
}

TEST(TrainingSectionTest, BadSettingsNameTheFieldAndTheFix) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"clip_grad_nrom":1})", "m.json.training.clip_grad_nrom: is not a setting here; known:"},
      {R"({"clip_grad_nrom":1})", "did you mean \"clip_grad_norm\"?"},
      {R"({"betas":[0.9]})", "m.json.training.betas: is [0.9]; give two numbers in [0, 1), e.g. [0.9, 0.95]"},
      {R"({"betas":[0.9,1.0]})", "m.json.training.betas: is [0.9,1.0]"},
      {R"({"learning_rate":0})", "m.json.training.learning_rate: expected a number > 0, got 0"},
      {R"({"weight_decay":-0.1})", "m.json.training.weight_decay"},
      {R"({"momentum":1})", "m.json.training.momentum: is 1.000000; give a number in [0, 1)"},
      {R"({"clip_grad_norm":-1})", "m.json.training.clip_grad_norm"},
      {R"({"schedule":{"decay":"cosin","decay_steps":10}})", "m.json.training.schedule.decay: unknown decay \"cosin\""},
      {R"({"schedule":{"decay":"cosine"}})",
       "m.json.training.schedule.decay_steps: is missing; a \"cosine\" decay needs the step at which it reaches"},
      {R"({"schedule":{"warmup_steps":10,"decay":"linear","decay_steps":10}})",
       "m.json.training.schedule.decay_steps: is 10, not after the warm-up's 10 steps"},
      {R"({"learning_rate":1e-3,"schedule":{"decay":"cosine","decay_steps":10,"min_learning_rate":0.01}})",
       "m.json.training.schedule.min_learning_rate: is above the learning rate it decays from"},
      {R"({"schedule":{"decay_steps":10}})",
       "m.json.training.schedule.decay_steps: only applies to a \"linear\" or \"cosine\" decay"},
      {R"({"schedule":{"warmup_step":10}})", "did you mean \"warmup_steps\"?"},
      {R"([1])", "m.json.training"},
  };
  for (const auto& [training, expected] : cases) {
    const std::string error = Error(ModelWith(nlohmann::json::parse(training)));
    EXPECT_NE(error.find(expected), std::string::npos) << training << "\n  got: " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(TrainingSectionTest, StepsKeepTheirLearningRateAndGradNorm) {
  StepRecord step{3, 2.5, 10.0, 6e-4, 1.25};
  Expected<StepRecord> again = StepRecordFromJson(StepRecordToJson(step), "step");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_DOUBLE_EQ(*again->learning_rate, 6e-4);
  EXPECT_DOUBLE_EQ(*again->grad_norm, 1.25);
  step.grad_norm = std::nan("");  // fp16 overflow: null in the file, NaN again when read
  again = StepRecordFromJson(nlohmann::json::parse(StepRecordToJson(step).dump()), "step");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_TRUE(std::isnan(*again->grad_norm));
  EXPECT_FALSE(StepRecordFromJson(nlohmann::json::parse(R"({"step":0,"loss":1,"time_ms":1})"), "s")->grad_norm);
  EXPECT_NE(StepRecordFromJson(nlohmann::json::parse(R"({"step":0,"loss":1,"time_ms":1,"grad_norm":"x"})"), "s")
                .status()
                .message()
                .find("s.grad_norm"),
            std::string::npos);
}

}  // namespace
}  // namespace gpipe
