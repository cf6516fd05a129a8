// The exact planner against the peers' partitioners, judged by the simulator: torchgpipe's
// balance by time (block partition of per-layer forward+backward times) and DeepSpeed's
// parameter balancing. The planner is never slower, and on uneven models it is faster.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "core/schedule/validate.h"
#include "planner/baselines.h"
#include "planner/partition.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"

namespace gpipe {
namespace {

// Simulated step of `ends` (stage boundaries) with remat only where memory demands it, or
// infinity when some stage does not fit even with remat.
double StepOf(const PartitionProblem& problem, const std::vector<int>& boundaries) {
  if (boundaries.empty()) return std::numeric_limits<double>::infinity();
  Plan plan = PlanSkeleton(problem);
  for (int s = 0; s + 1 < static_cast<int>(boundaries.size()); ++s) {
    if (boundaries[s] >= boundaries[s + 1]) return std::numeric_limits<double>::infinity();
    plan.stages.push_back({boundaries[s], boundaries[s + 1], s, false});
  }
  for (int s = 0; s < plan.num_stages(); ++s) {
    for (bool remat : {false, true}) {
      plan.stages[s].remat = remat;
      Expected<SimResult> r = Simulate(*BuildSchedule(plan), *BuildCostModel(plan));
      if (r->ranks[s].peak_memory_bytes <= problem.memory_limit_bytes) break;
      if (remat) return std::numeric_limits<double>::infinity();
    }
  }
  return Simulate(*BuildSchedule(plan), *BuildCostModel(plan))->step_time_ms;
}

TEST(VersusBaselines, NeverSlowerAndOftenFaster) {
  std::mt19937 rng(11);
  int compared = 0, beat_torchgpipe = 0, beat_deepspeed = 0;
  double worst_torchgpipe = 1, worst_deepspeed = 1;
  for (int trial = 0; trial < 40; ++trial) {
    Profile profile;
    profile.model = "uneven";
    profile.device = "test";
    const int layers = 8 + static_cast<int>(rng() % 10);
    for (int l = 0; l < layers; ++l) {
      LayerProfile layer;
      layer.name = "l" + std::to_string(l);
      // An embedding-like first layer with many parameters and little compute, an expensive
      // head, and uneven blocks in between.
      const bool embedding = l == 0, head = l == layers - 1;
      layer.forward_ms = embedding ? 0.2 : head ? 4.0 : 0.5 + (rng() % 100) / 50.0;
      layer.backward_ms = 2 * layer.forward_ms;
      layer.param_bytes = (embedding ? 50 : 2 + static_cast<int64_t>(rng() % 10)) * 1'000'000;
      layer.activation_bytes = (1 + static_cast<int64_t>(rng() % 10)) * 1'000'000;
      layer.output_bytes = (1 + static_cast<int64_t>(rng() % 4)) * 1'000'000;
      profile.layers.push_back(layer);
    }
    Cluster cluster;
    cluster.devices = 4;
    cluster.link = Link{10e9, 0.01};
    cluster.device_memory_bytes = int64_t{1} << 40;
    PartitionProblem problem;
    problem.profile = &profile;
    problem.cluster = &cluster;
    problem.schedule = trial % 2 ? ScheduleKind::k1F1B : ScheduleKind::kGpipe;
    problem.ranks = 2 + trial % 3;
    problem.microbatches = 8;
    problem.global_batch = 8;
    problem.memory_limit_bytes = static_cast<double>(cluster.device_memory_bytes);
    Expected<PartitionResult> planned = FindBestPartition(problem);
    ASSERT_TRUE(planned.ok() && planned->plan);
    std::vector<double> times, params;
    for (const LayerProfile& layer : profile.layers) {
      times.push_back(layer.forward_ms + layer.backward_ms);
      params.push_back(static_cast<double>(layer.param_bytes));
    }
    const double torchgpipe = StepOf(problem, TorchgpipeBlockPartition(times, problem.ranks));
    const double deepspeed = StepOf(problem, DeepSpeedBalanced(params, problem.ranks));
    EXPECT_LE(planned->step_time_ms, torchgpipe * (1 + 1e-12)) << "trial " << trial;
    EXPECT_LE(planned->step_time_ms, deepspeed * (1 + 1e-12)) << "trial " << trial;
    ++compared;
    if (planned->step_time_ms < torchgpipe * (1 - 1e-9)) ++beat_torchgpipe;
    if (planned->step_time_ms < deepspeed * (1 - 1e-9)) ++beat_deepspeed;
    if (std::isfinite(torchgpipe)) worst_torchgpipe = std::max(worst_torchgpipe, torchgpipe / planned->step_time_ms);
    worst_deepspeed = std::max(worst_deepspeed, deepspeed / planned->step_time_ms);
  }
  std::printf("%d instances: faster than torchgpipe in %d (its worst: %.2fx slower), than DeepSpeed in %d "
              "(its worst: %.2fx slower)\n",
              compared, beat_torchgpipe, worst_torchgpipe, beat_deepspeed, worst_deepspeed);
  EXPECT_GT(beat_torchgpipe, compared / 2);
  EXPECT_GT(beat_deepspeed, compared / 2);
}

}  // namespace
}  // namespace gpipe
