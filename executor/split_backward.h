// Zero-bubble's split of a backward pass into I (the gradient at the inputs) and W (the gradients
// of the weights), the way PyTorch's `stage_backward_input` and `stage_backward_weight` split it.
//
// I runs the autograd engine from the output towards the anchors (a stage's input, or on the first
// stage, whose input needs no gradient, each layer's output) and computes no weight gradient. On
// the way it captures the gradient flowing into every node where a parameter's path joins the
// anchors' path: for a linear layer, the gradient of its output, arriving at its addmm node. W
// then starts at those nodes with those gradients and runs only what lies between them and the
// parameters: the weight-gradient matmuls, not the layer's whole backward again. So I + W costs
// one full backward. The graph is kept from I until W, which frees it.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/edge.h>
#include <torch/torch.h>

#include "executor/values.h"

namespace gpipe::executor {

/// What I leaves for W.
struct WeightPass {
  /// The input slots of the nodes where parameters' paths meet the anchors' path, and the
  /// gradients I captured there.
  torch::autograd::edge_list roots;
  std::vector<torch::Tensor> grads;
  /// The parameters' gradient edges (their accumulators).
  torch::autograd::edge_list params;
  /// The edges from those nodes into the input path, which W cuts before it runs: I has already
  /// sent the gradient down them, and W must not again (one engine call then serves every
  /// parameter, and a weight used twice along the input path is counted once per use).
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uint32_t>> cuts;

  bool empty() const { return roots.empty(); }
  /// Bytes of the captured gradients' storage (each storage once; one may be the gradient I
  /// received, which then lives until W), less any shared with `passed_on` (what I sends down).
  int64_t HeldBytes(const Values& passed_on) const;
  /// W: accumulates every parameter's gradient into its `.grad()` (as a backward does) and frees
  /// the graph. The last use of the graph.
  void Run();
};

/// I: the backward from `outputs` (seeded with `grads`, one per floating-point output; none for a
/// scalar loss) to `anchors` only, computing no weight gradient. Writes the gradient at each anchor
/// to `anchor_grads` (undefined where none reaches it or the anchor needs none). `params` are the
/// parameters W will update; one that is not in the graph is left alone. The graph is kept for W.
WeightPass BackwardInput(const Values& outputs, const Values& grads, const Values& anchors,
                         const std::vector<torch::Tensor>& params, Values* anchor_grads);

}  // namespace gpipe::executor
