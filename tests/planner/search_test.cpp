// The full search against brute force over every configuration of a small cluster, and its
// handling of pins and bad requests.
#include "planner/search.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "core/schedule/validate.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"

namespace gpipe {
namespace {

SearchRequest SmallRequest(std::mt19937& rng, int layers) {
  SearchRequest request;
  request.profile.model = "small";
  request.profile.device = "test";
  request.profile.microbatch_size = 1;
  for (int l = 0; l < layers; ++l) {
    LayerProfile layer;
    layer.name = "l" + std::to_string(l);
    layer.forward_ms = 0.5 + (rng() % 100) / 40.0;
    layer.backward_ms = 2 * layer.forward_ms;
    layer.backward_weight_ms = layer.forward_ms * (0.5 + (rng() % 50) / 100.0);
    layer.param_bytes = 1'000'000 * (1 + static_cast<int64_t>(rng() % 8));
    layer.activation_bytes = 4'000'000 * (1 + static_cast<int64_t>(rng() % 8));
    layer.output_bytes = 1'000'000 * (1 + static_cast<int64_t>(rng() % 8));
    request.profile.layers.push_back(layer);
  }
  request.cluster.devices = 4;
  request.cluster.devices_per_node = 2;
  request.cluster.link = Link{10e9, 0.02};
  request.cluster.inter_node_link = Link{1e9, 0.2};
  request.global_batch = 8;
  return request;
}

// The fastest fitting plan over every configuration, partition and remat choice.
double BruteForce(const SearchRequest& request) {
  double best = std::numeric_limits<double>::infinity();
  for (const PartitionProblem& problem : Configurations(request)) {
    const int stages = problem.ranks * problem.chunks;
    const int layers = request.profile.num_layers();
    std::vector<int> ends(stages);
    std::function<void(int, int)> place = [&](int s, int first) {
      if (s == stages) {
        if (ends.back() != layers) return;
        for (int mask = 0; mask < (1 << stages); ++mask) {
          if (problem.remat == RematPolicy::kOff && mask != 0) continue;
          Plan plan = PlanSkeleton(problem);
          int begin = 0;
          for (int t = 0; t < stages; ++t) {
            plan.stages.push_back({begin, ends[t], t % problem.ranks, static_cast<bool>((mask >> t) & 1)});
            begin = ends[t];
          }
          Expected<Candidate> c = Evaluate(plan, true);
          if (c.ok() && c->peak_memory_bytes <= problem.memory_limit_bytes) best = std::min(best, c->step_time_ms);
        }
        return;
      }
      for (int e = first + 1; e <= layers - (stages - 1 - s); ++e) {
        ends[s] = e;
        place(s + 1, e);
      }
    };
    place(0, 0);
  }
  return best;
}

TEST(Search, FindsTheFastestPlanOverEveryConfiguration) {
  std::mt19937 rng(99);
  int feasible = 0;
  for (int trial = 0; trial < 6; ++trial) {
    SearchRequest request = SmallRequest(rng, 5);
    request.cluster.device_memory_bytes = 60'000'000 + 40'000'000 * (trial % 3);
    const double brute = BruteForce(request);
    Expected<SearchResult> result = SearchPlans(request);
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_TRUE(result->proven_optimal);
    if (std::isinf(brute)) {
      EXPECT_FALSE(result->best.has_value());
      continue;
    }
    ++feasible;
    ASSERT_TRUE(result->best.has_value()) << "trial " << trial;
    EXPECT_NEAR(result->best->step_time_ms, brute, 1e-9 * brute) << "trial " << trial;
    // The Pareto list starts with the best and trades time for memory strictly.
    ASSERT_FALSE(result->pareto.empty());
    EXPECT_EQ(result->pareto.front().step_time_ms, result->best->step_time_ms);
    for (size_t i = 1; i < result->pareto.size(); ++i) {
      EXPECT_GE(result->pareto[i].step_time_ms, result->pareto[i - 1].step_time_ms);
      EXPECT_LT(result->pareto[i].peak_memory_bytes, result->pareto[i - 1].peak_memory_bytes);
    }
  }
  EXPECT_GE(feasible, 3);
}

TEST(Search, RespectsPinnedDimensions) {
  std::mt19937 rng(5);
  SearchRequest request = SmallRequest(rng, 6);
  request.cluster.device_memory_bytes = 1LL << 40;
  request.ranks = 2;
  request.microbatches = 4;
  request.schedule = ScheduleKind::k1F1B;
  Expected<SearchResult> result = SearchPlans(request);
  ASSERT_TRUE(result.ok());
  ASSERT_TRUE(result->best.has_value());
  const Plan& plan = result->best->plan;
  EXPECT_EQ(plan.num_ranks(), 2);
  EXPECT_EQ(plan.microbatches, 4);
  EXPECT_EQ(plan.schedule, ScheduleKind::k1F1B);
  request.remat = RematPolicy::kOn;
  Expected<SearchResult> remat = SearchPlans(request);
  ASSERT_TRUE(remat.ok() && remat->best.has_value());
  for (const StagePlan& stage : remat->best->plan.stages) EXPECT_TRUE(stage.remat);
}

TEST(Search, RefusesRequestsThatCannotWork) {
  std::mt19937 rng(5);
  SearchRequest request = SmallRequest(rng, 3);
  request.cluster.device_memory_bytes = 1LL << 40;
  const auto message = [](const Expected<SearchResult>& r) { return r.ok() ? std::string("ok") : r.status().message(); };
  request.ranks = 4;
  EXPECT_NE(message(SearchPlans(request)).find("--stages 4 is more than the profile's 3 layers"), std::string::npos)
      << message(SearchPlans(request));
  request.ranks = 2;
  request.replicas = 3;
  EXPECT_NE(message(SearchPlans(request)).find("needs more than the cluster's 4 devices"), std::string::npos);
  request.replicas.reset();
  request.microbatches = 3;
  EXPECT_NE(message(SearchPlans(request)).find("does not split into 3 micro-batches"), std::string::npos);
}

}  // namespace
}  // namespace gpipe
