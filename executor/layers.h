// The layers the executor runs: one interface over LibTorch modules built from a gpipe-model/1
// spec and over the children of a TorchScript nn.Sequential. A stage is a run of consecutive
// layers; layer i is built the same way whichever rank builds it (its initial weights come from
// the model's seed and i alone), so any cut of the model starts from the same weights.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "core/model.h"
#include "core/status.h"

namespace gpipe::executor {

class Layer {
 public:
  virtual ~Layer() = default;
  virtual torch::Tensor Forward(const torch::Tensor& x) = 0;
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
};

/// The number of layers of `model` (for a TorchScript model, its children; loads the file).
Expected<int> CountLayers(const ModelSpec& model);

/// Builds layers [first, end) of `model` on CPU, then moves them to `device`.
/// Errors name the layer and the cause (e.g. a TorchScript child that is not a module).
Expected<std::vector<std::unique_ptr<Layer>>> BuildLayers(const ModelSpec& model, int first, int end,
                                                          const torch::Device& device);

/// Every parameter of `layers`, in layer order.
std::vector<torch::Tensor> ParametersOf(const std::vector<std::unique_ptr<Layer>>& layers);

/// Held while the process-wide generator is seeded and drawn from for initial weights (ranks may
/// be threads of one process): layer i's weights depend on the model seed and i alone.
std::mutex& GlobalRngMutex();

/// Cross-entropy over the last dimension, mean over everything else.
torch::Tensor LossOf(const ModelSpec& model, const torch::Tensor& output, const torch::Tensor& target);

}  // namespace gpipe::executor
