// The exact partition search: for one choice of schedule, K ranks (v chunks each), M
// micro-batches, D replicas and placement, the contiguous cut of the layers into stages, and
// each stage's remat, with the shortest simulated step that fits every rank's memory.
//
// Exact means: no other partition (and remat choice) has a shorter step time as the simulator
// computes it (StepEvaluator is the simulator's step time, bit for bit) under the simulator's own
// memory peaks. The search is a depth-first branch and bound over stage boundaries:
//   - remat: a stage rematerializes only when it does not fit without, as little as makes it fit
//     (a stage's memory does not depend on other stages' remat); interleaved ranks try every
//     least set of chunks that fits. With a profile that times forwards only as recorded, step
//     time never falls when a stage recomputes, so this is the fastest remat too. With forwards
//     timed under no_grad (LayerProfile::forward_no_grad_ms) a remat stage's F is cheaper, and
//     recomputing more than memory demands can, rarely, shorten a step (1 of 135 feasible random
//     instances under auto in tests/planner/partition_test.cpp); the search then is exact over
//     the partitions, each stage recomputing what memory demands;
//   - bounds: every rank r needs head_r + M x work_r + tail_r (its first forward waits for the
//     stages before it, its last backward feeds them), a rank cannot start its first backward
//     before micro-batch 0 went all the way and back, and the all-reduce follows a rank's last
//     action; for the stages not yet placed the bound is minimized exactly by a greedy over a
//     relaxation (cheapest messages, no buffers) that is monotone in the stage boundaries;
//   - a node is pruned when its bound reaches the best step found; leaves are simulated.
// With `max_nodes` reached, the result says it is not proven optimal.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "core/plan.h"
#include "core/status.h"

namespace gpipe {

class ShapeCache;

/// Which stages recompute their forward in the backward: off, none; on, every stage all its
/// layers; stages, a stage all its layers or none, only where it does not fit otherwise; auto, by
/// layer: a stage's first n layers, the fewest that make it fit (one stage per rank; interleaved
/// chunks as under stages).
enum class RematPolicy { kOff, kOn, kAuto, kStages };
const char* RematPolicyName(RematPolicy policy);
Expected<RematPolicy> ParseRematPolicy(const std::string& name);

struct PartitionProblem {
  const Profile* profile = nullptr;
  const Cluster* cluster = nullptr;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int ranks = 1;
  /// Stages per rank (interleaved 1F1B); 1 otherwise.
  int chunks = 1;
  int microbatches = 1;
  int replicas = 1;
  int64_t global_batch = 1;
  Placement placement = Placement::kPipelineMajor;
  Optimizer optimizer = Optimizer::kAdam;
  /// t: each rank on t devices of a node; `profile` is then the profile at t
  /// (ProfileAtTensorParallel) and the cluster holds t x K x D devices.
  int tensor_parallel = 1;
  /// ZeRO-1 over the replicas (Plan::sharded_optimizer).
  bool sharded_optimizer = false;
  RematPolicy remat = RematPolicy::kAuto;
  /// Per-device memory the plan must fit.
  double memory_limit_bytes = 0;
  /// Search budget in nodes; beyond it the best plan so far is returned, not proven optimal.
  int64_t max_nodes = 2'000'000;
  /// Only plans faster than this are sought (the best of other configurations, when searching
  /// many); infinity to find the best at any speed.
  double cutoff_ms = std::numeric_limits<double>::infinity();
  /// Polled every 256 nodes; once true, the search stops as at its node budget (best plan so
  /// far, not proven optimal). Null: never.
  std::function<bool()> time_up;
  /// PartitionLowerBound of this problem when the caller has it already (a search's key), reused
  /// as the root bound instead of computed again; NaN: none (the search computes the full bound,
  /// whose prices, planner/path_bound.h, also prune its branches and seed it).
  double root_bound_ms = std::numeric_limits<double>::quiet_NaN();
  /// PartitionLowerBound leaves out the chains of the schedule's own order with one stage per
  /// rank, and their game over the schedule's longest paths with several (planner/path_bound.h),
  /// which costs up to a few hundred dynamic programs over the layers; a search of many
  /// configurations computes them for its contenders only.
  bool quick_bound = false;
  /// With several stages per rank: prune by the whole layers the ranks still to get stages must
  /// take (planner/interleaved_search.h, WholeLayerLevel). It prunes more per node but takes the
  /// search deeper, where nodes cost more (their memory frontiers): a search of many
  /// configurations leaves it to its second search of a stopped one, up to 256 layers.
  bool whole_layer_level = true;
  /// Schedules' evaluators and memory frontiers shared with other searches of the same caller
  /// (not owned; null: the search builds its own).
  ShapeCache* shapes = nullptr;
};

/// The samples of one micro-batch over the profile's micro-batch size: what the profile's
/// per-layer times and bytes are scaled by for `problem`.
inline double ProfileScale(const PartitionProblem& problem) {
  return static_cast<double>(problem.global_batch) / (static_cast<double>(problem.replicas) * problem.microbatches) /
         static_cast<double>(problem.profile->microbatch_size);
}

struct PartitionResult {
  /// The best plan (absent when nothing fits).
  std::optional<Plan> plan;
  double step_time_ms = 0;
  int64_t nodes = 0;
  int64_t leaves = 0;
  /// False when the node budget or the deadline ran out before the search finished.
  bool proven_optimal = true;
  /// True when it was `time_up`.
  bool stopped_by_deadline = false;
  /// No plan of the problem (fitting its memory) is faster than this: the step found when proven
  /// optimal (to within rounding), else the smaller of that step (or `cutoff_ms`) and the
  /// root's lower bound. Infinity when proven that nothing fits.
  double lower_bound_ms = 0;
};

/// The partition (and per-stage remat, as `problem.remat` allows) whose largest per-rank memory
/// peak is smallest, ignoring the memory limit and the step time: what the tightest budget
/// must hold. `peak_bytes` gets that peak. One stage per rank only (not interleaved). Exact: a
/// dynamic program over (rank, first layer) with the simulator's own peaks.
/// With `at_most_bytes`, only whether some partition needs no more than that: the same answer
/// where the least is at most it, else `peak_bytes` infinity and a plan with no stages. The
/// program then drops every stage that passes it before reading its memory (what a check against a
/// device's memory needs: on a thousand layers that do not fit, a small part of the whole program).
struct LeastMemoryResult {
  Plan plan;
  double peak_bytes = 0;
};
Expected<LeastMemoryResult> LeastMemoryPartition(const PartitionProblem& problem,
                                                 double at_most_bytes = std::numeric_limits<double>::infinity());

/// A lower bound on the step time of every plan of `problem` (infinity when none can fit even
/// in the relaxation), cheap next to the search itself.
double PartitionLowerBound(const PartitionProblem& problem);

/// The plan of `problem` with no stages yet (schedule, M, batch, replicas, ...).
Plan PlanSkeleton(const PartitionProblem& problem);

/// Errors name what cannot work: more stages than layers, M the schedule cannot take, a batch
/// that does not split, more devices than the cluster has, a schedule the profile cannot cost.
Expected<PartitionResult> FindBestPartition(const PartitionProblem& problem);

}  // namespace gpipe
