// What passes between layers and between stages: one tensor, or several (Llama's hidden states
// with its rotary embeddings and position ids), each with its own shape and dtype. Floating-point
// tensors are differentiable: a stage's input gets a leaf of each that needs its gradient, and a
// gradient message carries one tensor per floating-point entry. Other tensors (token or position
// ids, masks) move as they are and get no gradient.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace gpipe::executor {

using Values = std::vector<torch::Tensor>;

/// Leaves for a stage's or a layer's input: each floating-point tensor detached, requiring its
/// gradient; the others as they are.
Values LeavesOf(const Values& x);
Values DetachedOf(const Values& x);
/// Copies, for a layer that may write into its input.
Values ClonedOf(const Values& x);
int64_t BytesOf(const Values& x);
/// Whether any tensor of `x` is floating-point (differentiable).
bool AnyFloatingPoint(const Values& x);
/// Whether any tensor of `x` needs a gradient.
bool AnyRequiresGrad(const Values& x);

/// The gradient message for `inputs`: one tensor per floating-point input, `grads[k]` (aligned
/// with `inputs`) or zeros where no gradient reached it.
Values GradientMessage(const Values& inputs, const Values& grads);
/// The same, from the inputs' own .grad().
Values InputGradients(const Values& inputs);

/// The roots of a backward from `outputs` and their seeds: the outputs that require a gradient,
/// each with its entry of `grads` (one per floating-point output). Empty `grads`: a scalar loss,
/// seeds empty.
std::pair<Values, Values> BackwardRoots(const Values& outputs, const Values& grads);
/// Runs the backward from `outputs` (accumulating into .grad()).
void RunBackward(const Values& outputs, const Values& grads);
/// The same with `outputs` and `grads` handed to autograd, as inside a stage a layer's backward
/// gets them from the layer after: autograd holds the gradients' only reference and frees each
/// once the first node has used it, and the outputs live only as long as the layer's own graph
/// keeps them. For the profiler's workspace of a layer that is not its stage's last. Both are
/// empty afterwards.
void RunBackwardHandingOver(Values&& outputs, Values&& grads);
/// Roots and seeds that hand `outputs` and `grads` to autograd in the same way, for a backward
/// run some other way (the profiler's inner I): each root is an empty tensor whose node passes
/// its gradient on once, seeded with ones. A scalar loss (`grads` empty): the outputs themselves,
/// seeds empty. Both are empty afterwards.
std::pair<Values, Values> HandedOver(Values&& outputs, Values&& grads);

}  // namespace gpipe::executor
