#include "executor/values.h"

#include <stdexcept>
#include <string>

namespace gpipe::executor {
namespace {

// A node after `out` whose backward ignores the (empty) gradient it gets and returns the one it was
// given in the forward, moved out of its context: the only reference then is autograd's own.
struct HandOver : torch::autograd::Function<HandOver> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& out, torch::Tensor grad) {
    ctx->saved_data["grad"] = std::move(grad);
    // Empty, not a view: the output's storage is held only by whatever else holds it.
    return torch::empty({0}, out.options());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 const torch::autograd::variable_list& /*ignored*/) {
    torch::Tensor grad = ctx->saved_data["grad"].toTensor();
    ctx->saved_data.clear();
    return {std::move(grad), torch::Tensor()};
  }
};

}  // namespace

Values LeavesOf(const Values& x) {
  Values leaves;
  for (const torch::Tensor& t : x) leaves.push_back(t.is_floating_point() ? t.detach().requires_grad_(true) : t);
  return leaves;
}

Values DetachedOf(const Values& x) {
  Values out;
  for (const torch::Tensor& t : x) out.push_back(t.detach());
  return out;
}

Values ClonedOf(const Values& x) {
  Values out;
  for (const torch::Tensor& t : x) out.push_back(t.clone());
  return out;
}

int64_t BytesOf(const Values& x) {
  int64_t bytes = 0;
  for (const torch::Tensor& t : x) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

bool AnyFloatingPoint(const Values& x) {
  for (const torch::Tensor& t : x) {
    if (t.is_floating_point()) return true;
  }
  return false;
}

bool AnyRequiresGrad(const Values& x) {
  for (const torch::Tensor& t : x) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

Values GradientMessage(const Values& inputs, const Values& grads) {
  Values message;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].is_floating_point()) continue;
    const torch::Tensor& g = k < grads.size() ? grads[k] : torch::Tensor();
    message.push_back(g.defined() ? g : torch::zeros_like(inputs[k]));
  }
  return message;
}

Values InputGradients(const Values& inputs) {
  Values grads;
  for (const torch::Tensor& t : inputs) grads.push_back(t.is_floating_point() ? t.grad() : torch::Tensor());
  return GradientMessage(inputs, grads);
}

std::pair<Values, Values> BackwardRoots(const Values& outputs, const Values& grads) {
  std::pair<Values, Values> roots;
  size_t g = 0;
  for (const torch::Tensor& out : outputs) {
    if (!out.is_floating_point()) continue;
    const size_t k = g++;
    if (!out.requires_grad()) continue;
    roots.first.push_back(out);
    if (!grads.empty()) {
      if (k >= grads.size()) {
        throw std::logic_error("a gradient message of " + std::to_string(grads.size()) + " tensors for " +
                               std::to_string(k + 1) + " or more differentiable outputs");
      }
      roots.second.push_back(grads[k]);
    }
  }
  if (!grads.empty() && g != grads.size()) {
    throw std::logic_error("a gradient message of " + std::to_string(grads.size()) + " tensors for " +
                           std::to_string(g) + " differentiable outputs");
  }
  return roots;
}

void RunBackward(const Values& outputs, const Values& grads) {
  auto [roots, seeds] = BackwardRoots(outputs, grads);
  if (roots.empty()) return;
  torch::autograd::backward(roots, seeds);
}

std::pair<Values, Values> HandedOver(Values&& outputs, Values&& grads) {
  auto [roots, seeds] = BackwardRoots(outputs, grads);
  outputs.clear();
  grads.clear();
  if (seeds.empty()) return {std::move(roots), Values()};  // a scalar loss (or no root): nothing to hand over
  Values handed, ones;
  for (size_t k = 0; k < roots.size(); ++k) {
    handed.push_back(HandOver::apply(roots[k], std::move(seeds[k])));
    ones.push_back(torch::ones_like(handed.back()));
  }
  return {std::move(handed), std::move(ones)};
}

void RunBackwardHandingOver(Values&& outputs, Values&& grads) {
  auto [roots, seeds] = HandedOver(std::move(outputs), std::move(grads));
  if (roots.empty()) return;
  torch::autograd::backward(roots, seeds);  // no seeds: a scalar loss, as in RunBackward
}

}  // namespace gpipe::executor
