#include "simulator/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/profile_sizes.h"
#include "core/schedule/placement.h"
#include "core/text.h"
#include "simulator/layer_table.h"
#include "simulator/tensor_parallel.h"

namespace gpipe {
namespace {

std::string FormatScale(double scale) { return Format("%.3g", scale); }

}  // namespace

Status CheckWeightTimes(const Profile& profile, const StagePlan& stage, const std::string& why) {
  for (int l = stage.first_layer; l < stage.end_layer; ++l) {
    if (!profile.layers[l].backward_weight_ms) {
      return Status::Invalid("profile layers[" + std::to_string(l) + "] (\"" + profile.layers[l].name +
                             "\") has no backward_weight_ms; " + why);
    }
  }
  return Status::Ok();
}

Expected<CostModel> BuildCostModel(const Plan& plan) {
  // A plan with t > 1 whose profile is the at_plan_t model's is priced at t (the planner's plans
  // embed the profile at their t already, which this leaves as it is).
  Profile at_t;
  if (plan.tensor_parallel != plan.profile.tensor_parallel) {
    Expected<Profile> derived = ProfileAtTensorParallel(plan.profile, plan.tensor_parallel, plan.cluster);
    if (!derived.ok()) return derived.status();
    at_t = std::move(*derived);
  }
  const Profile& at_plan_t = plan.tensor_parallel != plan.profile.tensor_parallel ? at_t : plan.profile;
  CostModel model;
  model.microbatch_size = plan.microbatch_size();
  model.global_batch = plan.global_batch;
  // A profile measured at several sizes answers at this size; one measured at one size scales.
  const bool several_sizes = MeasuredMicrobatchSizes(at_plan_t).size() > 1;
  // Co-located ranks probed at several sizes answer at this size too, whatever the layers do.
  const bool costs_by_size = at_plan_t.step_costs && !at_plan_t.step_costs->by_microbatch_size.empty();
  Profile sized = several_sizes ? ProfileAtMicrobatch(at_plan_t, model.microbatch_size, &model.profile_note)
                                : costs_by_size ? at_plan_t : Profile();
  if (!several_sizes && costs_by_size) sized.step_costs = sized.step_costs->AtMicrobatch(model.microbatch_size);
  const Profile& profile = several_sizes || costs_by_size ? sized : at_plan_t;
  model.scale = static_cast<double>(model.microbatch_size) / static_cast<double>(profile.microbatch_size);
  if (!several_sizes && model.scale != 1.0) {
    model.profile_note = "the profile measured micro-batches of " + std::to_string(profile.microbatch_size) +
                         "; times and activations are scaled linearly by " + FormatScale(model.scale);
  }
  if (const auto note = at_plan_t.extra.find("tensor_parallel_note"); note != at_plan_t.extra.end() && note->is_string()) {
    model.profile_note += (model.profile_note.empty() ? "" : "; ") + note->get<std::string>();
  }
  const bool split = SplitsBackward(plan.schedule);
  const std::optional<Calibration> effective = EffectiveCalibration(profile, plan.cluster, plan.optimizer);
  const Calibration* calibration = effective ? &*effective : nullptr;
  if (plan.cluster.calibration) {
    model.calibration_note = "calibrated from runs (the cluster's calibration)";
  } else if (profile.step_costs) {
    model.calibration_note = "optimizer, per-step overhead and co-located ranks as the profiler measured them";
    std::string at_size;
    at_plan_t.step_costs->AtMicrobatch(model.microbatch_size, &at_size);
    if (!at_size.empty()) model.calibration_note += " (" + at_size + ")";
  } else {
    model.calibration_note = "the profile has no step_costs and the cluster no calibration: the prediction "
                             "leaves out the optimizer step, the per-step overhead and the slowdown of ranks "
                             "sharing a node (re-profile with gpipe-plan profile, or calibrate from a run)";
  }
  const int t = plan.tensor_parallel;
  // Groups of t devices per node (CPU core sharing is priced per rank; t > 1 needs a GPU profile).
  const int per_node = RanksPerNode(plan.cluster, plan.num_ranks(), plan.replicas, t);
  CoreSharing sharing = CoreSharingOf(profile, plan.cluster, calibration, per_node, plan.num_ranks());
  if (!sharing.active_rate.empty()) {
    model.calibration_note += "; " + std::to_string(per_node) + " ranks share a node that computes " +
                              std::to_string(profile.step_costs->concurrent_ranks) +
                              " at once: compute is priced by how many run at each moment" +
                              (per_node > profile.step_costs->concurrent_ranks
                                   ? std::string(", the cores shared evenly past that, which runs have measured "
                                                 "slower (docs/planner.md)")
                                   : std::string());
    if (sharing.saturated_at > 0 && plan.cluster.saturated_wakeup) {
      model.saturated_computing = sharing.saturated_at;
      model.saturated_wakeup_ms = plan.cluster.saturated_wakeup->mean_ms;
      model.calibration_note += "; a message reaching a waiting rank while the cores are all computing costs it " +
                                Format("%.2f", model.saturated_wakeup_ms) + " ms (the cluster's saturated_wakeup)";
    } else if (sharing.saturated_at > 0) {
      model.calibration_note += "; the cluster has no saturated_wakeup (profile-links measures it): the time a rank "
                                "woken by a message waits for a busy core is left out";
    }
  } else if (calibration != nullptr && !calibration->compute_scale.empty() &&
      static_cast<size_t>(per_node) > calibration->compute_scale.size()) {
    model.calibration_note += "; the plan puts " + std::to_string(per_node) + " ranks on a node, more than the " +
                              std::to_string(calibration->compute_scale.size()) +
                              " measured: compute is slowed as for " +
                              std::to_string(calibration->compute_scale.size()) +
                              " (under-predicted; re-profile with gpipe-plan profile --ranks-per-node " + std::to_string(per_node) + ")";
  }
  const LayerTable table(profile, model.scale, plan.optimizer, calibration, sharing.static_ranks,
                         plan.optimizer_shards());
  model.active_rate = std::move(sharing.active_rate);
  for (const StagePlan& stage : plan.stages) {
    if (split) {
      GPIPE_RETURN_IF_ERROR(CheckWeightTimes(profile, stage,
                                             "the " + std::string(ScheduleName(plan.schedule)) +
                                                 " schedule splits backwards into input and weight gradients and "
                                                 "needs that time (the profiler measures it; or choose the 1f1b "
                                                 "schedule)"));
    }
    model.stages.push_back(table.Stage(stage));
  }
  // Plan::DeviceOf recounts the ranks on every call; count them once here.
  const int ranks = plan.num_ranks();
  const auto device = [&](int replica, int rank) {
    return DeviceOf(plan.placement, ranks, plan.replicas, replica, rank, t);
  };
  model.links.assign(ranks, std::vector<Link>(ranks));
  for (int from = 0; from < ranks; ++from) {
    for (int to = 0; to < ranks; ++to) model.links[from][to] = plan.cluster.LinkBetween(device(0, from), device(0, to));
  }
  if (table.has_tied_parameters()) {
    // A tied parameter in several stages of one rank is held there once.
    std::vector<LayerRanges> rank_layers(ranks);
    for (const StagePlan& stage : plan.stages) rank_layers[stage.rank].emplace_back(stage.first_layer, stage.end_layer);
    std::vector<double> shared(ranks, 0.0);
    bool any = false;
    for (int r = 0; r < ranks; ++r) {
      shared[r] = table.SharedStaticBytes(rank_layers[r]);
      any = any || shared[r] != 0.0;
    }
    if (any) model.shared_static_bytes = std::move(shared);
  }
  const std::vector<double> param_bytes = ParamBytesPerRank(plan, at_plan_t);
  if (calibration != nullptr) {
    model.send_overhead_ms = calibration->send_overhead_ms;
    model.send_issue_bytes_per_s = calibration->send_issue_bytes_per_s;
    if (!plan.cluster.calibration && profile.step_costs && !profile.step_costs->send_ms.empty()) {
      // What a send cost with this many ranks on the node, as the profiler's pipelines measured it.
      const std::vector<Measured>& sends = profile.step_costs->send_ms;
      const double measured = sends[std::min(sends.size(), static_cast<size_t>(per_node)) - 1].median;
      if (measured > 0) model.send_overhead_ms = measured;
    }
    model.tail_ms.assign(ranks, 0.0);
    // With a sharded optimizer each replica updates its shard.
    for (int r = 0; r < ranks; ++r) model.tail_ms[r] = calibration->TailMs(param_bytes[r] / plan.optimizer_shards());
  }
  if (plan.replicas > 1) {
    model.allreduce_ms.assign(ranks, 0.0);
    for (int r = 0; r < ranks; ++r) {
      std::vector<int> devices;
      for (int d = 0; d < plan.replicas; ++d) devices.push_back(device(d, r));
      model.allreduce_ms[r] = RingAllReduceMs(plan.cluster, devices, param_bytes[r]);
    }
  }
  return model;
}

CoreSharing CoreSharingOf(const Profile& profile, const Cluster& cluster, const Calibration* calibration,
                          int ranks_per_node, int pipeline_ranks) {
  CoreSharing sharing;
  sharing.static_ranks = ranks_per_node;
  const int capacity = profile.step_costs ? profile.step_costs->concurrent_ranks : 0;
  // A calibration fitted from runs prices each count as it ran; it is used as it is.
  if (capacity < 1 || cluster.calibration || calibration == nullptr || calibration->compute_scale.empty() ||
      ranks_per_node < 2 || pipeline_ranks < 1) {
    return sharing;
  }
  sharing.static_ranks = 1;
  const double one = calibration->ComputeScale(1);
  sharing.active_rate.assign(static_cast<size_t>(pipeline_ranks) + 1, 1.0);
  for (int a = 1; a <= pipeline_ranks; ++a) {
    const double x = static_cast<double>(a) * ranks_per_node / pipeline_ranks;
    const int count = std::clamp(static_cast<int>(std::ceil(x - 1e-9)), 1, capacity);
    const double cores = std::min(1.0, capacity / x);
    sharing.active_rate[static_cast<size_t>(a)] = std::min(1.0, one / calibration->ComputeScale(count) * cores);
    if (sharing.saturated_at == 0 && a < pipeline_ranks && x >= capacity - 1e-9) sharing.saturated_at = a;
  }
  return sharing;
}

std::optional<Calibration> EffectiveCalibration(const Profile& profile, const Cluster& cluster, Optimizer optimizer) {
  if (cluster.calibration) return cluster.calibration;
  std::optional<Calibration> measured;
  if (profile.step_costs) measured = profile.step_costs->AsCalibration(OptimizerName(optimizer));
  if (cluster.send_overhead_ms) {
    if (!measured) measured = Calibration();
    measured->send_overhead_ms = *cluster.send_overhead_ms;
    measured->send_issue_bytes_per_s = cluster.send_issue_bytes_per_s.value_or(0.0);
  }
  return measured;
}

std::vector<double> ParamBytesPerRank(const Plan& plan, const Profile& profile) {
  std::vector<LayerRanges> rank_layers(plan.num_ranks());
  for (const StagePlan& stage : plan.stages) rank_layers[stage.rank].emplace_back(stage.first_layer, stage.end_layer);
  std::vector<double> bytes(rank_layers.size(), 0.0);
  for (size_t r = 0; r < rank_layers.size(); ++r) {
    bytes[r] = static_cast<double>(ParamBytesOfLayers(profile, rank_layers[r]));
  }
  return bytes;
}

std::vector<double> ParamBytesPerRank(const Plan& plan) { return ParamBytesPerRank(plan, plan.profile); }

int RanksPerNode(const Cluster& cluster, int devices) {
  return cluster.devices_per_node ? std::min(devices, *cluster.devices_per_node) : devices;
}

int RanksPerNode(const Cluster& cluster, int ranks, int replicas, int tensor_parallel) {
  return RanksPerNode(cluster, ranks * replicas * tensor_parallel) / tensor_parallel;
}

Ring RingOf(const Cluster& cluster, const std::vector<int>& devices) {
  Ring ring;
  const size_t n = devices.size();
  ring.devices = static_cast<double>(n);
  ring.bandwidth_bytes_per_s = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n && n >= 2; ++i) {
    const Link& link = cluster.LinkBetween(devices[i], devices[(i + 1) % n]);
    ring.bandwidth_bytes_per_s = std::min(ring.bandwidth_bytes_per_s, link.bandwidth_bytes_per_s);
    ring.latency_ms = std::max(ring.latency_ms, link.latency_ms);
  }
  for (const AllReduceSample& a : cluster.allreduce) {
    if (static_cast<size_t>(a.ranks) == n) ring.measured.emplace_back(static_cast<double>(a.bytes), a.ms);
  }
  std::sort(ring.measured.begin(), ring.measured.end());
  return ring;
}

double Ring::MeasuredMs(double bytes) const {
  if (bytes <= measured.front().first || measured.size() == 1) return measured.front().second;
  size_t hi = 1;
  while (hi + 1 < measured.size() && measured[hi].first < bytes) ++hi;
  const auto& [b0, ms0] = measured[hi - 1];
  const auto& [b1, ms1] = measured[hi];
  if (b1 <= b0) return ms1;
  return std::max(0.0, ms0 + (ms1 - ms0) * (bytes - b0) / (b1 - b0));
}

double RingAllReduceMs(const Cluster& cluster, const std::vector<int>& devices, double bytes) {
  return RingOf(cluster, devices).AllReduceMs(bytes);
}

CostModel UniformCostModel(int ranks, int stages, double forward_ms, double backward_ms,
                           double backward_weight_ms) {
  CostModel model;
  StageCost cost;
  cost.forward_ms = forward_ms;
  cost.backward_ms = backward_ms;
  cost.backward_weight_ms = backward_weight_ms;
  cost.backward_input_ms = backward_ms - backward_weight_ms;
  model.stages.assign(stages, cost);
  Link free_link;
  free_link.bandwidth_bytes_per_s = std::numeric_limits<double>::infinity();
  free_link.latency_ms = 0;
  model.links.assign(ranks, std::vector<Link>(ranks, free_link));
  return model;
}

}  // namespace gpipe
