// The full search: over K ranks, D replicas, M micro-batches, schedules (with chunks per rank for
// interleaved 1F1B) and placements, the exact partition of each configuration (partition.h),
// keeping the fastest plan that fits and the alternatives that trade step time for memory.
//
// Configurations are visited best-first by a lower bound on their step time (a cheap one, then
// the partition search's own root bound); a configuration whose bound cannot beat the best plan
// found is skipped, so the answer is the same as searching every configuration, only sooner.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/status.h"
#include "planner/partition.h"

namespace gpipe {

struct LeastMemory;  // planner/min_devices.h

struct SearchRequest {
  Profile profile;
  /// The cluster, with any --devices / --memory overrides already applied.
  Cluster cluster;
  int64_t global_batch = 1;
  /// Pinned dimensions (unset: searched).
  std::optional<int> ranks;
  std::optional<int> replicas;
  std::optional<int> microbatches;
  std::optional<ScheduleKind> schedule;
  std::optional<int> chunks;
  std::optional<Placement> placement;
  /// t: tensor parallelism, searched over the sizes the profile prices (TensorParallelSizes) that
  /// divide a node's devices.
  std::optional<int> tensor_parallel;
  /// ZeRO-1 over the replicas. Unpinned, configurations with D > 1 shard: in the model sharding
  /// never lengthens a step (its reduce-scatter and all-gather cost the all-reduce they replace,
  /// the optimizer updates a shard) and holds less, so it is what the search over both would keep.
  std::optional<bool> sharded_optimizer;
  RematPolicy remat = RematPolicy::kAuto;
  Optimizer optimizer = Optimizer::kAdam;
  /// Search layouts that put more ranks on a node than it computes at full speed at once (the
  /// profile's step_costs.concurrent_ranks: a CPU node's cores over each rank's threads). Off,
  /// they are left out unless K and D are both pinned: the prediction prices those ranks' shared
  /// cores evenly, and on the 2-core machine such plans ran 14-33% slower than predicted at the
  /// median (bench/RESULTS.md), so the planner would pick them for a speed they do not reach.
  bool oversubscribe = false;
  /// Per configuration, the partition search's node budget.
  int64_t max_nodes = 200'000;
  /// Wall-clock limit of the whole search in seconds: it stops with the best plan and the gap so
  /// far (infinity: none).
  double time_limit_s = std::numeric_limits<double>::infinity();
  /// The clock time_limit_s is measured on, in seconds from any origin (null: the steady wall
  /// clock; planner_bench passes the process's CPU time, so that its limits mean one core's).
  std::function<double()> clock;
  /// The reading of `clock` (ClockOf) from which time_limit_s counts (NaN: from the start of each
  /// search, and of the report of what would fit, apart). `plan` sets it once, so that the search
  /// and the report share one limit.
  double started_at_s = std::numeric_limits<double>::quiet_NaN();
  /// Polled with the time limit (null: never): once true, the search stops as at its time limit (a
  /// caller's own deadline, e.g. the infeasible report's).
  std::function<bool()> stop;
  /// Stop once the gap (see SearchResult) is at most this (0: search until every configuration
  /// is done, with the alternatives).
  double target_gap = 0;
  /// Called now and then with (configurations done, configurations in all, best step so far).
  std::function<void(size_t, size_t, double)> progress;
};

/// One configuration's best plan, with what the simulator predicts for it.
struct Candidate {
  Plan plan;
  double step_time_ms = 0;
  double throughput_samples_per_s = 0;
  double bubble_fraction = 0;
  /// The largest peak over the ranks.
  double peak_memory_bytes = 0;
  bool proven_optimal = true;
};

/// The share of the time limit after which a search that has found no plan tries the first
/// plans of the configurations CheapBounds::Estimate ranks first, ahead of the queue's order.
inline constexpr double kDiveAfter = 0.15;

struct SearchResult {
  /// The fastest plan that fits, if any.
  std::optional<Candidate> best;
  /// Plans no other plan beats in both step time and peak memory, fastest first, among the
  /// configurations searched (those within 25% of the fastest plan's step time).
  std::vector<Candidate> pareto;
  size_t configurations = 0;
  size_t searched = 0;
  size_t skipped_by_bound = 0;
  /// Lower bounds raised after the searches (the least configurations' full bounds).
  size_t bounds_raised = 0;
  /// Configurations whose first plan was tried out of the queue's order, no search having found
  /// one in time (SearchPlans' dive).
  size_t dives = 0;
  /// Configurations left out for putting more ranks on a node than it computes at once
  /// (SearchRequest::oversubscribe), and that count of ranks (0: none left out).
  size_t oversubscribed = 0;
  int concurrent_ranks = 0;
  int64_t nodes = 0;
  /// Whether every searched configuration finished within its node budget.
  bool proven_optimal = true;
  /// The configurations whose search stopped at its budget, e.g. "interleaved-1f1b K=8 v=2
  /// D=1 M=64" (their best plans are kept, but a faster plan may exist there).
  std::vector<std::string> unproven;
  /// No plan of the searched space (every configuration, partition and remat choice that fits)
  /// has a shorter simulated step than this: the minimum over the configurations of what each
  /// proved (its optimum when searched to the end, its lower bound otherwise). Infinity when
  /// proven that nothing fits.
  double lower_bound_ms = 0;
  /// The configuration whose bound is lower_bound_ms, and how it got it, e.g. "interleaved-1f1b
  /// K=8 v=2 D=1 M=64 (its root bound: its search stopped)"; empty when the gap is 0.
  std::string lower_bound_at;
  /// best step / lower_bound_ms - 1 (0: the best plan is optimal; infinity: no plan found).
  double gap = std::numeric_limits<double>::infinity();
  /// The search stopped at `time_limit_s` or at `target_gap` before it was done.
  bool stopped_by_time = false;
  bool stopped_by_gap = false;
  /// The search stopped before it found a plan, and `best` is the least-memory plan with
  /// whole-stage remat (1F1B, one stage per device, one sample per micro-batch:
  /// planner/min_devices.h), which fits.
  bool best_is_least_memory = false;
  /// When a newer schedule (interleaved-zb, zb-v, dualpipe-v) has the best plan: the fastest plan
  /// of the older ones (gpipe, 1f1b, interleaved-1f1b, zb-h1) that fits, searched as if the newer
  /// ones did not exist; empty when none fits (or the best is an older schedule).
  std::optional<Candidate> best_older;
  /// The least-memory plan the search tried when it had none (LeastMemoryOn on its devices, under
  /// `least_memory_remat`: whole stages where the request says auto), for the report of what would
  /// fit to reuse (ExplainInfeasible); null when not tried or when it failed.
  std::shared_ptr<const LeastMemory> least_memory;
  RematPolicy least_memory_remat = RematPolicy::kAuto;
  double least_memory_s = 0;  // what its program took (the report paces itself by it)
};

/// best / lower_bound - 1, as SearchResult::gap (0 when they agree to 1e-9, infinity when best is).
double Gap(double best_ms, double lower_bound_ms);

/// The request's clock: `clock`, or the steady wall clock when null (seconds).
std::function<double()> ClockOf(const SearchRequest& request);
/// The request's deadline, from `started_at_s` (or from now): true once `share` of `time_limit_s`
/// less `*reserve_s` (read at each call; null: none) has passed on ClockOf(request), or once
/// `stop` says so.
std::function<bool()> DeadlineOf(const SearchRequest& request, double share = 1.0, const double* reserve_s = nullptr);

/// Checks the request (batch, pins against the cluster and the profile) and searches. A request
/// that cannot work is a Status::Usage naming K, D, M and the batch (CheckPipelineShape), not flags.
Expected<SearchResult> SearchPlans(const SearchRequest& request);

/// Simulates `plan` and summarizes it as a Candidate.
Expected<Candidate> Evaluate(const Plan& plan, bool proven_optimal);

/// The profiles a search's configurations are priced by, by (t, micro-batch size): the profile at
/// each t (ProfileAtTensorParallel), and at each size where it measured several.
using ProfileStore = std::map<std::pair<int, int64_t>, Profile>;

/// The configurations SearchPlans would consider (for --help texts and tests). A profile measured at
/// several micro-batch sizes is evaluated at each configuration's own size (profile_sizes.h), and
/// each t at its own profile: those profiles go into `profiles`, which must outlive the problems
/// (they point into it); without it they point at the request's profile (good for counting only).
/// `oversubscribed`, when given, counts the configurations left out for SearchRequest::oversubscribe.
std::vector<PartitionProblem> Configurations(const SearchRequest& request, ProfileStore* profiles = nullptr,
                                             size_t* oversubscribed = nullptr);

/// How many ranks a node of the request's profile computes at full speed at once, when the
/// search leaves out layouts past it (SearchRequest::oversubscribe); 0 when it leaves none out.
int OversubscriptionCap(const SearchRequest& request);

}  // namespace gpipe
