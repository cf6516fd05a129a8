// The full search against brute force over every configuration of a small cluster, and its
// handling of pins and bad requests.
#include "planner/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "core/schedule/validate.h"
#include "planner/infeasible.h"
#include "planner/min_devices.h"
#include "planner/report.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"
#include "tests/planner/brute_force.h"
#include "tests/planner/small_request.h"

namespace gpipe {
namespace {


// The fastest fitting plan over every configuration, partition and remat choice the request's
// policy allows (by layer under auto, where one stage per rank); `least_peak`
// (when given) gets the smallest largest rank peak of any plan, fitting or not.
double BruteForce(const SearchRequest& request, double* least_peak = nullptr) {
  double best = std::numeric_limits<double>::infinity();
  if (least_peak != nullptr) *least_peak = std::numeric_limits<double>::infinity();
  for (const PartitionProblem& problem : Configurations(request)) {
    brute::ForEveryPlan(PlanSkeleton(problem), problem.ranks, problem.ranks * problem.chunks, problem.remat,
                          [&](const Plan& plan) {
                            Expected<Candidate> c = Evaluate(plan, true);
                            if (c.ok() && least_peak != nullptr) *least_peak = std::min(*least_peak, c->peak_memory_bytes);
                            if (c.ok() && c->peak_memory_bytes <= problem.memory_limit_bytes) best = std::min(best, c->step_time_ms);
                          });
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
      EXPECT_FALSE(result->best_is_least_memory);  // (no plan at all: not the least-memory one)
      continue;
    }
    EXPECT_FALSE(result->best_is_least_memory) << "trial " << trial << ": searched to the end, the search's own plan";
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

// The lower bound against brute force: whatever stops the search (a node budget of 1, 30 or
// the default, a gap target, a time limit of zero), no plan is faster than the bound it reports;
// on memory-tight budgets (1.05x the least any plan needs) and calibrated clusters too.
TEST(Search, LowerBoundNeverExceedsTheOptimum) {
  std::mt19937 rng(16);
  int checked = 0, tight = 0, calibrated = 0, proven = 0, open_gaps = 0, least_memory_offered = 0;
  for (int trial = 0; trial < 10; ++trial) {
    SearchRequest request = SmallRequest(rng, 5 + trial % 2);
    if (trial % 2 == 1) {  // calibrated: every term of core/calibration.h
      Calibration c;
      c.compute_scale = {0.9, 1.2};
      c.forward_overhead_ms = {0.05, 0.1};
      c.backward_overhead_ms = {0.1};
      c.send_overhead_ms = 0.02;
      c.step_overhead_ms = 0.3;
      c.optimizer_ms_per_gib = 200;
      c.sends_held = trial % 4 == 1;
      request.cluster.calibration = c;
      ++calibrated;
    }
    double least_peak = 0;
    request.cluster.device_memory_bytes = 1LL << 40;
    BruteForce(request, &least_peak);
    // Memory-tight (1.05x the least), a little looser, and without a limit.
    const double factor[] = {1.05, 1.3, 1e6};
    request.cluster.device_memory_bytes = static_cast<int64_t>(least_peak * factor[trial % 3]);
    tight += trial % 3 == 0;
    const double brute = BruteForce(request);
    ASSERT_TRUE(std::isfinite(brute)) << "trial " << trial;
    for (int64_t budget : {int64_t{1}, int64_t{30}, int64_t{200'000}}) {
      for (double target_gap : {0.0, 0.05}) {
        request.max_nodes = budget;
        request.target_gap = target_gap;
        request.time_limit_s = std::numeric_limits<double>::infinity();
        Expected<SearchResult> result = SearchPlans(request);
        ASSERT_TRUE(result.ok()) << result.status().message();
        const std::string label = "trial " + std::to_string(trial) + " budget " + std::to_string(budget) +
                                  " gap " + std::to_string(target_gap);
        EXPECT_LE(result->lower_bound_ms, brute * (1 + 1e-9)) << label;
        ++checked;
        if (!result->best) {  // a budget this small may find nothing that fits; then no gap is claimed
          EXPECT_FALSE(result->proven_optimal) << label;
          EXPECT_EQ(result->gap, std::numeric_limits<double>::infinity()) << label;
          continue;
        }
        EXPECT_GE(result->best->step_time_ms, brute * (1 - 1e-9)) << label;
        EXPECT_NEAR(result->gap, Gap(result->best->step_time_ms, result->lower_bound_ms), 1e-12) << label;
        if (result->stopped_by_gap) {
          EXPECT_LE(result->gap, target_gap) << label;
        }
        if (result->proven_optimal) {
          EXPECT_EQ(result->gap, 0) << label;
          EXPECT_NEAR(result->best->step_time_ms, brute, 1e-9 * brute) << label;
          ++proven;
        } else {
          open_gaps += result->gap > 0;
        }
      }
    }
    // A time limit already spent: nothing is searched, and the bound is still sound.
    request.max_nodes = 200'000;
    request.target_gap = 0;
    request.time_limit_s = 1e-9;
    Expected<SearchResult> none = SearchPlans(request);
    ASSERT_TRUE(none.ok());
    EXPECT_TRUE(none->stopped_by_time);
    EXPECT_LE(none->lower_bound_ms, brute * (1 + 1e-9));
    // What it offers then is the least-memory plan, when it fits: a plan that runs, no faster
    // than the optimum, with its gap.
    if (none->best) {
      EXPECT_TRUE(none->best_is_least_memory);
      EXPECT_LE(none->best->peak_memory_bytes, static_cast<double>(request.cluster.device_memory_bytes));
      EXPECT_GE(none->best->step_time_ms, brute * (1 - 1e-9));
      EXPECT_NEAR(none->gap, Gap(none->best->step_time_ms, none->lower_bound_ms), 1e-12);
      ++least_memory_offered;
    }
  }
  EXPECT_GE(least_memory_offered, 5);
  EXPECT_EQ(checked, 60);
  EXPECT_GE(tight, 3);
  EXPECT_GE(calibrated, 5);
  EXPECT_GE(proven, 10);
  EXPECT_GE(open_gaps, 1);  // some stops leave a gap: the bound is exercised below the optimum
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
  EXPECT_NE(message(SearchPlans(request)).find("K = 4 ranks is more than the profile's 3 layers"), std::string::npos)
      << message(SearchPlans(request));
  request.ranks = 2;
  request.replicas = 3;
  EXPECT_NE(message(SearchPlans(request)).find("K x D = 2 ranks x 3 replicas = 6 devices is more than the cluster's 4"), std::string::npos);
  request.replicas.reset();
  request.microbatches = 3;
  EXPECT_NE(message(SearchPlans(request)).find("does not split into D x M = 1 x 3 micro-batches"), std::string::npos);
}

// A CPU profile says how many ranks its node computes at once; past that the prediction prices
// the shared cores too kindly, so the search leaves such layouts out unless asked or pinned.
TEST(Search, LeavesOutLayoutsWithMoreRanksOnANodeThanItComputesAtOnce) {
  std::mt19937 rng(7);
  SearchRequest request = SmallRequest(rng, 5);
  request.cluster.devices_per_node.reset();  // one node of four devices
  request.cluster.device_memory_bytes = int64_t{1} << 40;
  StepCosts costs;
  costs.compute_scale = {{1.0, 0.0}, {1.0, 0.0}, {1.0, 0.0}, {1.0, 0.0}};
  costs.concurrent_ranks = 2;
  request.profile.step_costs = costs;

  request.oversubscribe = true;
  Expected<SearchResult> all = SearchPlans(request);
  ASSERT_TRUE(all.ok()) << all.status().message();
  EXPECT_EQ(all->oversubscribed, 0u);
  int most = 0;
  for (const PartitionProblem& p : Configurations(request)) most = std::max(most, p.ranks * p.replicas);
  EXPECT_EQ(most, 4);

  request.oversubscribe = false;
  Expected<SearchResult> capped = SearchPlans(request);
  ASSERT_TRUE(capped.ok()) << capped.status().message();
  EXPECT_LE(capped->best->plan.num_ranks() * capped->best->plan.replicas, 2);
  EXPECT_EQ(capped->concurrent_ranks, 2);
  EXPECT_EQ(capped->configurations + capped->oversubscribed, all->configurations);
  EXPECT_GT(capped->oversubscribed, 0u);
  for (const PartitionProblem& p : Configurations(request)) EXPECT_LE(p.ranks * p.replicas, 2);

  // K and D both pinned: the user asked for that layout.
  request.ranks = 2;
  request.replicas = 2;
  Expected<SearchResult> pinned = SearchPlans(request);
  ASSERT_TRUE(pinned.ok()) << pinned.status().message();
  EXPECT_EQ(pinned->oversubscribed, 0u);
  EXPECT_EQ(pinned->best->plan.num_ranks() * pinned->best->plan.replicas, 4);

  // K pinned alone to a layout past the cap: the error says how to get it.
  request.ranks = 4;
  request.replicas.reset();
  Expected<SearchResult> refused = SearchPlans(request);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--oversubscribe"), std::string::npos) << refused.status().message();
}

// When only the layouts the cap leaves out would fit, the report says so and how to search them,
// and its least memory on these devices is the one of every layout.
TEST(Search, WhenOnlyLeftOutLayoutsFitTheReportNamesOversubscribe) {
  std::mt19937 rng(7);
  SearchRequest request = SmallRequest(rng, 5);
  request.cluster.devices_per_node.reset();
  request.remat = RematPolicy::kOff;
  StepCosts costs;
  costs.compute_scale = {{1.0, 0.0}, {1.0, 0.0}, {1.0, 0.0}, {1.0, 0.0}};
  costs.concurrent_ranks = 2;
  request.profile.step_costs = costs;
  Expected<LeastMemory> on_four = LeastMemoryOn(request, 4);
  Expected<LeastMemory> on_two = LeastMemoryOn(request, 2);
  ASSERT_TRUE(on_four.ok() && on_two.ok());
  ASSERT_LT(on_four->peak_bytes, on_two->peak_bytes);
  request.cluster.device_memory_bytes = static_cast<int64_t>(on_four->peak_bytes) + 1;
  Expected<SearchResult> capped = SearchPlans(request);
  ASSERT_TRUE(capped.ok()) << capped.status().message();
  ASSERT_FALSE(capped->best.has_value()) << "a plan of two ranks per node fits; the test needs a tighter budget";
  EXPECT_GT(capped->oversubscribed, 0u);
  const std::string report = FormatPlanReport(request, *capped, 0.0);
  EXPECT_NE(report.find("--oversubscribe searches them"), std::string::npos) << report;
  const InfeasibleReport why = ExplainInfeasible(request);
  ASSERT_TRUE(why.least.has_value());
  EXPECT_LE(why.least->peak_bytes, static_cast<double>(request.cluster.device_memory_bytes));
  request.oversubscribe = true;
  Expected<SearchResult> asked = SearchPlans(request);
  ASSERT_TRUE(asked.ok()) << asked.status().message();
  EXPECT_TRUE(asked->best.has_value());
}

// A request of `layers` random layers on `devices` devices (one node) with the least memory a
// plan needs on 3 devices as its budget: on fewer, most likely nothing fits.
SearchRequest TightOnFewDevices(std::mt19937& rng, int layers, int devices) {
  SearchRequest request = SmallRequest(rng, layers);
  request.cluster.devices = devices;
  request.cluster.devices_per_node.reset();
  Expected<LeastMemory> on_three = LeastMemoryOn(request, 3);
  EXPECT_TRUE(on_three.ok());
  request.cluster.device_memory_bytes = on_three.ok() ? static_cast<int64_t>(on_three->peak_bytes) : 0;
  return request;
}

// The report of what would fit: the fewest devices it names fit and one fewer does not (the scan
// doubles, then bisects; budgets of the least memory on 3 devices); with its time spent before it
// starts, it says it stopped rather than that no count is enough.
TEST(Search, TheFewestDevicesFitAndOneFewerDoesNot) {
  std::mt19937 rng(41);
  int checked = 0;
  for (int trial = 0; trial < 6; ++trial) {
    SearchRequest request = TightOnFewDevices(rng, 7, 1);
    Expected<SearchResult> none = SearchPlans(request);
    ASSERT_TRUE(none.ok());
    if (none->best) continue;  // one device is enough after all
    const InfeasibleReport why = ExplainInfeasible(request);
    ASSERT_TRUE(why.fewest.has_value()) << "trial " << trial;
    EXPECT_FALSE(why.fewest_stopped);
    const int fewest = why.fewest->devices;
    EXPECT_LE(why.fewest->best.peak_memory_bytes, static_cast<double>(request.cluster.device_memory_bytes));
    SearchRequest fewer = request;
    fewer.cluster = ResizedCluster(request.cluster, fewest - 1);
    if (fewest - 1 > request.cluster.devices) {
      Expected<SearchResult> below = SearchPlans(fewer);
      ASSERT_TRUE(below.ok());
      EXPECT_FALSE(below->best.has_value()) << "trial " << trial << ": " << fewest - 1 << " devices fit too";
    }
    ++checked;
    request.time_limit_s = 0;  // spent before the report starts
    const InfeasibleReport stopped = ExplainInfeasible(request);
    EXPECT_FALSE(stopped.fewest.has_value());
    EXPECT_TRUE(stopped.fewest_stopped);
    EXPECT_NE(FormatInfeasible(stopped).find("not found before the time limit"), std::string::npos);
  }
  EXPECT_GE(checked, 3);
}

// One time limit for `plan`: from `started_at_s`, the search that finds no plan (nor a fitting
// least-memory plan) by half of it stops there, and the report of what would fit runs to the end
// of the same limit; without `started_at_s` each counts from its own start. (A clock the test
// sets: nothing here depends on how fast the machine is.)
TEST(Search, TheSearchAndTheReportShareOneTimeLimit) {
  std::mt19937 rng(41);
  int checked = 0, searched = 0;
  for (int trial = 0; trial < 6; ++trial) {
    SearchRequest request = TightOnFewDevices(rng, 7, 2);
    double now = 0;
    request.clock = [&now] { return now; };
    request.time_limit_s = 10;
    Expected<SearchResult> none = SearchPlans(request);
    ASSERT_TRUE(none.ok());
    if (none->best) continue;  // one device is enough after all
    EXPECT_FALSE(none->stopped_by_time) << "trial " << trial << ": the clock stood still";
    searched += none->searched > 0;
    // 6 s of 10 gone since the command started: the search stops at once, the report goes on.
    request.started_at_s = -6;
    Expected<SearchResult> late = SearchPlans(request);
    ASSERT_TRUE(late.ok());
    EXPECT_FALSE(late->best.has_value());
    EXPECT_TRUE(late->stopped_by_time) << "trial " << trial;
    EXPECT_EQ(late->searched, 0u) << "trial " << trial;
    EXPECT_NE(FormatPlanReport(request, *late, 0.0).find("stopped at --time-limit without a plan"), std::string::npos);
    const InfeasibleReport report = ExplainInfeasible(request);
    EXPECT_TRUE(report.fewest.has_value()) << "trial " << trial;
    EXPECT_FALSE(report.fewest_stopped);
    // All 10 gone: the report's scan stops too; from its own start it would not have.
    request.started_at_s = -10;
    EXPECT_TRUE(ExplainInfeasible(request).fewest_stopped) << "trial " << trial;
    request.started_at_s = std::numeric_limits<double>::quiet_NaN();
    EXPECT_FALSE(ExplainInfeasible(request).fewest_stopped) << "trial " << trial;
    ++checked;
  }
  EXPECT_GE(checked, 3);
  EXPECT_GE(searched, 1);  // some searches that find nothing run when the limit is theirs
}

// A search that stops without a plan tries the least-memory plan on its devices; the report of
// what would fit then reads that one instead of computing it again, when it prices the same remat
// (whole stages: the search's always, the report's past 256 layers or when asked), and says the
// same as a report computed afresh. Under auto with few layers it prices by layer: its own.
TEST(Search, TheReportReusesTheSearchsLeastMemoryPlanWhereItPricesTheSame) {
  std::mt19937 rng(43);
  int reused = 0, own = 0;
  for (int trial = 0; trial < 6; ++trial) {
    SearchRequest request = TightOnFewDevices(rng, 7, 2);
    request.remat = trial % 2 == 0 ? RematPolicy::kStages : RematPolicy::kAuto;
    double now = 0;
    request.clock = [&now] { return now; };
    request.time_limit_s = 10;
    request.started_at_s = -6;  // past half the limit: the search stops at once, without a plan
    Expected<SearchResult> late = SearchPlans(request);
    ASSERT_TRUE(late.ok());
    if (late->best) continue;  // the least-memory plan fits after all
    ASSERT_NE(late->least_memory, nullptr) << "trial " << trial;
    EXPECT_EQ(late->least_memory_remat, RematPolicy::kStages);
    const InfeasibleReport with = ExplainInfeasible(request, &*late);
    const InfeasibleReport fresh = ExplainInfeasible(request);
    ASSERT_TRUE(with.least && fresh.least) << "trial " << trial;
    EXPECT_EQ(with.least->peak_bytes, fresh.least->peak_bytes) << "trial " << trial;
    EXPECT_EQ(with.least->fullest_rank, fresh.least->fullest_rank) << "trial " << trial;
    EXPECT_EQ(with.least->plan.StageRanks(), fresh.least->plan.StageRanks()) << "trial " << trial;
    EXPECT_EQ(FormatInfeasible(with), FormatInfeasible(fresh)) << "trial " << trial;
    const bool same_remat = request.remat == RematPolicy::kStages;
    (same_remat ? reused : own) += 1;
    if (same_remat) {
      EXPECT_EQ(with.least->peak_bytes, late->least_memory->peak_bytes);
    }
  }
  EXPECT_GE(reused, 2);
  EXPECT_GE(own, 2);
}

// With 15-30% of the time limit gone and no plan yet, the search first tries the seeds of the
// configurations CheapBounds::Estimate ranks first (dives), then goes on as before: with the
// clock standing still it ends where the search without them does, the same best step, proven
// the same. (A clock the test sets.)
TEST(Search, SeedsTriedFirstWhenLateLeaveTheResultAsItWas) {
  std::mt19937 rng(59);
  int dived = 0;
  for (int trial = 0; trial < 6; ++trial) {
    SearchRequest request = SmallRequest(rng, 6);
    request.cluster.devices = 4 + 4 * (trial % 2);
    double now = 0;
    request.clock = [&now] { return now; };
    request.time_limit_s = 10;
    Expected<SearchResult> plain = SearchPlans(request);
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(plain->dives, 0u) << "trial " << trial << ": the clock stood at the start";
    request.started_at_s = -2;  // 20% gone
    Expected<SearchResult> late = SearchPlans(request);
    ASSERT_TRUE(late.ok());
    ASSERT_EQ(plain->best.has_value(), late->best.has_value()) << "trial " << trial;
    dived += late->dives > 0;
    if (!plain->best) continue;
    EXPECT_DOUBLE_EQ(late->best->step_time_ms, plain->best->step_time_ms) << "trial " << trial;
    EXPECT_EQ(late->proven_optimal, plain->proven_optimal) << "trial " << trial;
    request.started_at_s = -4;  // 40% gone: past the dives' share, none
    Expected<SearchResult> later = SearchPlans(request);
    ASSERT_TRUE(later.ok());
    EXPECT_EQ(later->dives, 0u) << "trial " << trial;
  }
  EXPECT_GE(dived, 4);
}

}  // namespace
}  // namespace gpipe
