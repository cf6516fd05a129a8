// What a stage keeps per micro-batch from its forward to its backward (StageCost::stash_bytes), on
// the shipped analytic GPT-3 13B profile, against the tensors a real stage holds, counted by hand
// from Korthikanti et al.'s per-block list: each tensor once. A stage holds its input once (the
// first layer's graph keeps it: token ids on the first stage, the received hidden states on the
// others), every block's saved tensors, and its output (the executor keeps it, with its graph,
// until the backward). Under remat it keeps only its input.
#include <gtest/gtest.h>

#include <string>

#include "core/plan.h"
#include "simulator/cost_model.h"

namespace gpipe {
namespace {

// GPT-3 13B as profiles/generate.py writes it: s = 2048, b = 1, h = 5120, a = 40, V = 50257, bf16.
constexpr double kS = 2048, kH = 5120, kA = 40, kV = 50257;
constexpr double kTokens = kS;                         // s * b
constexpr double kHidden = 2 * kTokens * kH;           // one bf16 s x b x h tensor
constexpr double kTokenIds = 8 * kTokens;              // int64 ids: the model's input
// Korthikanti et al. 2022, sec. 4.1: a block saves s*b*h*(34 + 5*a*s/h) bytes, its input (the
// first layer norm's) among them.
constexpr double kBlockSaved = kTokens * kH * (34 + 5 * kA * kS / kH);

double StashOf(int first, int end, bool remat) {
  Expected<Plan> plan = LoadPlan(std::string(GPIPE_SOURCE_DIR) + "/profiles/plans/gpt3-13b-8xa100-1f1b.json");
  EXPECT_TRUE(plan.ok());
  // Re-cut into three stages on three ranks: [0, first), [first, end), [end, layers).
  const int layers = plan->profile.num_layers();
  plan->stages = {{0, first, 0, false}, {first, end, 1, remat}, {end, layers, 2, false}};
  if (first == 0) plan->stages = {{0, end, 0, remat}, {end, layers, 1, false}};
  Expected<CostModel> costs = BuildCostModel(*plan);
  EXPECT_TRUE(costs.ok()) << costs.status().message();
  return costs->stages[first == 0 ? 0 : 1].stash_bytes();
}

TEST(Stash, AMiddleStageHoldsItsInputOnceAndItsOutput) {
  // Blocks 5..9 (layers 6..10): the received hidden states (block 5's first layer-norm input,
  // counted in its saved tensors), the five blocks' saved tensors, and block 9's output.
  EXPECT_EQ(StashOf(6, 11, false), 5 * kBlockSaved + kHidden);
}

TEST(Stash, TheFirstStageHoldsTheTokenIdsOnce) {
  // Embedding + blocks 0..3: the token ids (the embedding's input, kept for its backward's
  // scatter), the embedding's dropout mask (1 byte per element), four blocks' saved tensors
  // (block 0's includes the embedding's output, its input) and block 3's output.
  EXPECT_EQ(StashOf(0, 5, false), kTokenIds + kTokens * kH + 4 * kBlockSaved + kHidden);
}

TEST(Stash, TheLastStageHoldsItsInputOnceAndTheLoss) {
  // Blocks 38, 39 and the head: the received hidden states (in block 38's saved tensors), two
  // blocks' saved tensors, block 39's output (the head's final layer-norm input), the LM-head
  // input, the fp32 logits kept by the loss, and the 4-byte loss.
  Expected<Plan> plan = LoadPlan(std::string(GPIPE_SOURCE_DIR) + "/profiles/plans/gpt3-13b-8xa100-1f1b.json");
  ASSERT_TRUE(plan.ok());
  const int layers = plan->profile.num_layers();
  plan->stages = {{0, layers - 3, 0, false}, {layers - 3, layers, 1, false}};
  Expected<CostModel> costs = BuildCostModel(*plan);
  ASSERT_TRUE(costs.ok());
  EXPECT_EQ(costs->stages[1].stash_bytes(), 2 * kBlockSaved + 2 * kHidden + 4 * kTokens * kV + 4);
}

TEST(Stash, UnderRematAStageHoldsOnlyItsInput) {
  EXPECT_EQ(StashOf(6, 11, true), kHidden);
  EXPECT_EQ(StashOf(0, 5, true), kTokenIds);
}

TEST(Stash, UnderRematAStageAlsoHoldsTheGeneratorStateItReplays) {
  // The profile's rng_state_bytes: per micro-batch, with remat only (a CPU generator's 5,056).
  Expected<Plan> plan = LoadPlan(std::string(GPIPE_SOURCE_DIR) + "/profiles/plans/gpt3-13b-8xa100-1f1b.json");
  ASSERT_TRUE(plan.ok());
  plan->profile.rng_state_bytes = 5056;
  const int layers = plan->profile.num_layers();
  plan->stages = {{0, 6, 0, false}, {6, 11, 1, true}, {11, layers, 2, false}};
  plan->stages[2].remat_layers = 2;
  plan->stages[2].remat = true;
  Expected<CostModel> costs = BuildCostModel(*plan);
  ASSERT_TRUE(costs.ok()) << costs.status().message();
  EXPECT_EQ(costs->stages[0].stash_bytes(), StashOf(0, 6, false));
  EXPECT_EQ(costs->stages[1].stash_bytes(), kHidden + 5056);
  const StageCost& partial = costs->stages[2];
  ASSERT_TRUE(partial.partial_remat);
  EXPECT_EQ(partial.stash_bytes(), partial.input_bytes + 5056 + partial.remat_boundary_bytes +
                                       partial.activation_bytes - partial.remat_activation_bytes);
}

}  // namespace
}  // namespace gpipe
