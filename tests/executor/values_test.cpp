// What crosses a stage boundary (executor/values.h, executor/shape_header.h): one tensor travels
// as itself, several (Llama: hidden states, cos, sin, int64 position ids) packed into one message
// whose header names each dtype and shape; gradients go to floating-point tensors only.
#include <gtest/gtest.h>

#include "executor/shape_header.h"
#include "executor/split_backward.h"
#include "executor/values.h"

namespace gpipe::executor {
namespace {

Values Boundary() {
  torch::manual_seed(3);
  return {torch::randn({2, 5, 8}), torch::randn({2, 5, 3}, torch::kDouble), torch::arange(10).view({2, 5}),
          torch::tensor({true, false, true})};
}

TEST(ValuesTest, SeveralTensorsTravelPackedWithTheirDtypesAndShapes) {
  const Values sent = Boundary();
  auto [message, header] = Pack(sent);
  EXPECT_EQ(message.scalar_type(), torch::kUInt8);
  Expected<torch::Tensor> encoded = EncodeShapeHeader(header, torch::kCPU);
  ASSERT_TRUE(encoded.ok());
  Expected<ShapeHeader> decoded = DecodeShapeHeader(*encoded);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(*decoded, header);
  torch::Tensor buffer = decoded->EmptyOn(torch::kCPU);
  ASSERT_EQ(buffer.sizes(), message.sizes());
  buffer.copy_(message);  // what the wire does
  const Values got = decoded->Unpack(buffer);
  ASSERT_EQ(got.size(), sent.size());
  for (size_t k = 0; k < sent.size(); ++k) {
    EXPECT_EQ(got[k].scalar_type(), sent[k].scalar_type()) << k;
    EXPECT_EQ(got[k].sizes(), sent[k].sizes()) << k;
    EXPECT_TRUE(torch::equal(got[k], sent[k])) << k;
  }
}

TEST(ValuesTest, OneTensorTravelsAsItself) {
  const torch::Tensor t = torch::randn({4, 3}).t();  // not contiguous
  auto [message, header] = Pack({t});
  EXPECT_TRUE(message.is_contiguous());
  EXPECT_TRUE(torch::equal(message, t));
  ASSERT_EQ(header.tensors.size(), 1u);
  EXPECT_EQ(header.EmptyOn(torch::kCPU).sizes(), t.sizes());
  EXPECT_TRUE(torch::equal(header.Unpack(message)[0], t));
}

TEST(ValuesTest, HeadersRefuseWhatTheyCannotHoldAndWhatIsNotAHeader) {
  Values many;
  for (int k = 0; k < 20; ++k) many.push_back(torch::zeros({1, 1, 1}));
  Expected<torch::Tensor> too_big = EncodeShapeHeader(Pack(many).second, torch::kCPU);
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.status().message().find("20 tensors"), std::string::npos) << too_big.status().message();
  torch::Tensor not_header = ShapeHeaderBuffer(torch::kCPU);
  Expected<ShapeHeader> bad = DecodeShapeHeader(not_header);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("another message came"), std::string::npos);
}

TEST(ValuesTest, GradientsGoToFloatingPointTensorsOnly) {
  const Values leaves = LeavesOf(Boundary());
  EXPECT_TRUE(leaves[0].requires_grad());
  EXPECT_TRUE(leaves[1].requires_grad());
  EXPECT_FALSE(leaves[2].requires_grad());
  EXPECT_FALSE(leaves[3].requires_grad());
  // Only the hidden states reach the loss: the others' gradients are zeros, the ids get none.
  (leaves[0] * 2).sum().backward();
  const Values grads = InputGradients(leaves);
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_TRUE(torch::equal(grads[0], torch::full({2, 5, 8}, 2.0)));
  EXPECT_TRUE(torch::equal(grads[1], torch::zeros({2, 5, 3}, torch::kDouble)));
}

// The receiving stage's backward from several outputs: each output that requires a gradient is a
// root seeded with its entry of the gradient message; outputs that need none (cos and sin, made
// without parameters) and non-float ones are skipped. I of zero-bubble gives the same gradients.
TEST(ValuesTest, BackwardFromSeveralOutputsMatchesOneBackward) {
  torch::manual_seed(5);
  const torch::Tensor w = torch::randn({8, 8}, torch::requires_grad());
  const Values in = LeavesOf({torch::randn({2, 8}), torch::arange(2)});
  const Values out = {in[0].matmul(w), torch::ones({2, 3}), in[1] + 1, in[0].tanh()};
  const Values grads = {torch::randn({2, 8}), torch::randn({2, 3}), torch::randn({2, 8})};
  RunBackward(out, grads);
  const torch::Tensor want_input = in[0].grad().clone(), want_w = w.grad().clone();
  const torch::Tensor expect = grads[0].matmul(w.t()) + grads[2] * (1 - in[0].tanh().pow(2));
  EXPECT_TRUE(torch::allclose(want_input, expect.detach(), 1e-5, 1e-6));

  in[0].mutable_grad() = torch::Tensor();
  w.mutable_grad() = torch::Tensor();
  const Values in2 = LeavesOf({in[0].detach(), in[1]});
  const Values out2 = {in2[0].matmul(w), torch::ones({2, 3}), in2[1] + 1, in2[0].tanh()};
  Values anchor_grads;
  WeightPass pass = BackwardInput(out2, grads, in2, {w}, &anchor_grads);
  ASSERT_EQ(anchor_grads.size(), 2u);
  EXPECT_TRUE(torch::allclose(anchor_grads[0], want_input, 1e-5, 1e-6));
  EXPECT_FALSE(anchor_grads[1].defined());
  pass.Run();
  EXPECT_TRUE(torch::allclose(w.grad(), want_w, 1e-5, 1e-6));

  // Handed to autograd (the profiler's inner workspace): the same gradients, and the caller's
  // outputs and gradients are gone.
  w.mutable_grad() = torch::Tensor();
  const Values in3 = LeavesOf({in[0].detach(), in[1]});
  Values out3 = {in3[0].matmul(w), torch::ones({2, 3}), in3[1] + 1, in3[0].tanh()};
  Values handed = {grads[0].clone(), grads[1].clone(), grads[2].clone()};
  RunBackwardHandingOver(std::move(out3), std::move(handed));
  EXPECT_TRUE(out3.empty() && handed.empty());  // NOLINT(bugprone-use-after-move): cleared, as documented
  EXPECT_TRUE(torch::allclose(in3[0].grad(), want_input, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(w.grad(), want_w, 1e-5, 1e-6));
}

}  // namespace
}  // namespace gpipe::executor
