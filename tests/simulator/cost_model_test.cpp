// What one action of a stage costs (ComputeMs, RecomputeMs), as a table over every op, with and
// without remat: a remat stage's full and input-gradient backwards run its forward again first.
#include "simulator/cost_model.h"

#include <gtest/gtest.h>

namespace gpipe {
namespace {

StageCost Stage(bool remat) {
  StageCost c;
  c.forward_ms = 1;
  c.backward_ms = 3;
  c.backward_input_ms = 2;
  c.backward_weight_ms = 1.5;
  c.remat = remat;
  return c;
}

TEST(ComputeMs, EveryOpWithAndWithoutRemat) {
  struct Row {
    Op op;
    double plain_ms, remat_ms, recompute_ms;  // recompute_ms: under remat
  };
  const Row rows[] = {
      {Op::kForward, 1, 1, 0},
      {Op::kBackward, 3, 4, 1},
      {Op::kBackwardInput, 2, 3, 1},
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

}  // namespace
}  // namespace gpipe
