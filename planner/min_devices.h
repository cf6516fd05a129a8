// The least memory a plan needs, and the fewest devices on which one fits. Both answer "what would
// it take?" when nothing fits a budget, with the planner's own exact least-memory partition
// (LeastMemoryPartition: a dynamic program checked against brute force) and its full search, not
// a rule of thumb.
//
// The least memory on N devices is taken over the plans with one stage per rank that need the
// least (interleaved plans, whose remat is finer, can need somewhat less): one stage per rank on
// as many ranks as the pins, the devices and the layers allow (more stages share the model state),
// micro-batches of one sample (the fewest activations in flight), 1F1B (at most K - r micro-batches
// stashed on rank r; GPipe stashes all M) and remat wherever the --remat policy lets it save memory.
// Pinned dimensions (--stages, --replicas, --microbatches, --schedule other than interleaved-1f1b)
// are kept.
#pragma once

#include <limits>
#include <optional>
#include <utility>

#include "core/status.h"
#include "planner/search.h"

namespace gpipe {

struct LeastMemory {
  /// The plan with the smallest largest per-rank peak among the plans described above.
  Plan plan;
  /// Its largest per-rank peak: what a device must hold for any such plan to fit.
  double peak_bytes = 0;
  /// The rank with that peak, and the peak's parts.
  int fullest_rank = 0;
  double model_state_bytes = 0;
  double activation_bytes = 0;
};

/// The least per-device memory a plan of `request` needs on `devices` devices (the request's
/// cluster, resized as `plan --devices` does). With `at_most_bytes`, only whether some plan needs
/// no more than that (LeastMemoryPartition's cap): where none does, `peak_bytes` is infinity,
/// the plan has no stages and the rank's parts are left at zero.
Expected<LeastMemory> LeastMemoryOn(const SearchRequest& request, int devices,
                                    double at_most_bytes = std::numeric_limits<double>::infinity());

struct FewestDevicesResult {
  int devices = 0;
  /// The fastest plan that fits on that many devices (SearchPlans there).
  Candidate best;
  /// Whether the full search on one device fewer finished every configuration (it found no plan
  /// either way; unproven: a configuration stopped at its node budget, or the time limit came first).
  bool proven = true;
};

/// The fewest devices, more than the request's cluster has and at most `max_devices`, on which a
/// plan of `request` fits its per-device memory; nullopt when even `max_devices` are not enough.
/// REQUIRES: nothing fits on the request's own devices. Found in two passes: a count N on which a
/// one-stage-per-device plan fits (LeastMemoryOn) and the count before it, of those tried, does
/// not: counts s, 2s, 4s, ... past the cluster's (s: the cluster's count times the share by which
/// `least_here_bytes`, LeastMemoryOn the cluster's own count when known, passes the limit; one
/// at least), then bisection between the last that did not fit and the first that did (the least memory falls as devices grow, though not strictly: a
/// count the bisection skipped may fit too); then the full search (SearchPlans, every schedule) on
/// N - 1, N - 2, ... while it finds a plan. So N fits and N - 1 does not.
/// `time_up` (null: never) is polled between counts; once true the scan stops, returns nullopt and
/// sets `*stopped` (when given); the searches stop with it too (else at `request.time_limit_s`
/// from each one's own start). `reserve_s`, when given, is the reserve of `time_up`'s deadline
/// (DeadlineOf): before each count the scan raises it to what its last program took, in proportion
/// to the devices, so that it starts no program that would end well past the deadline.
std::optional<FewestDevicesResult> FewestDevices(const SearchRequest& request, int max_devices,
                                                 const std::function<bool()>& time_up = nullptr,
                                                 bool* stopped = nullptr, double least_here_bytes = 0,
                                                 double* reserve_s = nullptr);

/// The cluster of `request` with `devices` devices: a node layout that no longer divides becomes
/// one node, and links to devices that are gone are dropped (as `plan --devices` does).
Cluster ResizedCluster(const Cluster& cluster, int devices);

}  // namespace gpipe
