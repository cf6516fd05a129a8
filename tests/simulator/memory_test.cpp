// Peak memory per rank: parameters and optimizer state, stashed activations for the micro-batches
// in flight (only stage inputs under remat, plus one micro-batch while recomputing), and buffers.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/plan.h"
#include "core/schedule/generators.h"
#include "core/schedule/lower.h"
#include "simulator/simulator.h"

namespace gpipe {
namespace {

constexpr double kActivation = 1000;
constexpr double kInput = 10;
constexpr double kStatic = 5000;

CostModel Costs(int ranks, bool remat) {
  CostModel costs = UniformCostModel(ranks, ranks, 1.0, 2.0, 0.5);
  for (StageCost& stage : costs.stages) {
    stage.remat = remat;
    stage.activation_bytes = kActivation;
    stage.input_bytes = 0;  // no messages: activations only
    stage.output_bytes = 0;
    stage.static_bytes = kStatic;
  }
  costs.stages[0].input_bytes = kInput;  // what stage 0 keeps under remat
  return costs;
}

SimResult RunSchedule(ScheduleKind kind, int ranks, int microbatches, const CostModel& costs) {
  Expected<Schedule> schedule = GenerateSchedule(kind, ranks, ranks, microbatches);
  Expected<SimResult> result = Simulate(AddCommunication(*schedule), costs);
  EXPECT_TRUE(result.ok());
  return *result;
}

TEST(Memory, GpipeStashesEveryMicrobatch) {
  for (int m : {1, 4, 8}) {
    const SimResult r = RunSchedule(ScheduleKind::kGpipe, 2, m, Costs(2, false));
    for (const RankResult& rank : r.ranks) {
      EXPECT_EQ(rank.peak_activation_bytes, m * kActivation);
      EXPECT_EQ(rank.peak_memory_bytes, kStatic + m * kActivation);
    }
  }
}

TEST(Memory, RematKeepsInputsPlusOneMicrobatch) {
  // GPipe's claim: O(N + (L/K) x (N/M)) instead of O(N x L): M stage inputs and one
  // micro-batch's recomputed activations.
  for (int m : {1, 4, 8}) {
    const SimResult r = RunSchedule(ScheduleKind::kGpipe, 2, m, Costs(2, true));
    EXPECT_EQ(r.ranks[0].peak_activation_bytes, m * kInput + kActivation) << "M=" << m;
  }
}

TEST(Memory, OneFOneBHoldsAtMostKMinusRMicrobatches) {
  for (int k : {2, 4}) {
    for (int m : {1, 4, 8}) {
      const SimResult r = RunSchedule(ScheduleKind::k1F1B, k, m, Costs(k, false));
      for (int rank = 0; rank < k; ++rank) {
        EXPECT_EQ(r.ranks[rank].peak_activation_bytes, std::min(k - rank, m) * kActivation)
            << "K=" << k << " M=" << m << " r=" << rank;
      }
    }
  }
}

TEST(Memory, ZbH1PeaksNoHigherThanOneFOneB) {
  // Zero Bubble PP: ZB-H1 delays rank r's W passes by r slots, so a later rank keeps more
  // micro-batches than under 1F1B, but no rank keeps more than 1F1B's busiest rank (K).
  const SimResult one = RunSchedule(ScheduleKind::k1F1B, 4, 8, Costs(4, false));
  const SimResult zb = RunSchedule(ScheduleKind::kZbH1, 4, 8, Costs(4, false));
  double one_peak = 0, zb_peak = 0;
  for (int rank = 0; rank < 4; ++rank) {
    one_peak = std::max(one_peak, one.ranks[rank].peak_activation_bytes);
    zb_peak = std::max(zb_peak, zb.ranks[rank].peak_activation_bytes);
    EXPECT_EQ(zb.ranks[rank].max_in_flight, 4) << rank;
  }
  EXPECT_EQ(zb_peak, one_peak);
  EXPECT_EQ(one_peak, 4 * kActivation);
}

TEST(Memory, EveryAllocationIsFreedByTheEnd) {
  CostModel costs = Costs(3, true);
  for (StageCost& stage : costs.stages) stage.input_bytes = stage.output_bytes = 64;
  for (auto& row : costs.links) {
    for (Link& link : row) link = Link{64e3, 0.25};  // 1 ms on the wire per message
  }
  for (ScheduleKind kind : AllScheduleKinds()) {
    if (kind == ScheduleKind::kInterleaved1F1B) continue;
    const SimResult r = RunSchedule(kind, 3, 6, costs);
    for (const RankResult& rank : r.ranks) {
      ASSERT_FALSE(rank.memory.empty());
      EXPECT_NEAR(rank.memory.back().bytes, rank.static_bytes, 1e-9) << ScheduleName(kind);
      EXPECT_GT(rank.peak_buffer_bytes + rank.peak_activation_bytes, 0);
    }
  }
}

TEST(Memory, ReceiveBuffersWaitForTheirConsumer) {
  // Rank 0 computes forwards fast; rank 1 is slow, so activations pile up in its receive buffers.
  CostModel costs = Costs(2, false);
  costs.stages[0].forward_ms = 0.1;
  costs.stages[1].forward_ms = 10.0;
  costs.stages[0].output_bytes = costs.stages[1].input_bytes = 7;
  const SimResult r = RunSchedule(ScheduleKind::kGpipe, 2, 4, costs);
  // At rank 1's peak (during the last forward) no received activation is left waiting, but
  // earlier, while it computed 1F0, up to three more had arrived.
  const auto& memory = r.ranks[1].memory;
  double most = 0;
  for (const MemorySample& sample : memory) most = std::max(most, sample.bytes);
  EXPECT_EQ(most, r.ranks[1].peak_memory_bytes);
  bool saw_three_waiting = false;
  for (const MemorySample& sample : memory) {
    if (sample.time_ms > 0.25 && sample.time_ms < 10.0) {
      saw_three_waiting = saw_three_waiting || sample.bytes == kStatic + kActivation + 3 * 7;
    }
  }
  EXPECT_TRUE(saw_three_waiting);
}

TEST(Memory, StaticBytesFollowTheOptimizer) {
  Plan plan;
  plan.profile.layers = {LayerProfile{"a", 1, 2, std::nullopt, 100, 10, 1}, LayerProfile{"b", 1, 2, std::nullopt, 300, 10, 1}};
  plan.cluster.devices = 2;
  plan.cluster.device_memory_bytes = 1 << 20;
  plan.cluster.link = Link{1e9, 0};
  plan.stages = {StagePlan{0, 1, 0, false}, StagePlan{1, 2, 1, false}};
  const std::pair<Optimizer, double> cases[] = {
      {Optimizer::kSgd, 2}, {Optimizer::kMomentum, 3}, {Optimizer::kAdam, 4}, {Optimizer::kAdamMixed, 8}};
  for (const auto& [optimizer, factor] : cases) {
    plan.optimizer = optimizer;
    Expected<CostModel> costs = BuildCostModel(plan);
    ASSERT_TRUE(costs.ok());
    EXPECT_EQ(costs->stages[0].static_bytes, 100 * factor);
    EXPECT_EQ(costs->stages[1].static_bytes, 300 * factor);
  }
}

}  // namespace
}  // namespace gpipe
