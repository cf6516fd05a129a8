// The layers the executor runs: one interface over LibTorch modules built from a gpipe-model/1
// spec and over the children of a TorchScript nn.Sequential. A stage is a run of consecutive
// layers; layer i is built the same way whichever rank builds it (its initial weights come from
// the model's seed and i alone), so any cut of the model starts from the same weights.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "core/model.h"
#include "core/status.h"
#include "executor/values.h"

namespace gpipe::executor {

class Layer {
 public:
  virtual ~Layer() = default;
  /// Tensors in, tensors out: a boundary may carry several (executor/values.h). A layer of the
  /// built-in types takes one and returns one; a TorchScript child takes them as positional
  /// arguments and returns a tensor or a tuple of tensors.
  virtual Values Apply(const Values& x) = 0;
  /// One tensor in, one out. Throws when the layer returns another number of tensors.
  torch::Tensor Forward(const torch::Tensor& x);
  /// Trainable parameters, in a fixed order.
  virtual std::vector<torch::Tensor> Parameters() = 0;
  /// Parameters and buffers (batch-norm statistics) by name, for checkpoints.
  virtual std::vector<std::pair<std::string, torch::Tensor>> State() = 0;
  virtual void SetTraining(bool training) = 0;
  virtual void To(const torch::Device& device) = 0;
  virtual const std::string& name() const = 0;
  /// True when the layer may write into its input (a user's model: ReLU(inplace=True) and the
  /// like). Whoever hands such a layer a tensor it must keep (a stage's input, a leaf that needs
  /// its gradient, the batch) hands it a copy.
  virtual bool MayWriteInput() const { return false; }
  /// Makes the parameter called `name` (as State() names it) be `tensor`, one autograd leaf with
  /// it (tied weights). False when the layer has no parameter of that name.
  virtual bool ShareParameter(const std::string& /*name*/, const torch::Tensor& /*tensor*/) { return false; }
  /// The parameter called `name`; undefined when there is none.
  torch::Tensor ParameterNamed(const std::string& name);
};

/// A parameter several layers hold (GPT-2's token embedding and its LM head), as the exporter of
/// a Python model found it (executor/export_model.py): the layers and its name in each.
struct SharedParameter {
  std::vector<int> layers;
  std::vector<std::string> names;
  int64_t bytes = 0;
};

/// The shared parameters of `model`; none for models of layer specs or plain TorchScript files.
Expected<std::vector<SharedParameter>> SharedParametersOf(const ModelSpec& model);

/// Per layer, the buffers its module's state_dict leaves out (non-persistent ones, as the exporter
/// of a Python model noted them); empty sets for other models.
Expected<std::vector<std::set<std::string>>> TransientBuffersOf(const ModelSpec& model);

/// Makes the holders of each shared parameter among `layers` (by model layer index) hold one
/// tensor, the first holder's. Errors name a holder without the parameter.
Status TieParameters(const std::vector<SharedParameter>& shared, const std::map<int, Layer*>& layers);

/// The number of layers of `model` (for a TorchScript model, its children; loads the file).
Expected<int> CountLayers(const ModelSpec& model);

/// Builds layers [first, end) of `model` on CPU, then moves them to `device`; tied parameters
/// among them are one tensor.
/// Errors name the layer and the cause (e.g. a TorchScript child that is not a module).
Expected<std::vector<std::unique_ptr<Layer>>> BuildLayers(const ModelSpec& model, int first, int end,
                                                          const torch::Device& device);

/// Every parameter of `layers`, in layer order, a tied one once.
std::vector<torch::Tensor> ParametersOf(const std::vector<std::unique_ptr<Layer>>& layers);
/// `params` without repeats of one tensor (tied weights), in first-seen order.
std::vector<torch::Tensor> UniqueTensors(const std::vector<torch::Tensor>& params);

/// Held while the process-wide generator is seeded and drawn from for initial weights (ranks may
/// be threads of one process): layer i's weights depend on the model seed and i alone.
std::mutex& GlobalRngMutex();

/// Cross-entropy over the last dimension, mean over everything else; in fp32 (16-bit logits are cast).
torch::Tensor LossOf(const ModelSpec& model, const torch::Tensor& output, const torch::Tensor& target);

}  // namespace gpipe::executor
