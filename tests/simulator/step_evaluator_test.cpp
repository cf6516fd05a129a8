// The StepEvaluator gives exactly Simulate's step time, for every schedule, with uneven stages,
// remat, real links, replicas and calibrated send overheads and tails.
#include "simulator/step_evaluator.h"

#include <gtest/gtest.h>

#include <random>

#include "core/schedule/generators.h"
#include "core/schedule/lower.h"
#include "core/schedule/placement.h"
#include "simulator/simulator.h"

namespace gpipe {
namespace {

TEST(StepEvaluator, EqualsTheSimulatorExactly) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> time(0.1, 5.0), bytes(0.0, 4e6), latency(0.0, 0.3);
  int checked = 0;
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int trial = 0; trial < 60; ++trial) {
      const int ranks = 1 + static_cast<int>(rng() % 5);
      const int chunks = 1 + static_cast<int>(rng() % 3);
      int microbatches = 1 + static_cast<int>(rng() % 9);
      while (!CheckMicrobatchCount(kind, ranks, microbatches).ok()) ++microbatches;
      const int stages = StageCount(kind, ranks, chunks);
      CostModel costs = UniformCostModel(ranks, stages, 0, 0);
      for (StageCost& c : costs.stages) {
        c.forward_ms = time(rng);
        c.backward_ms = 2 * time(rng);
        c.backward_weight_ms = c.backward_ms * 0.4;
        c.backward_input_ms = c.backward_ms - c.backward_weight_ms;
        c.remat = rng() % 2 == 0;
        if (c.remat) c.remat_forward_ms = c.forward_ms * (1.0 + 0.5 * (rng() % 2));  // recording; F may run no_grad
        c.input_bytes = bytes(rng);
        c.output_bytes = bytes(rng);
      }
      for (auto& row : costs.links) {
        for (Link& link : row) link = Link{1e9 + 1e9 * (rng() % 3), latency(rng)};
      }
      if (rng() % 2 == 0) {
        costs.allreduce_ms.clear();
        for (int r = 0; r < ranks; ++r) costs.allreduce_ms.push_back(time(rng));
      }
      if (rng() % 2 == 0) {  // calibrated: sends occupy their rank, ranks have a tail
        costs.send_overhead_ms = latency(rng);
        for (int r = 0; r < ranks; ++r) costs.tail_ms.push_back(time(rng));
      }
      Expected<Schedule> compute = GenerateSchedule(kind, ranks, stages, microbatches);
      ASSERT_TRUE(compute.ok());
      const Schedule schedule = AddCommunication(*compute);
      Expected<SimResult> simulated = Simulate(schedule, costs);
      ASSERT_TRUE(simulated.ok());
      const StepEvaluator evaluator(schedule);
      EXPECT_EQ(evaluator.StepTimeMs(costs), simulated->step_time_ms)
          << ScheduleName(kind) << " K=" << ranks << " v=" << chunks << " M=" << microbatches;
      EXPECT_EQ(evaluator.StepTimeMs(costs), simulated->step_time_ms);  // reusable
      ++checked;
    }
  }
  EXPECT_EQ(checked, 60 * static_cast<int>(AllScheduleKinds().size()));
}

}  // namespace
}  // namespace gpipe
