// The whole model's weights as one safetensors file (core/safetensors.h), named as the user's own
// PyTorch module names them, so that the trained model goes back to PyTorch and a model trained
// there starts a run (fine-tuning):
//   a model from Python or TorchScript: "<i>.<name>", the state_dict names of the nn.Sequential
//     (child i, its parameter or buffer `name`): seq.load_state_dict(load_file(path)) loads it;
//   built-in layers: "<layer name>.<name>" (e.g. "block0.attn.in_proj_weight").
// Buffers the module's state_dict leaves out (non-persistent, as Llama's rotary inv_freq) are not
// written, and keep their built values when a file is loaded.
// A tied parameter is written once, under its first holder's name (GPT-2's "0.wte.weight", not
// the head's alias of it); safetensors.torch.load_model restores the alias, as for any model with
// shared tensors, and `--init-weights` loads every holder from that one tensor.
#pragma once

#include <string>
#include <vector>

#include "core/model.h"
#include "core/plan.h"
#include "core/schedule/schedule.h"
#include "core/status.h"
#include "executor/communicator.h"
#include "executor/stage_runner.h"

namespace gpipe::executor {

/// The file's name of a layer's tensor (layer `layer` of `model`, `state_name` as Layer::State()
/// names it).
std::string WeightName(const ModelSpec& model, int layer, const std::string& state_name);

/// Every rank of replica 0 writes its layers' tensors (parameters and buffers) beside `path`,
/// then rank 0 merges them into `path` (atomically) and removes the parts. Call on every rank of
/// the job: it holds two barriers.
Status SaveWeights(const std::string& path, const Plan& plan, const ModelSpec& model, int replica,
                   Communicator& comm, std::vector<StageSetup>& stages);

/// Copies every tensor of this rank's layers from `path` (converting its dtype to the layer's). A
/// tensor the file lacks, or has with another shape, is an error naming it, the layer and the
/// file. Tensors of the file that this rank's layers do not hold are other ranks' (or unused).
Status LoadWeights(const std::string& path, const Plan& plan, const ModelSpec& model, std::vector<StageSetup>& stages);

}  // namespace gpipe::executor
