// Tied parameters (core/profile.h TiedParameter) in the simulator and the planner: a stage, and a
// rank, holds a tied parameter once however many of its layers it holds; two ranks each hold it.
// Model state, the optimizer's tail and the all-reduce follow; the planner's memory checks agree
// with the simulator's, and both with a brute-force count of each rank's distinct parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <set>

#include "core/schedule/validate.h"
#include "tests/core/tied_bytes_by_hand.h"
#include "planner/partition.h"
#include "simulator/cost_model.h"
#include "simulator/layer_table.h"
#include "simulator/memory_model.h"
#include "simulator/simulator.h"
#include "tests/planner/brute_force.h"

namespace gpipe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kTied = 64'000;

// Six layers of 100 kB, 200 kB, ... 600 kB of parameters; the first and the last share 64 kB
// (GPT-2's token embedding and LM head).
Profile SixLayers() {
  Profile profile;
  profile.model = "tied";
  profile.device = "test";
  profile.input_bytes = 1000;
  for (int l = 0; l < 6; ++l) {
    LayerProfile layer;
    layer.name = "l" + std::to_string(l);
    layer.forward_ms = 1.0 + 0.1 * l;
    layer.backward_ms = 2.0 + 0.2 * l;
    layer.backward_weight_ms = 1.0;
    layer.param_bytes = 100'000 * (l + 1);
    layer.activation_bytes = 50'000;
    layer.output_bytes = 4'000;
    profile.layers.push_back(layer);
  }
  profile.tied_parameters.push_back({{0, 5}, kTied, "wte.weight"});
  return profile;
}

int64_t SumOfLayers(const Profile& profile, int first, int end) {
  int64_t bytes = 0;
  for (int l = first; l < end; ++l) bytes += profile.layers[l].param_bytes;
  return bytes;
}

// The parameter bytes of the layers in `held`, counted without ParamBytesOfLayers.
double BruteForce(const Profile& profile, const std::set<int>& held) {
  return static_cast<double>(TiedBytesByHand(profile, held));
}

std::vector<std::set<int>> LayersPerRank(const Plan& plan) {
  std::vector<std::set<int>> held(plan.num_ranks());
  for (const StagePlan& stage : plan.stages) {
    for (int l = stage.first_layer; l < stage.end_layer; ++l) held[stage.rank].insert(l);
  }
  return held;
}

Plan MakePlan(const Profile& profile, ScheduleKind schedule, int microbatches, const std::vector<StagePlan>& stages) {
  Plan plan;
  plan.profile = profile;
  plan.cluster.devices = 8;
  plan.cluster.device_memory_bytes = int64_t{1} << 40;
  plan.cluster.link = Link{1e9, 0.01};
  plan.schedule = schedule;
  plan.microbatches = microbatches;
  plan.global_batch = microbatches;
  plan.optimizer = Optimizer::kAdam;
  plan.stages = stages;
  return plan;
}

// Checks every rank's model state, parameter bytes and peak (simulator against the memory
// model's walk) against the brute force.
void ExpectRanksMatchBruteForce(const Plan& plan, const std::string& label) {
  const double factor = StaticBytesPerParamByte(plan.optimizer, plan.precision());
  Expected<Schedule> schedule = BuildSchedule(plan);
  ASSERT_TRUE(schedule.ok()) << label << ": " << schedule.status().message();
  Expected<CostModel> costs = BuildCostModel(plan);
  ASSERT_TRUE(costs.ok()) << label << ": " << costs.status().message();
  Expected<SimResult> sim = Simulate(*schedule, *costs);
  ASSERT_TRUE(sim.ok()) << label << ": " << sim.status().message();
  const std::vector<std::set<int>> held = LayersPerRank(plan);
  const std::vector<double> params = ParamBytesPerRank(plan);
  for (int r = 0; r < plan.num_ranks(); ++r) {
    const double expected = BruteForce(plan.profile, held[r]);
    EXPECT_EQ(params[r], expected) << label << " rank " << r;
    EXPECT_DOUBLE_EQ(sim->ranks[r].static_bytes, factor * expected) << label << " rank " << r;
    EXPECT_DOUBLE_EQ(StaticBytesOfRank(*schedule, r, *costs), factor * expected) << label << " rank " << r;
    EXPECT_EQ(RankMemoryPeak(*schedule, r, *costs).peak_bytes, sim->ranks[r].peak_memory_bytes) << label << " rank " << r;
  }
}

TEST(TiedParameters, OneStageCountsTheParameterOnce) {
  const Profile profile = SixLayers();
  Plan plan = MakePlan(profile, ScheduleKind::kGpipe, 2, {StagePlan{0, 6, 0, false}});
  Calibration calibration;
  calibration.optimizer_ms_per_gib = 1000;
  plan.cluster.calibration = calibration;
  Expected<CostModel> costs = BuildCostModel(plan);
  ASSERT_TRUE(costs.ok()) << costs.status().message();
  const double once = static_cast<double>(SumOfLayers(profile, 0, 6) - kTied);
  EXPECT_EQ(costs->stages[0].static_bytes, 4 * once);  // adam: 4 bytes per parameter byte
  EXPECT_TRUE(costs->shared_static_bytes.empty());
  EXPECT_EQ(ParamBytesPerRank(plan), std::vector<double>{once});
  ASSERT_EQ(costs->tail_ms.size(), 1u);
  EXPECT_DOUBLE_EQ(costs->tail_ms[0], calibration.TailMs(once));  // the optimizer step follows too
  ExpectRanksMatchBruteForce(plan, "one stage");
}

TEST(TiedParameters, TwoRanksEachHoldACopy) {
  const Profile profile = SixLayers();
  Plan plan = MakePlan(profile, ScheduleKind::k1F1B, 2, {StagePlan{0, 3, 0, false}, StagePlan{3, 6, 1, false}});
  plan.replicas = 2;
  plan.global_batch = 4;
  Expected<CostModel> costs = BuildCostModel(plan);
  ASSERT_TRUE(costs.ok()) << costs.status().message();
  EXPECT_EQ(costs->stages[0].static_bytes, 4.0 * static_cast<double>(SumOfLayers(profile, 0, 3)));
  EXPECT_EQ(costs->stages[1].static_bytes, 4.0 * static_cast<double>(SumOfLayers(profile, 3, 6)));
  const std::vector<double> params = ParamBytesPerRank(plan);
  EXPECT_EQ(params, (std::vector<double>{600'000, 1'500'000}));
  // Each rank all-reduces its copy's gradient.
  ASSERT_EQ(costs->allreduce_ms.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_DOUBLE_EQ(costs->allreduce_ms[r], RingAllReduceMs(plan.cluster, {plan.DeviceOf(0, r), plan.DeviceOf(1, r)}, params[r]));
  }
  ExpectRanksMatchBruteForce(plan, "two stages");
}

TEST(TiedParameters, AnInterleavedRankHoldsItOnce) {
  Profile profile = SixLayers();
  // Layers 0 and 4 share another 30 kB: rank 0 holds both through two of its stages.
  profile.tied_parameters.push_back({{0, 4}, 30'000, ""});
  ASSERT_TRUE(CheckTiedParameters(profile, "test").ok());
  const Plan plan = MakePlan(profile, ScheduleKind::kInterleaved1F1B, 2,
                             {StagePlan{0, 1, 0, false}, StagePlan{1, 3, 1, false}, StagePlan{3, 5, 0, true},
                              StagePlan{5, 6, 1, false}});
  Expected<CostModel> costs = BuildCostModel(plan);
  ASSERT_TRUE(costs.ok()) << costs.status().message();
  // Each stage counts it; the rank holds it once.
  EXPECT_EQ(costs->stages[0].static_bytes, 4.0 * 100'000);
  EXPECT_EQ(costs->stages[2].static_bytes, 4.0 * (400'000 + 500'000));
  EXPECT_EQ(costs->shared_static_bytes, (std::vector<double>{4.0 * 30'000, 0.0}));
  EXPECT_EQ(ParamBytesPerRank(plan), (std::vector<double>{100'000 + 400'000 + 500'000 - 30'000, 200'000 + 300'000 + 600'000}));
  ExpectRanksMatchBruteForce(plan, "interleaved");
}

TEST(TiedParameters, LayerTableStagesMatchBruteForce) {
  Profile profile = SixLayers();
  profile.tied_parameters.push_back({{1, 2, 4}, 70'000, "three"});
  ASSERT_TRUE(CheckTiedParameters(profile, "test").ok());
  const LayerTable table(profile, 1.0, Optimizer::kAdam);
  ASSERT_TRUE(table.has_tied_parameters());
  for (int a = 0; a < 6; ++a) {
    LayerTable::StageBuilder builder(table, a);
    double previous = 0;
    for (int e = a + 1; e <= 6; ++e) {
      builder.Extend();
      std::set<int> held;
      for (int l = a; l < e; ++l) held.insert(l);
      const double expected = BruteForce(profile, held);
      EXPECT_EQ(table.ParamBytes(a, e), expected) << a << " " << e;
      EXPECT_EQ(table.StaticBytes(a, e), 4 * expected) << a << " " << e;
      EXPECT_EQ(builder.Cost(false).static_bytes, 4 * expected) << a << " " << e;
      EXPECT_EQ(static_cast<double>(ParamBytesOfLayers(profile, a, e)), expected) << a << " " << e;
      EXPECT_GE(expected, previous) << "a longer stage never holds fewer parameters";
      previous = expected;
    }
  }
  EXPECT_EQ(table.SharedStaticBytes({{0, 1}, {5, 6}}), 4.0 * kTied);
  EXPECT_EQ(table.SharedStaticBytes({{0, 3}, {3, 6}}), 4.0 * (kTied + 70'000));  // 1, 2 | 4
  EXPECT_EQ(table.SharedStaticBytes({{0, 6}}), 0.0);
  Profile untied = SixLayers();
  untied.tied_parameters.clear();
  EXPECT_FALSE(LayerTable(untied, 1.0, Optimizer::kAdam).has_tied_parameters());
}

TEST(TiedParameters, APlanFitsOnlyWithTheParameterCountedOnce) {
  Profile profile = SixLayers();
  PartitionProblem problem;
  Cluster cluster;
  cluster.devices = 1;
  cluster.device_memory_bytes = int64_t{1} << 40;
  cluster.link = Link{1e9, 0.01};
  problem.profile = &profile;
  problem.cluster = &cluster;
  problem.schedule = ScheduleKind::kGpipe;
  problem.ranks = 1;
  problem.microbatches = 2;
  problem.global_batch = 2;
  problem.remat = RematPolicy::kOff;
  const Plan plan = MakePlan(profile, ScheduleKind::kGpipe, 2, {StagePlan{0, 6, 0, false}});
  Expected<SimResult> sim = Simulate(*BuildSchedule(plan), *BuildCostModel(plan));
  ASSERT_TRUE(sim.ok());
  // (The planner's frontier and the simulator's walk may differ in the last bits.)
  problem.memory_limit_bytes = sim->ranks[0].peak_memory_bytes * (1 + 1e-9);
  Expected<PartitionResult> found = FindBestPartition(problem);
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_TRUE(found->plan.has_value());
  Expected<LeastMemoryResult> least = LeastMemoryPartition(problem);
  ASSERT_TRUE(least.ok());
  EXPECT_NEAR(least->peak_bytes, sim->ranks[0].peak_memory_bytes, 1e-9 * least->peak_bytes);
  // Counted twice, the same model would not fit.
  profile.tied_parameters.clear();
  Expected<PartitionResult> untied = FindBestPartition(problem);
  ASSERT_TRUE(untied.ok()) << untied.status().message();
  EXPECT_FALSE(untied->plan.has_value());
}

// Random profiles with tied parameters: every partition and remat choice simulated, each rank's
// model state against the brute force, and the planner's best step and least memory against the
// simulated plans.
TEST(TiedParameters, PlannerMatchesBruteForce) {
  std::mt19937 rng(77);
  std::uniform_real_distribution<double> time(0.2, 3.0);
  struct Shape {
    ScheduleKind kind;
    int ranks, chunks;
  };
  const Shape shapes[] = {{ScheduleKind::kGpipe, 1, 1},
                          {ScheduleKind::k1F1B, 2, 1},
                          {ScheduleKind::k1F1B, 3, 1},
                          {ScheduleKind::kZbH1, 2, 1},
                          {ScheduleKind::kInterleaved1F1B, 2, 2}};
  int compared = 0, feasible = 0, shared_on_a_rank = 0;
  for (int trial = 0; trial < 6; ++trial) {
    const int layers = 6 + trial % 2;
    Profile profile;
    profile.model = "random";
    profile.device = "test";
    profile.input_bytes = 1000;
    for (int l = 0; l < layers; ++l) {
      LayerProfile layer;
      layer.name = "l" + std::to_string(l);
      layer.forward_ms = time(rng);
      layer.backward_ms = layer.forward_ms * (1.2 + 1.5 * (rng() % 100) / 100.0);
      layer.backward_weight_ms = layer.backward_ms * 0.4;
      layer.param_bytes = 100'000 * (1 + static_cast<int64_t>(rng() % 20));
      layer.activation_bytes = 200'000 * (1 + static_cast<int64_t>(rng() % 20));
      layer.output_bytes = 50'000 * (1 + static_cast<int64_t>(rng() % 40));
      profile.layers.push_back(layer);
    }
    // The embedding and the head, and two more pairs (each at most a quarter of its layers').
    const auto tie = [&](std::vector<int> tied) {
      int64_t least = INT64_MAX;
      for (int l : tied) least = std::min(least, profile.layers[l].param_bytes);
      profile.tied_parameters.push_back({tied, least / 4, ""});
    };
    tie({0, layers - 1});
    tie({1, 3});
    tie({0, 2, 4});
    ASSERT_TRUE(CheckTiedParameters(profile, "random").ok()) << CheckTiedParameters(profile, "random").message();
    Cluster cluster;
    cluster.devices = 4;
    cluster.device_memory_bytes = int64_t{1} << 40;
    cluster.link = Link{20e9, 0.01};
    for (const Shape& shape : shapes) {
      for (int microbatches : {2, 4}) {
        PartitionProblem problem;
        problem.profile = &profile;
        problem.cluster = &cluster;
        problem.schedule = shape.kind;
        problem.ranks = shape.ranks;
        problem.chunks = shape.chunks;
        problem.microbatches = microbatches;
        problem.global_batch = 4;
        problem.optimizer = Optimizer::kAdam;
        double total_static = 0, total_activation = 0;
        for (const LayerProfile& layer : profile.layers) {
          total_static += 4.0 * static_cast<double>(layer.param_bytes);
          total_activation += static_cast<double>(layer.activation_bytes) * 4.0 / microbatches;
        }
        const int stages = shape.ranks * shape.chunks;
        problem.memory_limit_bytes =
            (total_static + total_activation * std::min(shape.ranks, microbatches) * (0.5 + 0.5 * (trial % 3))) / stages;
        const std::string label = std::string(ScheduleName(shape.kind)) + " K=" + std::to_string(shape.ranks) +
                                  " v=" + std::to_string(shape.chunks) + " M=" + std::to_string(microbatches) +
                                  " trial " + std::to_string(trial);
        // Brute force.
        double best = kInf, least_peak = kInf;
        brute::ForEveryPlan(PlanSkeleton(problem), shape.ranks, stages, problem.remat, [&](const Plan& plan) {
          Expected<CostModel> costs = BuildCostModel(plan);
          ASSERT_TRUE(costs.ok()) << costs.status().message();
          shared_on_a_rank += costs->shared_static_bytes.empty() ? 0 : 1;
          const bool no_remat = std::none_of(plan.stages.begin(), plan.stages.end(), [](const StagePlan& s) { return s.remat; });
          if (no_remat) ExpectRanksMatchBruteForce(plan, label);
          SimOptions options;
          options.record_timeline = false;
          Expected<SimResult> r = Simulate(*BuildSchedule(plan), *costs, options);
          ASSERT_TRUE(r.ok());
          double peak = 0;
          for (const RankResult& rank : r->ranks) peak = std::max(peak, rank.peak_memory_bytes);
          least_peak = std::min(least_peak, peak);
          if (peak <= problem.memory_limit_bytes) best = std::min(best, r->step_time_ms);
        });
        Expected<PartitionResult> found = FindBestPartition(problem);
        ASSERT_TRUE(found.ok()) << found.status().message();
        ++compared;
        EXPECT_TRUE(found->proven_optimal) << label;
        if (best == kInf) {
          EXPECT_FALSE(found->plan.has_value()) << label;
        } else {
          ++feasible;
          ASSERT_TRUE(found->plan.has_value()) << label << ": brute force found " << best;
          EXPECT_NEAR(found->step_time_ms, best, 1e-9 * best) << label;
          EXPECT_LE(PartitionLowerBound(problem), best * (1 + 1e-9)) << label;
        }
        if (shape.chunks == 1) {
          Expected<LeastMemoryResult> least = LeastMemoryPartition(problem);
          ASSERT_TRUE(least.ok()) << least.status().message();
          EXPECT_NEAR(least->peak_bytes, least_peak, 1e-9 * least_peak) << label;
        }
      }
    }
  }
  EXPECT_EQ(compared, 6 * 5 * 2);
  EXPECT_GT(feasible, 20);
  EXPECT_GT(shared_on_a_rank, 0);  // interleaved ranks did hold a tied parameter through two stages
}

}  // namespace
}  // namespace gpipe
