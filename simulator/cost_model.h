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
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/cluster.h"
#include "core/plan.h"
#include "core/schedule/action.h"
#include "core/status.h"

namespace gpipe {

struct StageCost {
  /// The forward action F. A stage that recomputes runs the layers it recomputes under no_grad
  /// here (keeping nothing, recording no graph): their no-grad forward (LayerProfile::
  /// forward_no_grad_ms), the rest as recorded.
  double forward_ms = 0;
  /// Full backward (input and weight gradients).
  double backward_ms = 0;
  /// The split backward of zero-bubble schedules: input gradient and weight gradient.
  double backward_input_ms = 0;
  double backward_weight_ms = 0;
  /// The stage recomputes a forward in its backward: all its layers', or with `partial_remat`
  /// only its first layers'.
  bool remat = false;
  /// Only the stage's first layers recompute (StagePlan::remat_layers).
  bool partial_remat = false;
  /// What the recomputed layers cost: their forward as the backward recomputes it, with autograd
  /// recording (set whenever `remat`), and under partial remat the activations they keep without
  /// remat and the tensor leaving the last of them (the input of the layers that keep their
  /// activations, held with those).
  double remat_forward_ms = 0;
  double remat_activation_bytes = 0;
  double remat_boundary_bytes = 0;
  /// Kept with a remat stage's stash per micro-batch: the generator state its recompute replays
  /// (Profile::rng_state_bytes; 0 without remat).
  double rng_state_bytes = 0;
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
  /// A full backward's: each layer's with the activations of the layers after it already freed.
  double forward_workspace_bytes = 0;
  double backward_workspace_bytes = 0;
  /// The split backward's, I's and W's apart: the most each rises above what it starts with,
  /// where what I captures for W (weight_pass_bytes) is held from I's start. The graph is kept
  /// from I until W; W frees parts of it as it runs.
  double backward_input_workspace_bytes = 0;
  double backward_weight_workspace_bytes = 0;
  /// Held from a micro-batch's input-gradient pass I until its weight-gradient pass W (split
  /// backwards only): the gradients I captured for W (the profile's weight_pass_bytes, summed).
  double weight_pass_bytes = 0;
  /// The executor keeps every tensor the stage sends until the step ends (Gloo; calibrated).
  bool sends_held = false;
  /// The output the stage sends is the stash's own tensor: one tensor, which travels as itself,
  /// kept for the backward (no remat, or partial remat). A held send then costs nothing more
  /// until the stash lets go of it at the micro-batch's B (or W).
  bool sent_output_in_stash = false;

  /// Kept from the forward until the backward: the activations and the stage's input, which the
  /// first layer's graph holds (a profile's activation_bytes counts what a layer allocates, not
  /// its input); under remat only the input and the generator state; under partial remat those,
  /// the boundary tensor and the activations of the layers after it.
  double stash_bytes() const {
    if (!remat) return activation_bytes + input_bytes;
    const double kept = input_bytes + rng_state_bytes;
    return partial_remat ? kept + remat_boundary_bytes + (activation_bytes - remat_activation_bytes) : kept;
  }
  /// The forward pass recomputed before a backward (0 without remat).
  double recompute_ms() const { return remat ? remat_forward_ms : 0.0; }
  /// The activations that recompute brings back for one micro-batch's backward (0 without remat).
  double recomputed_bytes() const { return !remat ? 0.0 : partial_remat ? remat_activation_bytes : activation_bytes; }
};

/// Whether action `op` of a stage costing `c` recomputes the stage's forward first: a full or
/// input-gradient backward of a remat stage (the weight gradient reuses what that recomputed).
inline bool Recomputes(const StageCost& c, Op op) {
  return c.remat && (op == Op::kBackward || op == Op::kBackwardInput);
}

/// The recomputed forward at the head of action `op` (0 when it recomputes nothing).
inline double RecomputeMs(const StageCost& c, Op op) { return Recomputes(c, op) ? c.recompute_ms() : 0.0; }

/// How long compute action `op` occupies its rank on a stage costing `c`, its recomputed forward
/// included; 0 for sends and receives (what they cost is the link's and send_overhead_ms). The
/// one definition the simulator, the step evaluator and the calibration fit share: whatever
/// calibration `c` was built with is already in its times. Inline: the planner's step
/// evaluations call it for every action.
inline double ComputeMs(const StageCost& c, Op op) {
  switch (op) {
    case Op::kForward: return c.forward_ms;
    case Op::kBackward: return c.recompute_ms() + c.backward_ms;
    case Op::kBackwardInput: return c.recompute_ms() + c.backward_input_ms;
    case Op::kBackwardWeight: return c.backward_weight_ms;
    case Op::kSendActivation:
    case Op::kRecvActivation:
    case Op::kSendGradient:
    case Op::kRecvGradient: return 0.0;
  }
  return 0.0;
}

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
  /// 0: sends cost send_overhead_ms whatever their size.
  double send_issue_bytes_per_s = 0;
  std::vector<double> tail_ms;
  /// Per rank, model state that several of its stages count in their static_bytes but the rank
  /// holds once: a tied parameter (core/profile.h) in two stages of one rank (interleaved). The
  /// rank's model state is its stages' static bytes less this. Empty: none on any rank.
  std::vector<double> shared_static_bytes;
  /// Core sharing (CoreSharingOf): entry a is the rate at which each computing rank progresses
  /// while a ranks of the simulated replica compute (its stage times are at the rate 1). Empty: no
  /// sharing, every compute takes its stage time.
  std::vector<double> active_rate;
  /// Core sharing: while at least `saturated_computing` ranks of the replica compute (0: never),
  /// the node's cores are all busy, and a message that reaches a rank waiting for it reaches it
  /// `saturated_wakeup_ms` later: the scheduler runs the woken rank only when it takes a core from
  /// one of the others (the cluster's saturated_wakeup, measured by profile-links; 0 without it).
  int saturated_computing = 0;
  double saturated_wakeup_ms = 0;
  /// Samples per micro-batch and in the whole step (for throughput).
  int64_t microbatch_size = 1;
  int64_t global_batch = 1;
  /// Plan micro-batch size / profile micro-batch size.
  double scale = 1.0;
  /// How the profile's numbers were brought to this micro-batch size, when they were not measured
  /// at it (scaled, interpolated or extrapolated); "" when they were.
  std::string profile_note;
  /// Where the terms beyond layer times and links come from: the cluster's calibration, the
  /// profile's measured step costs, or neither (then the prediction leaves them out; says so).
  std::string calibration_note;

  int num_ranks() const { return static_cast<int>(links.size()); }
  /// How long issuing a send of `bytes` occupies its rank.
  double SendIssueMs(double bytes) const {
    return send_overhead_ms + (send_issue_bytes_per_s > 0 ? bytes / send_issue_bytes_per_s * 1e3 : 0.0);
  }
  /// The bytes that send action `op` of a stage costing `c` moves.
  static double SentBytes(const StageCost& c, Op op) { return op == Op::kSendGradient ? c.input_bytes : c.output_bytes; }
  /// What rank r does after its last action: all-reduce, then its tail.
  double AfterLastActionMs(int r) const {
    return (allreduce_ms.empty() ? 0.0 : allreduce_ms[r]) + (tail_ms.empty() ? 0.0 : tail_ms[r]);
  }
  /// shared_static_bytes[r], or 0 when empty.
  double SharedStaticBytes(int r) const { return shared_static_bytes.empty() ? 0.0 : shared_static_bytes[r]; }
};

/// The parameter bytes of each rank's stages (what it all-reduces and updates), each tied
/// parameter counted once per rank that holds it (ParamBytesOfLayers), per device: from `profile`,
/// the plan's profile at its t (ProfileAtTensorParallel), or the plan's own.
std::vector<double> ParamBytesPerRank(const Plan& plan, const Profile& profile);
std::vector<double> ParamBytesPerRank(const Plan& plan);

/// How many of a plan's `devices` (K x D) share the busiest node of `cluster`.
int RanksPerNode(const Cluster& cluster, int devices);
/// The same in ranks of t devices each: how many of the `ranks` x `replicas` ranks (each on
/// `tensor_parallel` devices of a node) share the busiest node. What core sharing and the
/// calibration's compute scale are priced by.
int RanksPerNode(const Cluster& cluster, int ranks, int replicas, int tensor_parallel);

/// Ranks that share a node's cores. When a plan puts more ranks on a node than it computes at
/// full speed at once, how much they slow each other depends on how many compute at the same
/// moment, which the schedule and its bubble decide: a K=2 D=2 GPipe plan with one micro-batch
/// keeps two of four ranks computing, 1F1B with sixteen all four. One factor per count prices
/// both alike (on the 2-core machine: +68% and -16% for the two). So where the profile measured
/// its node (step_costs.concurrent_ranks = C) and the prediction uses those measurements (the
/// cluster has no calibration fitted from runs), compute is priced per moment: stage times carry
/// one rank's factor, and while x ranks of the node compute each progresses at (f(n) being
///   compute_scale[n - 1]) min(1, f(1) / f(min(ceil x, C)) x min(1, C / x))
/// (the co-located factor of that many, and past C the cores shared evenly). Replicas run in step,
/// so x = a x (ranks on the node) / K when a of the simulated replica's K ranks compute. The rate
/// never exceeds 1, so bounds priced at one rank's factor stay lower bounds.
struct CoreSharing {
  /// The ranks-per-node count whose factor and overheads the stage times carry: 1 with sharing.
  int static_ranks = 1;
  /// CostModel::active_rate (empty: no sharing).
  std::vector<double> active_rate;
  /// The least count a of the replica's computing ranks at which the node's cores are all busy
  /// (x >= C) while another of its ranks waits (a < K); 0: never, as with two ranks on two cores
  /// (CostModel::saturated_computing).
  int saturated_at = 0;
};
CoreSharing CoreSharingOf(const Profile& profile, const Cluster& cluster, const Calibration* calibration,
                          int ranks_per_node, int pipeline_ranks);

/// The calibration a prediction uses: the cluster's (fitted from runs by `calibrate`) when it has
/// one, else what the profile's measured step costs stand for (core/step_costs.h) with the
/// cluster's measured send overhead, else none.
/// The simulator and the planner both take it from here.
std::optional<Calibration> EffectiveCalibration(const Profile& profile, const Cluster& cluster, Optimizer optimizer);

/// REQUIRES: ValidatePlan(plan) is ok. Fails when the schedule needs what the profile lacks
/// (zero-bubble schedules need every layer's backward_weight_ms: CheckWeightTimes).
/// With t > 1 the stages are priced per device of a group (ProfileAtTensorParallel), the links and
/// all-reduces between groups are those of the groups' first devices (each of the t devices sends
/// and all-reduces its share over its own link at once), and with a sharded optimizer the
/// reduce-scatter and all-gather cost what the all-reduce they replace costs (each moves half its
/// bytes), the optimizer's tail its shard's.
Expected<CostModel> BuildCostModel(const Plan& plan);

/// Every layer of `stage` has backward_weight_ms, which a split backward (I, W) needs; else
/// "profile layers[l] ("name") has no backward_weight_ms; " + `why`.
Status CheckWeightTimes(const Profile& profile, const StagePlan& stage, const std::string& why);

/// The gradient all-reduce over `devices`. Where the cluster holds all-reduces measured for a
/// group of this size (profile-links), the time is read from them: linear between measured sizes,
/// the smallest's below it, the last two's slope above the largest. Otherwise a ring: 2(D-1)
/// steps, each moving bytes/D over the ring's slowest link and paying its largest latency. The
/// ring's links are read once; the time for any byte count follows (the planner asks for many).
struct Ring {
  double devices = 1;
  double bandwidth_bytes_per_s = 0;
  double latency_ms = 0;
  /// (bytes, ms) measured for this many devices, by increasing bytes; empty: the ring model.
  std::vector<std::pair<double, double>> measured;

  double AllReduceMs(double bytes) const {
    if (devices < 2) return 0.0;
    if (!measured.empty()) return MeasuredMs(bytes);
    return 2.0 * (devices - 1) * (latency_ms + bytes / devices / bandwidth_bytes_per_s * 1e3);
  }

 private:
  double MeasuredMs(double bytes) const;
};
Ring RingOf(const Cluster& cluster, const std::vector<int>& devices);
/// RingOf(cluster, devices).AllReduceMs(bytes).
double RingAllReduceMs(const Cluster& cluster, const std::vector<int>& devices, double bytes);

/// Equal stages over free links: every stage costs forward_ms and backward_ms, with
/// backward_weight_ms of the backward being the weight gradient; nothing else costs anything.
CostModel UniformCostModel(int ranks, int stages, double forward_ms, double backward_ms,
                           double backward_weight_ms = 0.0);

}  // namespace gpipe
