// The bounds every configuration is queued by (its cheap bound, then its partition search's quick
// root bound) and its full root bound, against every plan of it: brute force over small random
// profiles on clusters of one, two and four nodes, with calibrations, links measured pair by pair
// and measured all-reduces; no plan of a configuration is faster than any of them.
#include "planner/cheap_bound.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <string>

#include "planner/search.h"
#include "tests/planner/brute_force.h"
#include "tests/planner/small_request.h"

namespace gpipe {
namespace {

struct Checked {
  int configurations = 0;
  int split = 0;      // of the zero-bubble kinds
  int across = 0;     // with replicas on more than one node
  double tightest = 0;  // the largest bound / fastest plan seen with K > 1 and D > 1
};

// Every configuration of `request`: its bound against the fastest of its plans (memory aside).
void CheckEveryConfiguration(const SearchRequest& request, const std::string& label, Checked* checked) {
  CheapBounds bounds;
  for (const PartitionProblem& problem : Configurations(request)) {
    double fastest = std::numeric_limits<double>::infinity();
    brute::ForEveryPlan(PlanSkeleton(problem), problem.ranks, problem.ranks * problem.chunks, problem.remat,
                        [&](const Plan& plan) {
                          Expected<Candidate> c = Evaluate(plan, true);
                          if (c.ok()) fastest = std::min(fastest, c->step_time_ms);
                        });
    if (!std::isfinite(fastest)) continue;
    const double bound = bounds.Of(problem);
    PartitionProblem quick = problem;
    quick.quick_bound = true;
    const double root_quick = PartitionLowerBound(quick);
    const double root_full = PartitionLowerBound(problem);
    const std::string name = label + ": " + ScheduleName(problem.schedule) + " K=" + std::to_string(problem.ranks) +
                             " v=" + std::to_string(problem.chunks) + " D=" + std::to_string(problem.replicas) +
                             " M=" + std::to_string(problem.microbatches) + " " + PlacementName(problem.placement);
    EXPECT_LE(bound, fastest * (1 + 1e-9)) << name;
    EXPECT_LE(root_quick, fastest * (1 + 1e-9)) << name << " (quick root bound)";
    EXPECT_LE(root_full, fastest * (1 + 1e-9)) << name << " (full root bound)";
    ++checked->configurations;
    checked->split += SplitsBackward(problem.schedule);
    checked->across += problem.replicas > 1 && request.cluster.devices_per_node &&
                       problem.replicas > *request.cluster.devices_per_node;
    if (problem.ranks > 1 && problem.replicas > 1) checked->tightest = std::max(checked->tightest, bound / fastest);
  }
}

TEST(CheapBound, NoPlanOfAConfigurationIsFasterThanItsBound) {
  std::mt19937 rng(23);
  Checked checked;
  for (int trial = 0; trial < 8; ++trial) {
    SearchRequest request = SmallRequest(rng, 4 + trial % 2);
    request.remat = trial % 2 == 0 ? RematPolicy::kAuto : RematPolicy::kOff;
    request.cluster.device_memory_bytes = 1LL << 40;
    switch (trial % 4) {
      case 0: break;  // four devices, two per node
      case 1:         // eight devices, two per node, calibrated
        request.cluster.devices = 8;
        request.global_batch = 16;
        request.cluster.calibration = Calibration();
        request.cluster.calibration->compute_scale = {0.9, 1.2};
        request.cluster.calibration->forward_overhead_ms = {0.05};
        request.cluster.calibration->send_overhead_ms = 0.02;
        request.cluster.calibration->optimizer_ms_per_gib = 200;
        break;
      case 2:  // one node, a pair of devices measured faster than the rest
        request.cluster.devices_per_node.reset();
        request.cluster.links.push_back(LinkOverride{0, 1, Link{40e9, 0.001}});
        request.cluster.links.push_back(LinkOverride{1, 0, Link{40e9, 0.001}});
        break;
      case 3:  // all-reduces of two devices measured
        request.cluster.allreduce.push_back(AllReduceSample{2, 1'000'000, 0.01});
        request.cluster.allreduce.push_back(AllReduceSample{2, 100'000'000, 0.5});
        break;
    }
    CheckEveryConfiguration(request, "trial " + std::to_string(trial), &checked);
  }
  std::cout << checked.configurations << " configurations, " << checked.split << " zero-bubble, " << checked.across
            << " with replicas on several nodes; the largest bound / fastest plan " << checked.tightest << "\n";
  EXPECT_GE(checked.configurations, 200);
  EXPECT_GE(checked.split, 50);
  EXPECT_GE(checked.across, 20);
  // Not vacuous: where messages and all-reduces count, the bound comes close to the fastest plan.
  EXPECT_GE(checked.tightest, 0.98);
}

// The estimate the search tries seeds by when its queue finds no plan in time skips only
// configurations where no plan fits: infinite where the average rank's model state alone passes
// the memory, so some rank's does. Brute force over every plan, memories from roomy to a few
// layers' worth.
TEST(CheapBound, TheEstimateSkipsOnlyConfigurationsWhereNothingFits) {
  std::mt19937 rng(53);
  int skipped = 0, kept = 0;
  for (int trial = 0; trial < 6; ++trial) {
    SearchRequest request = SmallRequest(rng, 5);
    request.optimizer = trial % 2 == 0 ? Optimizer::kAdam : Optimizer::kSgd;
    request.cluster.device_memory_bytes = int64_t{6'000'000} * (1 + trial * 3);
    CheapBounds bounds;
    for (const PartitionProblem& problem : Configurations(request)) {
      if (std::isfinite(bounds.Estimate(problem))) {
        ++kept;
        continue;
      }
      ++skipped;
      bool fits = false;
      brute::ForEveryPlan(PlanSkeleton(problem), problem.ranks, problem.ranks * problem.chunks, problem.remat,
                          [&](const Plan& plan) {
                            Expected<Candidate> c = Evaluate(plan, true);
                            fits = fits || (c.ok() && c->peak_memory_bytes <= problem.memory_limit_bytes);
                          });
      EXPECT_FALSE(fits) << "trial " << trial << ": " << ScheduleName(problem.schedule) << " K=" << problem.ranks
                         << " D=" << problem.replicas << " M=" << problem.microbatches;
    }
  }
  EXPECT_GE(skipped, 20);
  EXPECT_GE(kept, 20);
}

}  // namespace
}  // namespace gpipe
