#include "planner/min_devices.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "core/profile_sizes.h"
#include "core/schedule/placement.h"
#include "simulator/simulator.h"

namespace gpipe {

Cluster ResizedCluster(const Cluster& cluster, int devices) {
  Cluster resized = cluster;
  resized.devices = devices;
  if (resized.devices_per_node && devices % *resized.devices_per_node != 0) resized.devices_per_node.reset();
  std::erase_if(resized.links, [&](const LinkOverride& o) { return o.from >= devices || o.to >= devices; });
  return resized;
}

namespace {

// LeastMemoryOn; the fullest rank's parts (one simulation) only when `with_parts`.
Expected<LeastMemory> Least(const SearchRequest& request, int devices, bool with_parts, double at_most_bytes) {
  const int replicas = request.replicas.value_or(1);
  const int ranks = request.ranks.value_or(std::min(devices / replicas, request.profile.num_layers()));
  if (ranks < 1) {
    return Status::Usage("D = " + std::to_string(replicas) + " replicas need more than " + std::to_string(devices) +
                         " devices");
  }
  const int64_t per_replica = request.global_batch / replicas;
  const int microbatches = request.microbatches.value_or(static_cast<int>(std::min<int64_t>(per_replica, 1 << 20)));
  const Cluster cluster = ResizedCluster(request.cluster, devices);
  const Profile profile = MeasuredMicrobatchSizes(request.profile).size() > 1
                              ? ProfileAtMicrobatch(request.profile, per_replica / microbatches)
                              : request.profile;
  PartitionProblem problem;
  problem.profile = &profile;
  problem.cluster = &cluster;
  problem.schedule = request.schedule && LayoutOf(*request.schedule) == StageLayout::kOnePerRank ? *request.schedule
                                                                                                : ScheduleKind::k1F1B;
  // (Unpinned, the search tries only 1F1B on one rank too: search.cpp.)
  problem.ranks = ranks;
  problem.replicas = replicas;
  problem.microbatches = microbatches;
  problem.global_batch = request.global_batch;
  problem.optimizer = request.optimizer;
  problem.remat = request.remat;
  problem.memory_limit_bytes = static_cast<double>(cluster.device_memory_bytes);
  if (request.placement) problem.placement = *request.placement;
  Expected<LeastMemoryResult> least = LeastMemoryPartition(problem, at_most_bytes);
  if (!least.ok()) return least.status();
  LeastMemory answer;
  answer.plan = least->plan;
  answer.plan.cluster = cluster;
  answer.peak_bytes = least->peak_bytes;
  if (!with_parts || std::isinf(answer.peak_bytes)) return answer;
  // The fullest rank's parts, from the simulator itself (no timeline: only the peaks).
  if (Expected<SimResult> sim = SimulatePlan(answer.plan, SimOptions{false}); sim.ok()) {
    for (size_t r = 0; r < sim->ranks.size(); ++r) {
      if (sim->ranks[r].peak_memory_bytes > sim->ranks[answer.fullest_rank].peak_memory_bytes) {
        answer.fullest_rank = static_cast<int>(r);
      }
    }
    answer.model_state_bytes = sim->ranks[answer.fullest_rank].static_bytes;
    answer.activation_bytes = sim->ranks[answer.fullest_rank].peak_activation_bytes;
  }
  return answer;
}

}  // namespace

Expected<LeastMemory> LeastMemoryOn(const SearchRequest& request, int devices, double at_most_bytes) {
  return Least(request, devices, true, at_most_bytes);
}

std::optional<FewestDevicesResult> FewestDevices(const SearchRequest& request, int max_devices,
                                                 const std::function<bool()>& time_up, bool* stopped,
                                                 double least_here_bytes, double* reserve_s) {
  const double limit = static_cast<double>(request.cluster.device_memory_bytes);
  const int replicas = request.replicas.value_or(1);
  if (stopped != nullptr) *stopped = false;
  // Before a program on `devices`: the deadline's reserve is what the last program took, in
  // proportion to the devices (its ranks), so that none starts that would end past the deadline.
  const std::function<double()> clock = ClockOf(request);
  double last_s = 0;
  int last_devices = 0;
  const auto out_of_time = [&](int devices) {
    if (reserve_s != nullptr && last_devices > 0) *reserve_s = std::max(*reserve_s, last_s * devices / last_devices);
    const bool up = time_up && time_up();
    if (up && stopped != nullptr) *stopped = true;
    return up;
  };
  const auto fits = [&](int devices) {
    const double started = clock();
    // (only whether it fits: the program drops every stage past the limit)
    Expected<LeastMemory> least = Least(request, devices, false, limit);
    last_s = clock() - started;
    last_devices = devices;
    return least.ok() && least->peak_bytes <= limit;
  };
  // Counts are whole numbers of replicas; `short_of` does not fit (the cluster's own count, or one
  // tried), `found` does (0: none yet).
  const auto round_up = [&](int devices) { return (devices + replicas - 1) / replicas * replicas; };
  int short_of = request.cluster.devices, found = 0;
  // The first step: as many more devices as the least memory on the cluster's own count is over
  // the limit, in proportion (the model state spreads over them); one at least.
  int first_step = 1;
  if (least_here_bytes > limit && limit > 0) {
    first_step = static_cast<int>(std::clamp(std::ceil(short_of * (least_here_bytes / limit - 1)), 1.0,
                                             static_cast<double>(std::max(1, max_devices - short_of))));
  }
  for (int step = first_step; found == 0; step *= 2) {
    const int devices = std::min(round_up(short_of + step), max_devices / replicas * replicas);
    if (devices <= short_of || out_of_time(devices)) return std::nullopt;
    if (fits(devices)) {
      found = devices;
    } else {
      short_of = devices;
    }
  }
  while (found - short_of > replicas) {
    const int middle = round_up(short_of + (found - short_of) / 2);
    if (out_of_time(middle)) return std::nullopt;
    if (middle >= found) break;
    (fits(middle) ? found : short_of) = middle;
  }
  const auto search_on = [&](int devices) {
    SearchRequest on = request;
    on.cluster = ResizedCluster(request.cluster, devices);
    on.progress = nullptr;
    // Each search's own limit from its start, bounded by the scan's deadline.
    on.started_at_s = std::numeric_limits<double>::quiet_NaN();
    if (time_up) on.stop = time_up;
    return SearchPlans(on);
  };
  FewestDevicesResult result;
  Expected<SearchResult> at = search_on(found);
  // Fewer devices may do with plans the least-memory program does not cover (interleaved).
  for (int fewer = found - 1; fewer > request.cluster.devices && at.ok() && at->best; --fewer) {
    if (time_up && time_up()) {  // (a search stopped by it may still offer the least-memory plan)
      result.proven = false;
      break;
    }
    Expected<SearchResult> below = search_on(fewer);
    if (!below.ok() || !below->best) {
      result.proven = below.ok() && below->proven_optimal;
      break;
    }
    found = fewer;
    at = std::move(below);
  }
  result.devices = found;
  if (at.ok() && at->best) {
    result.best = *at->best;
  } else {  // the search stopped at its budget without a plan: the least-memory plan fits
    Expected<LeastMemory> least = LeastMemoryOn(request, found);
    if (!least.ok()) return std::nullopt;
    Expected<Candidate> candidate = Evaluate(least->plan, false);
    if (!candidate.ok()) return std::nullopt;
    result.best = *candidate;
  }
  return result;
}

}  // namespace gpipe
