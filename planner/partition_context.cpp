#include "planner/partition_context.h"

#include <algorithm>
#include <cmath>

#include "core/schedule/generators.h"
#include "core/schedule/placement.h"
#include "planner/bisection.h"
#include "planner/path_bound.h"

namespace gpipe::partition_internal {

PartitionContext::PartitionContext(const PartitionProblem& problem)
    : p_(problem),
      calibration_(EffectiveCalibration(*problem.profile, *problem.cluster, problem.optimizer)),
      table_(*problem.profile, ProfileScale(problem),
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

std::vector<int> PartitionContext::EvenCut() const {
  // Greedy under a cap (each stage as long as the cap allows): it passes from the least cap on.
  const auto split = [&](double cap, std::vector<int>* ends) {
    int a = 0;
    for (int t = 0; t < stages_; ++t) {
      const int last_end = layers_ - (stages_ - 1 - t);
      int e = a + 1;
      while (e < last_end && StageWorkMs(a, e + 1) <= cap) ++e;
      if (t == stages_ - 1) e = layers_;
      if (StageWorkMs(a, e) > cap) return false;
      if (ends != nullptr) (*ends)[t] = e;
      a = e;
    }
    return true;
  };
  if (layers_ < stages_) return {};
  const std::optional<Bracket> b = Threshold(total_forward_ + total_backward_, [&](double cap) { return split(cap, nullptr); });
  std::vector<int> ends(stages_);
  if (!b || !split(b->hi, &ends)) return {};
  return ends;
}

double PartitionContext::PathBound(LayerPrices* prices) const {
  std::optional<Schedule> generated;
  if (evaluator_ == nullptr) {
    Expected<Schedule> schedule = GenerateSchedule(p_.schedule, p_.ranks, stages_, p_.microbatches);
    if (!schedule.ok()) return 0.0;
    generated = std::move(*schedule);
  }
  PathBoundInput input;
  input.schedule = evaluator_ != nullptr ? &evaluator_->schedule() : &*generated;
  input.table = &table_;
  // The message across each boundary: the output of the stage's last layer, each way over the
  // link between the two ranks (the turn of a V stays on its rank: none).
  for (int s = 0; s + 1 < stages_; ++s) input.hops.crosses.push_back(stage_rank_[s] != stage_rank_[s + 1]);
  input.hops.forward = forward_link_;
  input.hops.backward = backward_link_;
  for (int l = 0; l < layers_; ++l) input.hops.bytes.push_back(table_.OutputBytes(l));
  input.hops.Tabulate();
  if (p_.replicas > 1) {
    for (int r = 0; r < p_.ranks; ++r) {
      // The ring model is affine in the bytes; a measured curve need not be: nothing then.
      // (Tied parameters: per-layer sums count them twice, so no per-byte term.)
      const Ring& ring = rings_[r];
      AllReduceLine line;
      if (ring.measured.empty()) {
        line.fixed_ms = ring.AllReduceMs(0.0);
        if (!table_.has_tied_parameters()) line.ms_per_byte = ring.AllReduceMs(1e9) / 1e9 - line.fixed_ms / 1e9;
      }
      input.allreduce.push_back(line);
    }
  }
  if (!table_.has_tied_parameters()) {
    for (int l = 0; l < layers_; ++l) {
      input.static_bytes.push_back(table_.StaticBytes(l, l + 1));
      input.activation_bytes.push_back(table_.ActivationBytes(l, l + 1));
    }
    input.memory_limit_bytes = Limit();
    input.may_recompute = p_.remat != RematPolicy::kOff;
  }
  if (std::isfinite(p_.cutoff_ms)) input.enough = p_.cutoff_ms;
  if (p_.quick_bound) input.game_iterations = 0;
  input.prices = prices;
  input.time_up = p_.time_up;
  return PathLowerBound(input);
}

}  // namespace gpipe::partition_internal
