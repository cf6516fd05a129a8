#include "planner/partition_context.h"

#include <algorithm>

#include "core/schedule/generators.h"
#include "core/schedule/placement.h"

namespace gpipe::partition_internal {

PartitionContext::PartitionContext(const PartitionProblem& problem)
    : p_(problem),
      calibration_(EffectiveCalibration(*problem.profile, *problem.cluster, problem.optimizer)),
      table_(*problem.profile, static_cast<double>(problem.global_batch) /
                                   (static_cast<double>(problem.replicas) * problem.microbatches) /
                                   static_cast<double>(problem.profile->microbatch_size),
             problem.optimizer, calibration_ ? &*calibration_ : nullptr,
             CoreSharingOf(*problem.profile, *problem.cluster, calibration_ ? &*calibration_ : nullptr,
                           RanksPerNode(*problem.cluster, problem.ranks, problem.replicas, problem.tensor_parallel),
                           problem.ranks)
                 .static_ranks,
             problem.sharded_optimizer ? problem.replicas : 1),
      skeleton_(PlanSkeleton(problem)),
      layers_(table_.num_layers()),
      stages_(problem.ranks * problem.chunks),
      stage_rank_(PlaceStages(problem.schedule, problem.ranks, stages_)),
      rank_stages_(problem.ranks),
      split_(SplitsBackward(problem.schedule)) {
  const int ranks = p_.ranks;
  for (int s = 0; s < stages_; ++s) rank_stages_[stage_rank_[s]].push_back(s);
  forwards_first_.assign(ranks, 0);
  in_flight_.assign(ranks, 0);
  if (p_.chunks == 1) {
    for (int r = 0; r < ranks; ++r) {
      forwards_first_[r] = ForwardsBeforeFirstBackward(p_.schedule, ranks, p_.microbatches, r);
      in_flight_[r] = MaxInFlight(p_.schedule, ranks, p_.microbatches, r);
    }
  }
  // Only the links between neighbouring stages' ranks: all pairs cost K^2 lookups per
  // configuration (a million at K = 1,019).
  for (int s = 0; s + 1 < stages_; ++s) {
    const int from = Device(0, stage_rank_[s]), to = Device(0, stage_rank_[s + 1]);
    forward_link_.push_back(p_.cluster->LinkBetween(from, to));
    backward_link_.push_back(p_.cluster->LinkBetween(to, from));
  }
  rings_.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    std::vector<int> devices;
    for (int d = 0; d < p_.replicas; ++d) devices.push_back(Device(d, r));
    rings_[r] = RingOf(*p_.cluster, devices);
  }
  min_output_from_.assign(layers_ + 1, kInfinity);
  for (int l = layers_ - 2; l >= 0; --l) min_output_from_[l] = std::min(min_output_from_[l + 1], table_.OutputBytes(l));
  total_forward_ = BoundForwardMs(0, layers_);
  total_backward_ = table_.BackwardMs(0, layers_);
  total_input_gradient_ = total_backward_ - table_.WeightMs(0, layers_);
}

}  // namespace gpipe::partition_internal
