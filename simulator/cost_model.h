// What each action of a plan costs: per-stage compute times and bytes for one micro-batch of the
// plan's size, and the links between ranks. Built from a plan's profile and cluster; the
// simulator reads only this, so tests can hand it exact numbers.
//
// Micro-batch size: a profile measured at several sizes answers at the plan's size (measured,
// interpolated or extrapolated: core/profile_sizes.h); one measured at one size scales times and
// activation bytes linearly with the ratio. Either way profile_note says so when the plan's size
// was not measured; parameter bytes never scale.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/plan.h"
#include "core/status.h"

namespace gpipe {

struct StageCost {
  double forward_ms = 0;
  /// Full backward (input and weight gradients).
  double backward_ms = 0;
  /// The split backward of zero-bubble schedules: input gradient and weight gradient.
  double backward_input_ms = 0;
  double backward_weight_ms = 0;
  bool remat = false;
  /// Kept for backward per micro-batch without remat (the sum over the stage's layers).
  double activation_bytes = 0;
  /// The stage's input per micro-batch: all that a remat stage keeps.
  double input_bytes = 0;
  /// The stage's output per micro-batch, sent to the next stage.
  double output_bytes = 0;
  /// Model state: parameters, gradients and optimizer state ("model state" in every report).
  double static_bytes = 0;
  /// Transient bytes while a forward / a backward runs, on top of what the memory model holds
  /// (the largest over the stage's layers; a backward's includes the gradient passed between its
  /// layers). Freed when the action ends.
  double forward_workspace_bytes = 0;
  double backward_workspace_bytes = 0;
  /// The executor keeps every tensor the stage sends until the step ends (Gloo; calibrated).
  bool sends_held = false;

  /// Kept from the forward until the backward: the activations and the stage's input, which the
  /// first layer's graph holds (a profile's activation_bytes counts what a layer allocates, not
  /// its input); under remat only the input.
  double stash_bytes() const { return remat ? input_bytes : activation_bytes + input_bytes; }
  /// The forward pass recomputed before a backward (0 without remat).
  double recompute_ms() const { return remat ? forward_ms : 0.0; }
};

struct CostModel {
  std::vector<StageCost> stages;
  /// links[from][to] between pipeline ranks.
  std::vector<std::vector<Link>> links;
  /// Ring all-reduce of each rank's gradients across the replicas, after its last action (empty
  /// without replicas).
  std::vector<double> allreduce_ms;
  /// Calibrated (core/calibration.h): what a send occupies its rank, and what each rank spends
  /// after its last action and all-reduce (empty: nothing).
  double send_overhead_ms = 0;
  std::vector<double> tail_ms;
  /// Samples per micro-batch and in the whole step (for throughput).
  int64_t microbatch_size = 1;
  int64_t global_batch = 1;
  /// Plan micro-batch size / profile micro-batch size.
  double scale = 1.0;
  /// How the profile's numbers were brought to this micro-batch size, when they were not measured
  /// at it (scaled, interpolated or extrapolated); "" when they were.
  std::string profile_note;

  int num_ranks() const { return static_cast<int>(links.size()); }
  /// What rank r does after its last action: all-reduce, then its tail.
  double AfterLastActionMs(int r) const {
    return (allreduce_ms.empty() ? 0.0 : allreduce_ms[r]) + (tail_ms.empty() ? 0.0 : tail_ms[r]);
  }
};

/// The parameter bytes of each rank's stages (what it all-reduces and updates).
std::vector<double> ParamBytesPerRank(const Plan& plan);

/// How many of a plan's `devices` (K x D) share the busiest node of `cluster`.
int RanksPerNode(const Cluster& cluster, int devices);

/// REQUIRES: ValidatePlan(plan) is ok. Fails when the schedule needs what the profile lacks
/// (zb-h1 needs every layer's backward_weight_ms).
Expected<CostModel> BuildCostModel(const Plan& plan);

/// A ring all-reduce over `devices` (in ring order): 2(D-1) steps, each moving bytes/D over the
/// ring's slowest link and paying its largest latency. The ring's links are read once; the time
/// for any byte count follows (the planner asks for many).
struct Ring {
  double devices = 1;
  double bandwidth_bytes_per_s = 0;
  double latency_ms = 0;

  double AllReduceMs(double bytes) const {
    if (devices < 2) return 0.0;
    return 2.0 * (devices - 1) * (latency_ms + bytes / devices / bandwidth_bytes_per_s * 1e3);
  }
};
Ring RingOf(const Cluster& cluster, const std::vector<int>& devices);
/// RingOf(cluster, devices).AllReduceMs(bytes).
double RingAllReduceMs(const Cluster& cluster, const std::vector<int>& devices, double bytes);

/// Equal stages over free links: every stage costs forward_ms and backward_ms, with
/// backward_weight_ms of the backward being the weight gradient; nothing else costs anything.
CostModel UniformCostModel(int ranks, int stages, double forward_ms, double backward_ms,
                           double backward_weight_ms = 0.0);

}  // namespace gpipe
