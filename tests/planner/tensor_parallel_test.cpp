// Tensor parallelism (t) and the sharded optimizer (ZeRO-1) as plan dimensions: the profile at t
// against its formulas, the memory model against the byte counts, and the full search against
// brute force over every t, sharding, configuration, partition and remat choice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/plan.h"
#include "planner/partition.h"
#include "planner/search.h"
#include "simulator/cost_model.h"
#include "simulator/memory_model.h"
#include "simulator/simulator.h"
#include "simulator/tensor_parallel.h"
#include "tests/planner/brute_force.h"
#include "tests/planner/small_request.h"

namespace gpipe {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// SmallRequest's random model with figures at t = 2: each layer's compute splits unevenly (a
// replicated part stays whole), its parameters, activations and output halve, and its
// collectives move random bytes. Four devices, two per node.
SearchRequest TensorParallelRequest(std::mt19937& rng, int layers) {
  SearchRequest request = SmallRequest(rng, layers);
  request.profile.model = "tp";
  request.profile.input_bytes = 64'000;
  TensorParallelPoint point;
  point.size = 2;
  point.input_bytes = 64'000;
  for (const LayerProfile& layer : request.profile.layers) {
    TensorParallelLayer half{layer, 0.0, 0.0};
    const double kept = 0.5 + (rng() % 30) / 100.0;  // of the time, what one of two devices still spends
    half.layer.forward_ms *= kept;
    half.layer.backward_ms *= kept;
    *half.layer.backward_weight_ms *= kept;
    half.layer.param_bytes /= 2;
    half.layer.activation_bytes /= 2;
    half.layer.output_bytes /= 2;
    half.forward_collective_bytes = 1e6 * static_cast<double>(rng() % 40);
    half.backward_collective_bytes = 1e6 * static_cast<double>(rng() % 40);
    point.layers.push_back(half);
  }
  request.profile.tensor_parallel_points.push_back(point);
  request.global_batch = 4;
  request.optimizer = Optimizer::kAdam;
  return request;
}

// The fastest fitting plan over every t, with and without the sharded optimizer, every
// configuration, partition and remat choice; `least_peak` as in search_test.
double BruteForce(SearchRequest request, double* least_peak = nullptr) {
  double best = kInfinity;
  if (least_peak != nullptr) *least_peak = kInfinity;
  for (bool sharded : {false, true}) {
    request.sharded_optimizer = sharded;
    for (const PartitionProblem& problem : Configurations(request)) {
      brute::ForEveryPlan(PlanSkeleton(problem), problem.ranks, problem.ranks * problem.chunks, problem.remat,
                          [&](const Plan& plan) {
                            Expected<Candidate> c = Evaluate(plan, true);
                            ASSERT_TRUE(c.ok()) << c.status().message();
                            if (least_peak != nullptr) *least_peak = std::min(*least_peak, c->peak_memory_bytes);
                            if (c->peak_memory_bytes <= problem.memory_limit_bytes) best = std::min(best, c->step_time_ms);
                          });
    }
  }
  return best;
}

TEST(TensorParallel, TheProfileAtTAddsItsCollectivesAsARing) {
  std::mt19937 rng(5);
  const SearchRequest request = TensorParallelRequest(rng, 4);
  Expected<Profile> at = ProfileAtTensorParallel(request.profile, 2, request.cluster);
  ASSERT_TRUE(at.ok()) << at.status().message();
  EXPECT_EQ(at->tensor_parallel, 2);
  EXPECT_TRUE(at->tensor_parallel_points.empty());
  const Link& link = request.cluster.link;  // devices 0 and 1 share node 0
  for (int l = 0; l < 4; ++l) {
    const TensorParallelLayer& point = request.profile.tensor_parallel_points[0].layers[l];
    // A ring of two: 2(t - 1) steps of bytes / t.
    const auto ring = [&](double bytes) {
      return bytes > 0 ? 2.0 * (link.latency_ms + bytes / 2 / link.bandwidth_bytes_per_s * 1e3) : 0.0;
    };
    EXPECT_DOUBLE_EQ(at->layers[l].forward_ms, point.layer.forward_ms + ring(point.forward_collective_bytes));
    EXPECT_DOUBLE_EQ(at->layers[l].backward_ms, point.layer.backward_ms + ring(point.backward_collective_bytes));
    EXPECT_DOUBLE_EQ(*at->layers[l].backward_weight_ms, *point.layer.backward_weight_ms);  // W has none
    EXPECT_EQ(at->layers[l].param_bytes, point.layer.param_bytes);
    EXPECT_EQ(at->layers[l].activation_bytes, point.layer.activation_bytes);
  }
  // Applying it again changes nothing; another t is refused with the sizes it has.
  Expected<Profile> again = ProfileAtTensorParallel(*at, 2, request.cluster);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(ProfileToJson(*again), ProfileToJson(*at));
  Expected<Profile> four = ProfileAtTensorParallel(request.profile, 4, request.cluster);
  ASSERT_FALSE(four.ok());
  EXPECT_NE(four.status().message().find("t in {1, 2} only"), std::string::npos) << four.status().message();
}

// A plan naming t over the whole profile costs what the planner's plan (the profile at t
// embedded) costs, and round-trips through its file with t and the sharding.
TEST(TensorParallel, APlanPricesTheWholeProfileAtItsT) {
  std::mt19937 rng(6);
  SearchRequest request = TensorParallelRequest(rng, 4);
  request.cluster.device_memory_bytes = int64_t{1} << 40;
  request.tensor_parallel = 2;
  request.replicas = 2;
  request.sharded_optimizer = true;
  Expected<SearchResult> result = SearchPlans(request);
  ASSERT_TRUE(result.ok()) << result.status().message();
  ASSERT_TRUE(result->best);
  const Plan& planned = result->best->plan;
  EXPECT_EQ(planned.tensor_parallel, 2);
  EXPECT_TRUE(planned.sharded_optimizer);
  EXPECT_EQ(planned.profile.tensor_parallel, 2);
  Plan whole = planned;
  whole.profile = request.profile;
  Expected<Candidate> a = Evaluate(planned, true), b = Evaluate(whole, true);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_DOUBLE_EQ(a->step_time_ms, b->step_time_ms);
  EXPECT_DOUBLE_EQ(a->peak_memory_bytes, b->peak_memory_bytes);
  Expected<Plan> reread = PlanFromJson(PlanToJson(whole), "plan.json", "");
  ASSERT_TRUE(reread.ok()) << reread.status().message();
  EXPECT_EQ(reread->tensor_parallel, 2);
  EXPECT_TRUE(reread->sharded_optimizer);
  EXPECT_EQ(reread->profile.tensor_parallel_points.size(), 1u);
  EXPECT_EQ(PlanToJson(*reread), PlanToJson(whole));
}

// ZeRO-1 holds each replica's share of the optimizer state, and nothing else changes: Adam in
// fp32 over D = 2 is 4 + 4 + 8 / 2 bytes per 4-byte parameter.
TEST(TensorParallel, AShardedOptimizerHoldsItsShareOfTheState) {
  EXPECT_DOUBLE_EQ(StaticBytesPerParamByte(Optimizer::kAdam, "fp32", 2), 3.0);
  EXPECT_DOUBLE_EQ(StaticBytesPerParamByte(Optimizer::kAdam, "fp32", 1), 4.0);
  EXPECT_DOUBLE_EQ(StaticBytesPerParamByte(Optimizer::kAdamMixed, "bf16", 8), (4 + 4 + 1 + 2) / 2.0);
  EXPECT_DOUBLE_EQ(StaticBytesPerParamByte(Optimizer::kSgd, "fp32", 8), 2.0);
  std::mt19937 rng(7);
  SearchRequest request = TensorParallelRequest(rng, 4);
  request.cluster.device_memory_bytes = int64_t{1} << 40;
  request.tensor_parallel = 1;
  request.ranks = 2;
  request.replicas = 2;
  request.sharded_optimizer = false;
  Expected<SearchResult> plain = SearchPlans(request);
  request.sharded_optimizer = true;
  Expected<SearchResult> sharded = SearchPlans(request);
  ASSERT_TRUE(plain.ok() && sharded.ok());
  Plan plan = plain->best->plan;
  Expected<CostModel> unsharded_costs = BuildCostModel(plan);
  plan.sharded_optimizer = true;
  Expected<CostModel> sharded_costs = BuildCostModel(plan);
  ASSERT_TRUE(unsharded_costs.ok() && sharded_costs.ok());
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const double params = static_cast<double>(ParamBytesOfLayers(plan.profile, plan.stages[s].first_layer, plan.stages[s].end_layer));
    EXPECT_DOUBLE_EQ(unsharded_costs->stages[s].static_bytes, 4.0 * params);
    EXPECT_DOUBLE_EQ(sharded_costs->stages[s].static_bytes, 3.0 * params);
  }
  // The same wire time (reduce-scatter + all-gather = one all-reduce), so never slower.
  EXPECT_EQ(unsharded_costs->allreduce_ms, sharded_costs->allreduce_ms);
  EXPECT_LE(sharded->best->step_time_ms, plain->best->step_time_ms);
  EXPECT_LT(sharded->best->peak_memory_bytes, plain->best->peak_memory_bytes);
}

// The search over t and the sharded optimizer finds the brute-force optimum, and on budgets
// where only t = 2 or only a sharded optimizer fits, it finds that; a stopped search's bound
// never exceeds the optimum.
TEST(TensorParallel, SearchEqualsBruteForceOverTAndSharding) {
  std::mt19937 rng(2027);
  int feasible = 0, won_by_t = 0, won_by_sharding = 0, infeasible = 0;
  for (int trial = 0; trial < 8; ++trial) {
    SearchRequest request = TensorParallelRequest(rng, 4 + trial % 2);
    request.cluster.device_memory_bytes = int64_t{1} << 40;
    double least_peak = 0;
    BruteForce(request, &least_peak);
    const double factor[] = {0.98, 1.02, 1.2, 2.0};
    request.cluster.device_memory_bytes = static_cast<int64_t>(least_peak * factor[trial % 4]);
    const double brute = BruteForce(request);
    Expected<SearchResult> result = SearchPlans(request);
    ASSERT_TRUE(result.ok()) << result.status().message();
    if (std::isinf(brute)) {
      EXPECT_FALSE(result->best.has_value()) << "trial " << trial;
      ++infeasible;
      continue;
    }
    ++feasible;
    ASSERT_TRUE(result->best.has_value()) << "trial " << trial;
    EXPECT_NEAR(result->best->step_time_ms, brute, 1e-9 * brute) << "trial " << trial;
    EXPECT_LE(result->lower_bound_ms, brute * (1 + 1e-9)) << "trial " << trial;
    won_by_t += result->best->plan.tensor_parallel > 1;
    won_by_sharding += result->best->plan.sharded_optimizer;
    for (int64_t nodes : {1, 30}) {
      SearchRequest stopped = request;
      stopped.max_nodes = nodes;
      Expected<SearchResult> partial = SearchPlans(stopped);
      ASSERT_TRUE(partial.ok());
      EXPECT_LE(partial->lower_bound_ms, brute * (1 + 1e-9)) << "trial " << trial << " budget " << nodes;
    }
  }
  EXPECT_GE(feasible, 4);
  EXPECT_GE(infeasible, 1);
  EXPECT_GE(won_by_t, 1);
  EXPECT_GE(won_by_sharding, 1);
}

TEST(TensorParallel, PinsAndShapesThatCannotWork) {
  std::mt19937 rng(8);
  SearchRequest request = TensorParallelRequest(rng, 4);
  request.cluster.device_memory_bytes = int64_t{1} << 40;
  request.tensor_parallel = 4;
  Expected<SearchResult> four = SearchPlans(request);
  ASSERT_FALSE(four.ok());
  EXPECT_EQ(four.status().message(),
            "t = 4: the profile prices tensor parallelism t in {1, 2} only (its tensor_parallel_measurements; "
            "profiles/generate.py writes them for transformers; a measured profile plans with t = 1)");
  request.tensor_parallel = 2;
  request.ranks = 2;
  request.replicas = 2;
  Expected<SearchResult> too_many = SearchPlans(request);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().message(), "t x K x D = 2 x 2 x 2 = 8 devices is more than the cluster's 4");
  request.replicas = 1;
  request.sharded_optimizer = true;
  Expected<SearchResult> unsharded = SearchPlans(request);
  ASSERT_FALSE(unsharded.ok());
  EXPECT_NE(unsharded.status().message().find("D = 1 has nothing to shard"), std::string::npos);
  // t must divide a node's devices.
  request.sharded_optimizer.reset();
  request.cluster.devices = 3;
  request.cluster.devices_per_node.reset();
  EXPECT_FALSE(CheckTensorParallel(2, request.profile, request.cluster).ok());
  EXPECT_EQ(CheckTensorParallel(2, request.profile, request.cluster).message(),
            "t = 2 does not divide the 3 devices of a node; a tensor-parallel group lies inside one node");
}

}  // namespace
}  // namespace gpipe
