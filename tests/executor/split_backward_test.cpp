// Zero-bubble's I and W (executor/split_backward.h): together they give the gradients of one full
// backward, and W runs none of the input path again. A counting node on the input path tells: a
// W that re-ran the layer's backward to reach its weights (as before) would count twice.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "executor/layers.h"
#include "executor/split_backward.h"
#include "tests/executor/test_plans.h"

namespace gpipe::executor {
namespace {

// The identity in the forward; counts how often its backward runs.
struct CountingIdentity : torch::autograd::Function<CountingIdentity> {
  static int backward_calls;
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x) { return x.clone(); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list grads) {
    ++backward_calls;
    return grads;
  }
};
int CountingIdentity::backward_calls = 0;

using Body = std::function<torch::Tensor(const torch::Tensor&)>;

std::vector<torch::Tensor> Clones(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& t : tensors) out.push_back(t.defined() ? t.detach().clone() : torch::Tensor());
  return out;
}

void ClearGrads(const std::vector<torch::Tensor>& params) {
  for (const torch::Tensor& p : params) p.mutable_grad() = torch::Tensor();
}

// Runs `body` on a copy of `x` twice: once with a full backward, once split into I and W, and
// checks that the input gradient and every parameter's gradient agree, and that W ran no node of
// the input path (the counting node sits on the input).
void ExpectSplitMatchesFull(const Body& body, const torch::Tensor& x, const std::vector<torch::Tensor>& params) {
  torch::manual_seed(3);
  torch::Tensor input = x.detach().clone().requires_grad_(true);
  torch::Tensor out = body(CountingIdentity::apply(input));
  torch::Tensor grad = torch::randn_like(out);
  ClearGrads(params);
  torch::autograd::backward({out}, {grad});
  const torch::Tensor full_input_grad = input.grad().clone();
  std::vector<torch::Tensor> full;
  for (const torch::Tensor& p : params) full.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());

  ClearGrads(params);
  torch::Tensor input2 = x.detach().clone().requires_grad_(true);
  torch::Tensor out2 = body(CountingIdentity::apply(input2));
  CountingIdentity::backward_calls = 0;
  std::vector<torch::Tensor> anchor_grads;
  WeightPass w = BackwardInput({out2}, {grad}, {input2}, params, &anchor_grads);
  EXPECT_EQ(CountingIdentity::backward_calls, 1) << "I reaches the input once";
  for (const torch::Tensor& p : params) EXPECT_FALSE(p.grad().defined()) << "I computed a weight gradient";
  ASSERT_EQ(anchor_grads.size(), 1u);
  ASSERT_TRUE(anchor_grads[0].defined());
  EXPECT_TRUE(torch::allclose(anchor_grads[0], full_input_grad, 1e-5, 1e-6));
  w.Run();
  EXPECT_EQ(CountingIdentity::backward_calls, 1) << "W ran the input path again";
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_EQ(params[i].grad().defined(), full[i].defined()) << "parameter " << i;
    if (full[i].defined()) {
      EXPECT_TRUE(torch::allclose(params[i].grad(), full[i], 1e-5, 1e-6)) << "parameter " << i;
    }
  }
  ClearGrads(params);
}

Body RunAll(std::vector<std::unique_ptr<Layer>>& layers) {
  return [&layers](const torch::Tensor& x) {
    torch::Tensor h = x;
    for (auto& layer : layers) h = layer->Forward(h);
    return h;
  };
}

TEST(SplitBackward, TransformerBlocksGiveTheFullBackwardsGradients) {
  const ModelSpec model = testing::TinyGpt(2);
  auto layers = BuildLayers(model, 1, 3, torch::kCPU).value();  // both blocks
  ExpectSplitMatchesFull(RunAll(layers), torch::randn({4, 8, 16}), ParametersOf(layers));
}

TEST(SplitBackward, ConvBlockGivesTheFullBackwardsGradients) {
  ModelSpec model;
  model.input.kind = InputKind::kImages;
  model.input.channels = 3;
  model.input.height = model.input.width = 8;
  model.input.classes = 4;
  LayerSpec conv;
  conv.type = LayerType::kConvBlock;
  conv.name = "conv";
  conv.in = 3;
  conv.out = 6;
  conv.kernel = 3;
  conv.padding = 1;
  conv.stride = 1;
  model.layers = {conv};
  auto layers = BuildLayers(model, 0, 1, torch::kCPU).value();
  ExpectSplitMatchesFull(RunAll(layers), torch::randn({2, 3, 8, 8}), ParametersOf(layers));
}

TEST(SplitBackward, WeightUsedTwiceAlongTheInputPathIsCountedOnce) {
  torch::nn::Linear shared(6, 6), other(6, 6);
  const Body body = [&](const torch::Tensor& x) { return other(torch::tanh(shared(torch::tanh(shared(x))))); };
  std::vector<torch::Tensor> params = shared->parameters();
  for (const torch::Tensor& p : other->parameters()) params.push_back(p);
  ExpectSplitMatchesFull(body, torch::randn({5, 6}), params);
}

TEST(SplitBackward, UnusedParameterGetsNoGradient) {
  torch::nn::Linear used(4, 4), unused(4, 4);
  std::vector<torch::Tensor> params = used->parameters();
  for (const torch::Tensor& p : unused->parameters()) params.push_back(p);
  ExpectSplitMatchesFull([&](const torch::Tensor& x) { return used(x); }, torch::randn({3, 4}), params);
}

// The first stage's input (tokens) needs no gradient: I stops at its layers' outputs instead and
// W still computes every weight gradient of the full backward, the embedding's included.
TEST(SplitBackward, FirstStageAnchorsAtLayerOutputs) {
  const ModelSpec model = testing::TinyGpt(1);
  auto layers = BuildLayers(model, 0, 3, torch::kCPU).value();
  const std::vector<torch::Tensor> params = ParametersOf(layers);
  const torch::Tensor tokens = torch::randint(0, 16, {4, 8}, torch::kLong);
  const torch::Tensor target = torch::randint(0, 16, {4, 8}, torch::kLong);

  torch::Tensor h = tokens;
  for (auto& layer : layers) h = layer->Forward(h);
  LossOf(model, h, target).backward();
  const std::vector<torch::Tensor> full = Clones([&] {
    std::vector<torch::Tensor> g;
    for (const torch::Tensor& p : params) g.push_back(p.grad());
    return g;
  }());
  ClearGrads(params);

  std::vector<torch::Tensor> boundaries;
  h = tokens;
  for (auto& layer : layers) {
    h = layer->Forward(h);
    boundaries.push_back(h);
  }
  torch::Tensor loss = LossOf(model, h, target);
  std::vector<torch::Tensor> anchor_grads;
  WeightPass w = BackwardInput({loss}, {}, boundaries, params, &anchor_grads);
  for (const torch::Tensor& p : params) EXPECT_FALSE(p.grad().defined()) << "I computed a weight gradient";
  EXPECT_FALSE(w.empty());
  w.Run();
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(params[i].grad().defined()) << "parameter " << i;
    EXPECT_TRUE(torch::allclose(params[i].grad(), full[i], 1e-5, 1e-6)) << "parameter " << i;
  }
}

}  // namespace
}  // namespace gpipe::executor
