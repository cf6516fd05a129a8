// Checkpoints that are never half written. Layout under the checkpoint directory:
//   step-<N>/rank-<r>.pt     each rank's stage weights, buffers and optimizer state
//   step-<N>/model.safetensors  the whole model's weights, named as PyTorch names them
//                            (executor/weights.h), written before the manifest
//   step-<N>/manifest.json   written by rank 0 once every rank's file is in place
//   latest                   "step-<N>", replaced atomically after the manifest
// Every file is written to a temporary name and renamed, so a crash or a full disk mid-write
// leaves `latest` naming the previous complete checkpoint. The manifest holds a fingerprint of
// the plan and model; resuming under another plan or model is refused with the difference.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/status.h"
#include "executor/stage_runner.h"

namespace gpipe::executor {

struct CheckpointInfo {
  int step = 0;  // steps completed
  std::string fingerprint;
  int world_size = 0;
};

/// The checkpoint's weights file after `step` steps: step-<N>/model.safetensors.
std::string CheckpointWeightsPath(const std::string& dir, int step);

/// Writes this rank's file for a checkpoint after `step` steps.
Status SaveRankState(const std::string& dir, int step, int rank, std::vector<StageSetup>& stages,
                     torch::optim::Optimizer& optimizer);
/// Rank 0, after every rank saved: the manifest, then `latest`.
Status CommitCheckpoint(const std::string& dir, const CheckpointInfo& info);
/// The checkpoint `latest` names, or nullopt when the directory holds none.
Expected<std::optional<CheckpointInfo>> LatestCheckpoint(const std::string& dir);
/// Loads this rank's state from the checkpoint after `step` steps. Every tensor in the file is
/// mapped onto `device` as it is read (the file may come from another GPU numbering, or from a
/// GPU run loaded on CPU: nothing assumes the device it was saved from); without `device`, onto
/// the device the stages' tensors are on now (CPU when they have none). The optimizer's state
/// (e.g. Adam's moments) ends on that device, and weights are copied into the stages' tensors
/// wherever those are.
Status LoadRankState(const std::string& dir, int step, int rank, std::vector<StageSetup>& stages,
                     torch::optim::Optimizer& optimizer, std::optional<torch::Device> device = std::nullopt);

}  // namespace gpipe::executor
