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

Status CheckWeightTimes(const Profile& profile, const StagePlan& stage, const std::string& why) {
  for (int l = stage.first_layer; l < stage.end_layer; ++l) {
    if (!profile.layers[l].backward_weight_ms) {
      return Status::Invalid("profile layers[" + std::to_string(l) + "] (\"" + profile.layers[l].name +
                             "\") has no backward_weight_ms; " + why);
    }
  }
  return Status::Ok();
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
