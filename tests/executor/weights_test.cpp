// The whole model's weights as one safetensors file (executor/weights.h): what a K=2 run saves is
// every rank's trained parameters under the model's own names, loads into a K=1 build of the
// model as it was trained, and a file with a missing or mis-shaped tensor is one error naming it.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/safetensors.h"
#include "executor/layers.h"
#include "executor/trainer.h"
#include "executor/weights.h"
#include "executor/worker.h"
#include "tests/executor/test_plans.h"

namespace gpipe::executor {
namespace {

using testing::EvenPlan;
using testing::TinyGpt;

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("gpipe-weights-" + name)).string();
}

// `plan`'s stages of `model`, all on this rank, as a runner would hold them.
std::vector<StageSetup> AllStages(const Plan& plan, const ModelSpec& model) {
  std::vector<StageSetup> stages;
  for (int s = 0; s < plan.num_stages(); ++s) {
    const StagePlan& sp = plan.stages[static_cast<size_t>(s)];
    stages.push_back({s, 0, BuildLayers(model, sp.first_layer, sp.end_layer, torch::kCPU).value()});
  }
  return stages;
}

std::vector<torch::Tensor> ParametersOfStages(std::vector<StageSetup>& stages) {
  std::vector<torch::Tensor> params;
  for (StageSetup& stage : stages) {
    for (const torch::Tensor& p : ParametersOf(stage.layers)) params.push_back(p);
  }
  return params;
}

TEST(WeightsTest, WhatAPipelineSavesLoadsIntoOneRank) {
  const ModelSpec model = TinyGpt(/*blocks=*/3);
  const Plan plan = EvenPlan(model.num_layers(), ScheduleKind::k1F1B, 2, 1, 2, /*replicas=*/2, 8, false, Optimizer::kSgd);
  const std::string path = TempPath("k2.safetensors");
  RunSettings settings;
  settings.steps = 2;
  settings.save_weights = path;
  std::vector<RankOutcome> outcomes;
  Expected<RunRecord> record = TrainInProcess(plan, model, settings, &outcomes);
  ASSERT_TRUE(record.ok()) << record.status().message();
  Expected<SafetensorsFile> file = OpenSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_NE(file->Find("embedding.tokens.weight"), nullptr) << "names: built-in layer name, then its own";
  EXPECT_EQ(file->metadata.at("model"), model.name);
  for (int r = 0; r < 4; ++r) EXPECT_FALSE(std::filesystem::exists(path + ".part-" + std::to_string(r))) << r;

  // One rank holding every layer, started from the file: the trained parameters, in order.
  const Plan one = EvenPlan(model.num_layers(), ScheduleKind::kGpipe, 1, 1, 1, 1, 8, false, Optimizer::kSgd);
  std::vector<StageSetup> stages = AllStages(one, model);
  ASSERT_TRUE(LoadWeights(path, one, model, stages).ok());
  std::vector<torch::Tensor> trained;
  for (const RankOutcome& o : outcomes) {
    if (o.record.replica == 0) trained.insert(trained.end(), o.parameters.begin(), o.parameters.end());
  }
  const std::vector<torch::Tensor> loaded = ParametersOfStages(stages);
  ASSERT_EQ(loaded.size(), trained.size());
  for (size_t i = 0; i < loaded.size(); ++i) EXPECT_TRUE(torch::equal(loaded[i], trained[i])) << i;
  // ... and they differ from the seeded start, so the test would catch a file of initial weights.
  std::vector<StageSetup> fresh = AllStages(one, model);
  EXPECT_FALSE(torch::equal(ParametersOfStages(fresh)[0], trained[0]));
  std::filesystem::remove(path);
}

TEST(WeightsTest, AMissingOrMisShapedTensorIsOneLineNamingIt) {
  const ModelSpec model = TinyGpt(/*blocks=*/1);
  const Plan one = EvenPlan(model.num_layers(), ScheduleKind::kGpipe, 1, 1, 1, 1, 8, false, Optimizer::kSgd);
  std::vector<StageSetup> stages = AllStages(one, model);
  const std::string path = TempPath("bad.safetensors");
  const std::vector<float> values(16 * 16, 0.5f);
  ASSERT_TRUE(WriteSafetensors(path, {{"embedding.tokens.weight", "F32", {16, 8}, reinterpret_cast<const char*>(values.data()), 16 * 8 * 4}}, {}).ok());
  Status status = LoadWeights(path, one, model, stages);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("tensor \"embedding.tokens.weight\" has shape [16, 8] where layer 0's tokens.weight needs [16, 16]"),
            std::string::npos) << status.message();
  ASSERT_TRUE(WriteSafetensors(path, {{"embedding.tokens.weight", "F32", {16, 16}, reinterpret_cast<const char*>(values.data()), 16 * 16 * 4}}, {}).ok());
  status = LoadWeights(path, one, model, stages);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("has no tensor \"embedding.positions.weight\" for layer 0's positions.weight [8, 16]; it holds 1 (embedding.tokens.weight)"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("was it saved from this model?"), std::string::npos) << status.message();
  EXPECT_EQ(status.message().find('\n'), std::string::npos) << status.message();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace gpipe::executor
