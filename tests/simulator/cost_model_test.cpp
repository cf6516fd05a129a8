// What one action of a stage costs (ComputeMs, RecomputeMs), as a table over every op, with and
// without remat: a remat stage's full and input-gradient backwards run its forward again first,
// recording (remat_forward_ms), which may cost more than its forward F under no_grad.
#include "simulator/cost_model.h"

#include <gtest/gtest.h>

#include "simulator/layer_table.h"

namespace gpipe {
namespace {

StageCost Stage(bool remat) {
  StageCost c;
  c.forward_ms = 1;
  c.backward_ms = 3;
  c.backward_input_ms = 2;
  c.backward_weight_ms = 1.5;
  c.remat = remat;
  if (remat) c.remat_forward_ms = 1.25;
  return c;
}

TEST(ComputeMs, EveryOpWithAndWithoutRemat) {
  struct Row {
    Op op;
    double plain_ms, remat_ms, recompute_ms;  // recompute_ms: under remat
  };
  const Row rows[] = {
      {Op::kForward, 1, 1, 0},
      {Op::kBackward, 3, 4.25, 1.25},
      {Op::kBackwardInput, 2, 3.25, 1.25},
      {Op::kBackwardWeight, 1.5, 1.5, 0},
      {Op::kSendActivation, 0, 0, 0},
      {Op::kRecvActivation, 0, 0, 0},
      {Op::kSendGradient, 0, 0, 0},
      {Op::kRecvGradient, 0, 0, 0},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(OpName(row.op));
    EXPECT_EQ(ComputeMs(Stage(false), row.op), row.plain_ms);
    EXPECT_EQ(ComputeMs(Stage(true), row.op), row.remat_ms);
    EXPECT_EQ(RecomputeMs(Stage(false), row.op), 0.0);
    EXPECT_EQ(RecomputeMs(Stage(true), row.op), row.recompute_ms);
    EXPECT_EQ(Recomputes(Stage(true), row.op), row.recompute_ms > 0);
  }
}

// A stage that recomputes runs the layers it recomputes under no_grad in its forward
// (forward_no_grad_ms) and recording in its backward (forward_ms); a profile without the no-grad
// times prices both at forward_ms.
TEST(StageCostOfProfile, RematForwardRunsUnderNoGradAndTheBackwardRecomputesRecording) {
  Profile profile;
  profile.microbatch_size = 1;
  for (int l = 0; l < 3; ++l) {
    LayerProfile layer;
    layer.name = "l" + std::to_string(l);
    layer.forward_ms = l + 1.0;          // 1, 2, 3
    layer.forward_no_grad_ms = (l + 1) * 0.5;  // 0.5, 1, 1.5
    layer.backward_ms = 2.0 * (l + 1);   // 2, 4, 6
    profile.layers.push_back(layer);
  }
  const LayerTable table(profile, 2.0, Optimizer::kSgd);  // micro-batches of 2: times double
  const StageCost kept = table.Stage(0, 3, false);
  EXPECT_DOUBLE_EQ(kept.forward_ms, 12.0);
  EXPECT_DOUBLE_EQ(kept.recompute_ms(), 0.0);
  const StageCost whole = table.Stage(0, 3, true);
  EXPECT_DOUBLE_EQ(whole.forward_ms, 6.0);
  EXPECT_DOUBLE_EQ(whole.recompute_ms(), 12.0);
  EXPECT_DOUBLE_EQ(ComputeMs(whole, Op::kBackward), 12.0 + 24.0);
  const StageCost first_two = table.Stage(StagePlan::Of(0, 3, 0, 2));  // layers 0 and 1 recompute
  EXPECT_TRUE(first_two.partial_remat);
  EXPECT_DOUBLE_EQ(first_two.forward_ms, 2 * (0.5 + 1.0 + 3.0));
  EXPECT_DOUBLE_EQ(first_two.recompute_ms(), 2 * (1.0 + 2.0));
  EXPECT_DOUBLE_EQ(table.LeastForwardMs(0, 3), 6.0);
  EXPECT_TRUE(table.no_grad_forward_differs());

  Profile recorded_only = profile;
  for (LayerProfile& layer : recorded_only.layers) layer.forward_no_grad_ms.reset();
  const LayerTable old(recorded_only, 2.0, Optimizer::kSgd);
  EXPECT_FALSE(old.no_grad_forward_differs());
  EXPECT_DOUBLE_EQ(old.Stage(0, 3, true).forward_ms, 12.0);
  EXPECT_DOUBLE_EQ(old.Stage(StagePlan::Of(0, 3, 0, 2)).forward_ms, 12.0);
  EXPECT_DOUBLE_EQ(old.Stage(StagePlan::Of(0, 3, 0, 2)).recompute_ms(), 6.0);
}

}  // namespace
}  // namespace gpipe
