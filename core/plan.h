// The plan format, gpipe-plan/1: a model's profile, a cluster, a schedule and a cut of the layers
// into contiguous stages, each on a rank and with or without rematerialization. The planner writes
// plans; `simulate` and `run` read them. K is the number of ranks of one pipeline, S the number of
// stages (S = K; S = v*K for the interleaved schedules with v chunks per rank; S = 2K for the
// V-shaped ones), M micro-batches, D data-parallel replicas of the whole pipeline.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cluster.h"
#include "core/profile.h"
#include "core/status.h"

namespace gpipe {

inline constexpr const char* kPlanFormat = "gpipe-plan/1";

enum class ScheduleKind { kGpipe, k1F1B, kInterleaved1F1B, kZbH1, kInterleavedZb, kZbV, kDualPipeV };

/// "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "interleaved-zb", "zb-v", "dualpipe-v".
const char* ScheduleName(ScheduleKind kind);
/// The kind named `name`; the error lists the known names and suggests the nearest.
Expected<ScheduleKind> ParseScheduleKind(const std::string& name);
const std::vector<ScheduleKind>& AllScheduleKinds();

/// What the optimizer keeps per byte of parameters: weights, gradients and its state.
enum class Optimizer { kSgd, kMomentum, kAdam, kAdamMixed };
const char* OptimizerName(Optimizer optimizer);
Expected<Optimizer> ParseOptimizer(const std::string& name);
/// Bytes a rank holds per byte of parameters (a profile counts them in its dtype: 4 bytes each in
/// fp32, 2 in bf16 and fp16), as the executor holds them in any precision: the weights in fp32 (the
/// master copy), their fp32 gradients, the optimizer's fp32 state (sgd none, momentum one buffer,
/// adam and adam-mixed two moments) and, in a 16-bit plan, the 16-bit copy of the weights that
/// autocast makes at a step's first forward and keeps until its end. fp32: sgd 2, momentum 3,
/// adam 4. bf16 and fp16: sgd 5, momentum 7, adam and adam-mixed 9 (18 bytes per parameter:
/// Megatron-LM's count with fp32 gradient accumulation; ZeRO's 16 and 2 for the 16-bit copy).
/// With the optimizer sharded over `optimizer_shards` replicas (ZeRO-1, Megatron-LM's distributed
/// optimizer; sharded_optimizer in a plan), each holds 1/`optimizer_shards` of the optimizer's state;
/// the weights, their gradients and the 16-bit copy stay whole, as the executor holds them (the
/// fp32 weights are what the layers compute from). Adam fp32 over 8 replicas: 2 + 8/8/4 = 2.25.
double StaticBytesPerParamByte(Optimizer optimizer, const std::string& dtype, int optimizer_shards = 1);
/// adam for fp32 profiles, adam-mixed for 16-bit ones.
Optimizer DefaultOptimizer(const Profile& profile);
/// Ok when `precision` is the profile's `dtype` (a plan is priced by a profile measured as it runs);
/// else one line: an unknown precision with the known ones, or `profile_name` (a path, or "the
/// plan's profile") measured in another dtype and the command that profiles in `precision`.
Status CheckPrecision(const std::string& precision, const std::string& dtype, const std::string& profile_name);

/// Where replica d's rank r runs, for D > 1: pipeline-major puts each pipeline on consecutive
/// devices (device d*K + r: stage boundaries stay inside a node, all-reduces cross nodes);
/// replica-major puts the replicas of a rank side by side (device r*D + d: all-reduces stay inside
/// a node, stage boundaries cross nodes).
enum class Placement { kPipelineMajor, kReplicaMajor };
const char* PlacementName(Placement placement);
/// The device of replica `replica`'s rank `rank`, for K = `ranks` and D = `replicas`; with t-way
/// tensor parallelism (`tensor_parallel` > 1) the first of the t consecutive devices, inside one
/// node, that run it together (the placements order the groups as they order devices without t).
inline int DeviceOf(Placement placement, int ranks, int replicas, int replica, int rank, int tensor_parallel = 1) {
  return tensor_parallel * (placement == Placement::kPipelineMajor ? replica * ranks + rank : rank * replicas + replica);
}
Expected<Placement> ParsePlacement(const std::string& name);

struct StagePlan {
  /// The stage holds layers [first_layer, end_layer).
  int first_layer = 0;
  int end_layer = 0;
  int rank = 0;
  /// The stage rematerializes: it keeps only what its recomputed layers need and recomputes
  /// their forward at the start of each backward.
  bool remat = false;
  /// With remat, only the stage's first `remat_layers` layers recompute (Megatron's
  /// recompute_num_layers); the layers after them keep their activations. 0: all of them.
  int remat_layers = 0;

  int num_layers() const { return end_layer - first_layer; }
  /// How many of the stage's first layers recompute their forward in the backward: 0 without
  /// remat, all of them with remat and no `remat_layers`.
  int recomputed_layers() const { return !remat ? 0 : remat_layers > 0 ? remat_layers : num_layers(); }

  /// Layers [first, end) on `rank`, the first `recomputed` of them recomputing (0: no remat; all:
  /// plain remat).
  static StagePlan Of(int first, int end, int rank, int recomputed) {
    return {first, end, rank, recomputed > 0, recomputed > 0 && recomputed < end - first ? recomputed : 0};
  }
};

struct Plan {
  Profile profile;
  Cluster cluster;
  /// Where profile and cluster came from when the plan names files ("" when embedded).
  std::string profile_path;
  std::string cluster_path;
  ScheduleKind schedule = ScheduleKind::kGpipe;
  int microbatches = 1;
  int64_t global_batch = 1;
  int replicas = 1;
  Placement placement = Placement::kPipelineMajor;
  Optimizer optimizer = Optimizer::kAdam;
  /// t: each rank of each replica runs on t devices of one node, its layers split Megatron-style
  /// (the profile's tensor_parallel_measurements price them). Devices = t x K x D.
  int tensor_parallel = 1;
  /// ZeRO-1: the optimizer's state sharded over the D replicas, gradients reduce-scattered and
  /// weights all-gathered in place of the all-reduce. REQUIRES D > 1.
  bool sharded_optimizer = false;
  std::vector<StagePlan> stages;
  /// Fields this build does not interpret (e.g. a planner's "prediction"), kept on rewrite.
  nlohmann::json extra = nlohmann::json::object();

  int num_stages() const { return static_cast<int>(stages.size()); }
  /// What the layers compute in: the profile's dtype ("fp32", "bf16" or "fp16"; a plan is priced
  /// by a profile measured as it runs). In bf16 and fp16 the executor runs the layers under
  /// autocast and keeps weights, gradients and optimizer state in fp32 (docs/executor.md).
  const std::string& precision() const { return profile.dtype; }
  /// K: ranks of one pipeline.
  int num_ranks() const;
  /// Samples in one micro-batch: global_batch / (replicas * microbatches).
  int64_t microbatch_size() const { return global_batch / (int64_t{replicas} * microbatches); }
  /// The rank of every stage, indexed by stage.
  std::vector<int> StageRanks() const;
  /// The cluster device that runs rank `rank` of replica `replica`.
  int DeviceOf(int replica, int rank) const {
    return gpipe::DeviceOf(placement, num_ranks(), replicas, replica, rank, tensor_parallel);
  }
  /// Replicas over which the optimizer's state is sharded (1: not sharded).
  int optimizer_shards() const { return sharded_optimizer ? replicas : 1; }
};

/// The shape checks every pipeline passes, wherever it comes from (a plan file, a search's pins, a
/// configuration, a job): K ranks and D replicas on at most the cluster's devices, and the global
/// batch B in D x M micro-batches of whole samples. Errors name these quantities, never a
/// command-line flag (the CLI adds the flags that set them). Status::Invalid when they fail.
///
/// t x K x D at most `devices`, e.g. "K x D = 3 ranks x 2 replicas = 6 devices is more than the
/// cluster's 4" ("t x K x D = 8 x 3 x 2 = 48 devices ..." with tensor parallelism).
Status CheckDevicesFit(int ranks, int replicas, int devices, int tensor_parallel = 1);
/// t-way tensor parallelism fits `cluster` and `profile`: t is 1, or the profile prices it (its
/// tensor_parallel_measurements, or a profile already at t) and t divides the devices of a node
/// (of the cluster when it is one node), so that each group lies inside a node.
Status CheckTensorParallel(int tensor_parallel, const Profile& profile, const Cluster& cluster);
/// B splits into D x M micro-batches of whole samples, e.g. "the global batch 100 does not split
/// into D x M = 3 x 4 micro-batches of whole samples; use a multiple of 12".
Status CheckBatchSplit(int64_t global_batch, int replicas, int microbatches);
/// B, K, D and M at least 1, then CheckDevicesFit (unless `devices` is 0: not known), then
/// CheckBatchSplit.
Status CheckPipelineShape(int64_t global_batch, int ranks, int replicas, int microbatches, int devices,
                          int tensor_parallel = 1);

/// Ok when the executor can run `plan`: it runs each rank on one device, so a plan with t > 1
/// (tensor parallelism) only plans and simulates; else one line naming `where`, t and what to do.
Status CheckExecutorRuns(const Plan& plan, const std::string& where);

/// Validates a parsed plan. Paths to a profile or cluster are resolved against `base_dir`.
Expected<Plan> PlanFromJson(const nlohmann::json& json, const std::string& where,
                            const std::string& base_dir);
Expected<Plan> LoadPlan(const std::string& path);
/// Checks the plan's internal consistency (stages cover the layers, ranks, batch sizes, the
/// schedule's stage layout); `where` prefixes errors. PlanFromJson calls it.
Status ValidatePlan(const Plan& plan, const std::string& where);
/// The plan with profile and cluster embedded, so that the file stands alone.
nlohmann::json PlanToJson(const Plan& plan);

}  // namespace gpipe
