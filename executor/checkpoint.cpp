#include "executor/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/files.h"
#include "core/json_reader.h"

namespace gpipe::executor {
namespace {

namespace fs = std::filesystem;

std::string StepDir(const std::string& dir, int step) { return (fs::path(dir) / ("step-" + std::to_string(step))).string(); }
std::string RankFile(const std::string& dir, int step, int rank) {
  return (fs::path(StepDir(dir, step)) / ("rank-" + std::to_string(rank) + ".pt")).string();
}
std::string Key(const StageSetup& stage, size_t layer, const std::string& name) {
  return "stage" + std::to_string(stage.stage) + "/" + std::to_string(layer) + "/" + name;
}

// Where the stages' tensors are now: the rank's device.
torch::Device DeviceOfStages(std::vector<StageSetup>& stages) {
  for (StageSetup& stage : stages) {
    for (auto& layer : stage.layers) {
      for (auto& [name, tensor] : layer->State()) {
        if (tensor.defined()) return tensor.device();
      }
    }
  }
  return torch::kCPU;
}

}  // namespace

std::string CheckpointWeightsPath(const std::string& dir, int step) {
  return (fs::path(StepDir(dir, step)) / "model.safetensors").string();
}

Status SaveRankState(const std::string& dir, int step, int rank, std::vector<StageSetup>& stages,
                     torch::optim::Optimizer& optimizer) {
  const std::string path = RankFile(dir, step, rank);
  std::error_code error;
  fs::create_directories(StepDir(dir, step), error);
  if (error) return Status::Invalid(dir + ": cannot create the checkpoint directory: " + error.message());
  // Serialized in memory first: torch's file writer finishes the file in its destructor, where a
  // failed write (a full disk) aborts the process; our own writer reports it and keeps the old file.
  std::string bytes;
  try {
    torch::serialize::OutputArchive archive;
    for (StageSetup& stage : stages) {
      for (size_t i = 0; i < stage.layers.size(); ++i) {
        for (auto& [name, tensor] : stage.layers[i]->State()) archive.write(Key(stage, i, name), tensor.cpu());
      }
    }
    torch::serialize::OutputArchive optimizer_archive;
    optimizer.save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
    archive.save_to([&bytes](const void* data, size_t size) {
      bytes.append(static_cast<const char*>(data), size);
      return size;
    });
  } catch (const std::exception& e) {
    return Status::Invalid(path + ": could not serialize the checkpoint: " + e.what());
  }
  const Status written = WriteFileAtomically(path, bytes);
  if (written.ok()) return written;
  return Status::Invalid(written.message() + "; the checkpoint of step " + std::to_string(step) +
                         " is not committed, and " + (fs::path(dir) / "latest").string() +
                         " still names the last complete one");
}

Status CommitCheckpoint(const std::string& dir, const CheckpointInfo& info) {
  nlohmann::json manifest = {{"format", "gpipe-checkpoint/1"},
                             {"step", info.step},
                             {"fingerprint", info.fingerprint},
                             {"world_size", info.world_size}};
  for (int r = 0; r < info.world_size; ++r) {
    if (!fs::is_regular_file(RankFile(dir, info.step, r))) {
      return Status::Invalid(RankFile(dir, info.step, r) + ": missing; the checkpoint is not committed");
    }
  }
  GPIPE_RETURN_IF_ERROR(WriteFileAtomically((fs::path(StepDir(dir, info.step)) / "manifest.json").string(),
                                            manifest.dump(1) + "\n"));
  return WriteFileAtomically((fs::path(dir) / "latest").string(), "step-" + std::to_string(info.step) + "\n");
}

Expected<std::optional<CheckpointInfo>> LatestCheckpoint(const std::string& dir) {
  const fs::path latest = fs::path(dir) / "latest";
  if (!fs::exists(latest)) return std::optional<CheckpointInfo>();
  std::ifstream in(latest);
  std::string name;
  in >> name;
  if (name.rfind("step-", 0) != 0) {
    return Status::Invalid(latest.string() + ": holds \"" + name + "\", expected \"step-<N>\"; delete it to start over");
  }
  const std::string manifest_path = (fs::path(dir) / name / "manifest.json").string();
  Expected<nlohmann::json> manifest = LoadJsonFile(manifest_path);
  if (!manifest.ok()) return manifest.status();
  ObjectReader r(*manifest, manifest_path);
  CheckpointInfo info;
  info.step = static_cast<int>(r.Integer("step", 0, INT32_MAX));
  info.fingerprint = r.String("fingerprint");
  info.world_size = static_cast<int>(r.Integer("world_size", 1, INT32_MAX));
  if (!r.status().ok()) return r.status();
  return std::optional<CheckpointInfo>(info);
}

Status LoadRankState(const std::string& dir, int step, int rank, std::vector<StageSetup>& stages,
                     torch::optim::Optimizer& optimizer, std::optional<torch::Device> device) {
  const std::string path = RankFile(dir, step, rank);
  const torch::Device target = device.value_or(DeviceOfStages(stages));
  try {
    torch::serialize::InputArchive archive;
    // Remaps every storage of the file, the optimizer's nested archive included, onto `target`
    // (the optimizer's state was saved on the device it lived on, e.g. cuda:3).
    archive.load_from(path, target);
    torch::NoGradGuard no_grad;
    for (StageSetup& stage : stages) {
      for (size_t i = 0; i < stage.layers.size(); ++i) {
        for (auto& [name, tensor] : stage.layers[i]->State()) {
          torch::Tensor saved;
          archive.read(Key(stage, i, name), saved);
          if (saved.sizes() != tensor.sizes()) {
            return Status::Invalid(path + ": " + Key(stage, i, name) + " has shape " + c10::str(saved.sizes()) +
                                   " in the checkpoint but " + c10::str(tensor.sizes()) + " in the model");
          }
          tensor.copy_(saved.to(tensor.device()));  // into the model's tensor, on whatever device it is
        }
      }
    }
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    optimizer.load(optimizer_archive);
  } catch (const std::exception& e) {
    return Status::Invalid(path + ": could not load the checkpoint: " + e.what());
  }
  return Status::Ok();
}

}  // namespace gpipe::executor
