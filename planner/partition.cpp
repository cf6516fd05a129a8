// The public entry points of the exact partition search (partition.h): the problem's checks, then
// the search or program that fits its shape. Each lives in its own unit:
//   contiguous_search.h   one stage per rank (gpipe, 1f1b, zb-h1): branch and bound;
//   interleaved_search.h  v stages per rank (interleaved-1f1b): branch and bound;
//   stage_dp.h            the least-memory partition: a dynamic program;
// over the shared tables of partition_context.h and the incumbent of branch_and_bound.h.
#include "core/schedule/placement.h"
#include "planner/partition.h"

#include <string>

#include "core/schedule/generators.h"
#include "core/suggest.h"
#include "planner/contiguous_search.h"
#include "planner/interleaved_search.h"
#include "planner/stage_dp.h"

namespace gpipe {
namespace {

using partition_internal::ContiguousSearch;
using partition_internal::InterleavedSearch;
using partition_internal::kInfinity;
using partition_internal::StageDp;

constexpr NameTable<RematPolicy, 4> kRematNames = {{
    {RematPolicy::kOff, "off"}, {RematPolicy::kOn, "on"}, {RematPolicy::kAuto, "auto"}, {RematPolicy::kStages, "stages"}}};

}  // namespace

const char* RematPolicyName(RematPolicy policy) { return NameOf(kRematNames, policy); }

Expected<RematPolicy> ParseRematPolicy(const std::string& name) { return ParseName(kRematNames, name, "remat policy"); }

Plan PlanSkeleton(const PartitionProblem& problem) {
  Plan plan;
  plan.profile = *problem.profile;
  plan.cluster = *problem.cluster;
  plan.schedule = problem.schedule;
  plan.microbatches = problem.microbatches;
  plan.global_batch = problem.global_batch;
  plan.replicas = problem.replicas;
  plan.placement = problem.placement;
  plan.optimizer = problem.optimizer;
  plan.tensor_parallel = problem.tensor_parallel;
  plan.sharded_optimizer = problem.sharded_optimizer;
  return plan;
}

namespace {

Status CheckProblem(const PartitionProblem& problem) {
  const int layers = problem.profile->num_layers();
  const int stages = problem.ranks * problem.chunks;
  if (problem.ranks < 1 || problem.chunks < 1) {
    return Status::Invalid("a plan needs at least one rank and one chunk per rank");
  }
  if (stages > layers) {
    return Status::Invalid(std::to_string(stages) + " stages (K=" + std::to_string(problem.ranks) +
                           (problem.chunks > 1 ? " x " + std::to_string(problem.chunks) + " chunks" : std::string()) +
                           ") is more than the profile's " + std::to_string(layers) +
                           " layers; every stage needs at least one layer, so use at most " + std::to_string(layers));
  }
  GPIPE_RETURN_IF_ERROR(CheckPipelineShape(problem.global_batch, problem.ranks, problem.replicas, problem.microbatches,
                                           problem.cluster->devices, problem.tensor_parallel));
  GPIPE_RETURN_IF_ERROR(CheckTensorParallel(problem.tensor_parallel, *problem.profile, *problem.cluster));
  GPIPE_RETURN_IF_ERROR(CheckStageCount(problem.schedule, problem.ranks, stages));
  GPIPE_RETURN_IF_ERROR(CheckMicrobatchCount(problem.schedule, problem.ranks, problem.microbatches));
  if (SplitsBackward(problem.schedule)) {
    for (int l = 0; l < layers; ++l) {
      if (!problem.profile->layers[l].backward_weight_ms) {
        return Status::Invalid(std::string(ScheduleName(problem.schedule)) + " needs backward_weight_ms for every layer; layers[" + std::to_string(l) +
                               "] (\"" + problem.profile->layers[l].name + "\") has none");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

double PartitionLowerBound(const PartitionProblem& problem) {
  if (!CheckProblem(problem).ok()) return kInfinity;
  if (problem.chunks > 1) return InterleavedSearch(problem).RootBound();
  return ContiguousSearch(problem).RootBound();
}

Expected<LeastMemoryResult> LeastMemoryPartition(const PartitionProblem& problem, double at_most_bytes) {
  GPIPE_RETURN_IF_ERROR(CheckProblem(problem));
  if (problem.chunks != 1) return Status::Invalid("the least-memory partition takes one stage per rank");
  Expected<Schedule> compute = GenerateSchedule(problem.schedule, problem.ranks, problem.ranks, problem.microbatches);
  if (!compute.ok()) return compute.status();
  return StageDp(problem).Run(at_most_bytes);
}

Expected<PartitionResult> FindBestPartition(const PartitionProblem& problem) {
  GPIPE_RETURN_IF_ERROR(CheckProblem(problem));
  Expected<Schedule> compute = GenerateSchedule(problem.schedule, problem.ranks, problem.ranks * problem.chunks,
                                                problem.microbatches);
  if (!compute.ok()) return compute.status();
  if (problem.chunks > 1) return InterleavedSearch(problem).Run();
  return ContiguousSearch(problem).Run();
}

}  // namespace gpipe
