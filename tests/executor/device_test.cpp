// Device placement without a GPU: which CUDA device a rank binds (and the error when its local rank
// has no GPU), the NCCL environment defaults, a checkpoint loaded onto an explicitly given device,
// and the memory meter's reserved bytes on CPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "executor/checkpoint.h"
#include "executor/layers.h"
#include "executor/memory_meter.h"
#include "executor/worker.h"
#include "tests/executor/test_plans.h"

namespace gpipe::executor {
namespace {

using testing::TinyGpt;

// Removes a folder and the files in it. File by file: std::filesystem::remove_all resolves to
// libtorch's copy in this binary, which crashes.
void RemoveFolder(const std::string& dir) {
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec)) files.push_back(entry.path());
  for (auto it = files.rbegin(); it != files.rend(); ++it) std::filesystem::remove(*it, ec);
  std::filesystem::remove(dir, ec);
}

TEST(CudaDeviceTest, LocalRankZeroWithOneGpuBindsDeviceZero) {
  Expected<int> device = CudaDeviceForLocalRank(0, 1, "SLURM_LOCALID", std::string("3"));
  ASSERT_TRUE(device.ok()) << device.status().message();
  EXPECT_EQ(*device, 0);
  Expected<int> fourth = CudaDeviceForLocalRank(3, 8, "LOCAL_RANK");
  ASSERT_TRUE(fourth.ok()) << fourth.status().message();
  EXPECT_EQ(*fourth, 3);
}

TEST(CudaDeviceTest, SlurmTaskBoundToOneGpuNamesTheVariables) {
  // SLURM with --gpus-per-task=1: the second task of the node sees one GPU, its own.
  Expected<int> device = CudaDeviceForLocalRank(1, 1, "SLURM_LOCALID", std::string("1"));
  ASSERT_FALSE(device.ok());
  const std::string& message = device.status().message();
  EXPECT_NE(message.find("SLURM_LOCALID=1"), std::string::npos) << message;
  EXPECT_NE(message.find("CUDA_VISIBLE_DEVICES=\"1\""), std::string::npos) << message;
  EXPECT_NE(message.find("local rank would have to be 0"), std::string::npos) << message;
  EXPECT_NE(message.find("Fix:"), std::string::npos) << message;
}

TEST(CudaDeviceTest, TorchrunWithTooFewGpusNamesTheVariables) {
  Expected<int> device = CudaDeviceForLocalRank(2, 2, "LOCAL_RANK");
  ASSERT_FALSE(device.ok());
  const std::string& message = device.status().message();
  EXPECT_NE(message.find("LOCAL_RANK=2"), std::string::npos) << message;
  EXPECT_NE(message.find("CUDA_VISIBLE_DEVICES is not set"), std::string::npos) << message;
  EXPECT_NE(message.find("--nproc-per-node"), std::string::npos) << message;
}

TEST(CudaDeviceTest, NoVisibleGpuIsRefused) {
  Expected<int> device = CudaDeviceForLocalRank(0, 0, "LOCAL_RANK", std::string(""));
  ASSERT_FALSE(device.ok());
  EXPECT_NE(device.status().message().find("CUDA_VISIBLE_DEVICES=\"\""), std::string::npos)
      << device.status().message();
}

TEST(WorkerEnvTest, RecordsWhichVariableGaveTheLocalRank) {
  Expected<std::optional<WorkerEnv>> slurm =
      WorkerEnvFrom({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}});
  ASSERT_TRUE(slurm.ok()) << slurm.status().message();
  ASSERT_TRUE(slurm->has_value());
  EXPECT_EQ((*slurm)->local_rank, 1);
  EXPECT_EQ((*slurm)->local_rank_var, "SLURM_LOCALID");

  Expected<std::optional<WorkerEnv>> torchrun =
      WorkerEnvFrom({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}});
  ASSERT_TRUE(torchrun.ok()) << torchrun.status().message();
  ASSERT_TRUE(torchrun->has_value());
  EXPECT_EQ((*torchrun)->local_rank_var, "LOCAL_RANK");

  Expected<std::optional<WorkerEnv>> unset = WorkerEnvFrom({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  ASSERT_TRUE(unset.ok()) << unset.status().message();
  ASSERT_TRUE(unset->has_value());
  EXPECT_EQ((*unset)->local_rank, 0);
  EXPECT_EQ((*unset)->local_rank_var, "");
}

std::map<std::string, std::string> AsMap(const std::vector<std::pair<std::string, std::string>>& pairs) {
  return {pairs.begin(), pairs.end()};
}

TEST(NcclEnvironmentTest, DefaultsKeepTheWatchdogFromKillingTheProcess) {
  const auto defaults = AsMap(NcclEnvironmentDefaults(std::chrono::milliseconds(60000), {}));
  EXPECT_EQ(defaults.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "2");  // CleanUpOnly
  EXPECT_EQ(defaults.at("TORCH_NCCL_DUMP_ON_TIMEOUT"), "0");
  EXPECT_EQ(defaults.at("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC"), "1000");
  EXPECT_EQ(defaults.at("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"), "480");
  EXPECT_EQ(defaults.count("TORCH_NCCL_BLOCKING_WAIT"), 0u);
  EXPECT_EQ(defaults.count("NCCL_BLOCKING_WAIT"), 0u);
  // A --timeout longer than the heartbeat's default moves the heartbeat past it.
  const auto long_run = AsMap(NcclEnvironmentDefaults(std::chrono::milliseconds(3600500), {}));
  EXPECT_EQ(long_run.at("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"), "3661");
}

TEST(NcclEnvironmentTest, TheUsersOwnSettingsWin) {
  const auto defaults = AsMap(NcclEnvironmentDefaults(
      std::chrono::milliseconds(60000),
      {{"NCCL_ASYNC_ERROR_HANDLING", "1"}, {"TORCH_NCCL_DUMP_ON_TIMEOUT", "1"}, {"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "9"}}));
  EXPECT_EQ(defaults.count("TORCH_NCCL_ASYNC_ERROR_HANDLING"), 0u);  // the legacy name counts
  EXPECT_EQ(defaults.count("TORCH_NCCL_DUMP_ON_TIMEOUT"), 0u);
  EXPECT_EQ(defaults.count("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC"), 0u);  // their dump keeps its time
  EXPECT_EQ(defaults.count("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"), 0u);
}

// One stage of the tiny GPT, built as every rank builds it (same initial weights each time).
std::vector<StageSetup> OneStage(const ModelSpec& model) {
  std::vector<StageSetup> stages(1);
  auto layers = BuildLayers(model, 0, model.num_layers(), torch::kCPU);
  EXPECT_TRUE(layers.ok()) << layers.status().message();
  stages[0].layers = std::move(*layers);
  return stages;
}

void FakeGradients(const std::vector<torch::Tensor>& params, double value) {
  for (const torch::Tensor& p : params) p.mutable_grad() = torch::full_like(p, value);
}

TEST(CheckpointDeviceTest, LoadsOntoTheDeviceItIsGiven) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("gpipe-device-test-" + std::to_string(::getpid()))).string();
  RemoveFolder(dir);
  const ModelSpec model = TinyGpt(1);

  // Train one step so the optimizer has state (Adam's moments), then save.
  std::vector<StageSetup> saved = OneStage(model);
  const std::vector<torch::Tensor> saved_params = ParametersOf(saved[0].layers);
  torch::optim::Adam saved_optimizer(saved_params, torch::optim::AdamOptions(0.01));
  FakeGradients(saved_params, 0.5);
  saved_optimizer.step();
  ASSERT_TRUE(SaveRankState(dir, 1, 0, saved, saved_optimizer).ok());

  // A fresh rank (initial weights, empty optimizer) loads it with the device given explicitly.
  std::vector<StageSetup> loaded = OneStage(model);
  const std::vector<torch::Tensor> loaded_params = ParametersOf(loaded[0].layers);
  torch::optim::Adam loaded_optimizer(loaded_params, torch::optim::AdamOptions(0.01));
  const Status status = LoadRankState(dir, 1, 0, loaded, loaded_optimizer, torch::Device(torch::kCPU));
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(saved_params.size(), loaded_params.size());
  for (size_t i = 0; i < saved_params.size(); ++i) {
    EXPECT_TRUE(loaded_params[i].device().is_cpu());
    EXPECT_TRUE(torch::equal(saved_params[i], loaded_params[i])) << "parameter " << i;
  }
  EXPECT_EQ(loaded_optimizer.state().size(), saved_optimizer.state().size());
  for (const auto& state : loaded_optimizer.state()) {
    const auto& adam = static_cast<const torch::optim::AdamParamState&>(*state.second);
    EXPECT_TRUE(adam.exp_avg().device().is_cpu());
    EXPECT_TRUE(adam.exp_avg_sq().device().is_cpu());
  }

  // The optimizer state came back: one more step with the same gradients stays equal.
  FakeGradients(saved_params, -0.25);
  FakeGradients(loaded_params, -0.25);
  saved_optimizer.step();
  loaded_optimizer.step();
  for (size_t i = 0; i < saved_params.size(); ++i) {
    EXPECT_TRUE(torch::equal(saved_params[i], loaded_params[i])) << "parameter " << i << " after a step";
  }

  // Without a device the loader uses the one the stages are on (CPU here).
  std::vector<StageSetup> again = OneStage(model);
  torch::optim::Adam again_optimizer(ParametersOf(again[0].layers), torch::optim::AdamOptions(0.01));
  EXPECT_TRUE(LoadRankState(dir, 1, 0, again, again_optimizer).ok());
  RemoveFolder(dir);
}

TEST(MemoryMeterTest, CpuReservesNothing) {
  MemoryMeter meter(torch::kCPU);
  torch::Tensor t = torch::ones({1024});
  EXPECT_GT(meter.CurrentBytes(), 0);
  EXPECT_EQ(meter.ReservedBytes(), 0);
  EXPECT_EQ(meter.PeakReservedBytes(), 0);
  EXPECT_NE(meter.Describe().find("reserved"), std::string::npos);
}

}  // namespace
}  // namespace gpipe::executor
