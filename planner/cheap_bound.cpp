#include "planner/cheap_bound.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/schedule/placement.h"
#include "simulator/cost_model.h"

namespace gpipe {

const CheapBounds::Work& CheapBounds::WorkOf(const PartitionProblem& problem) {
  auto it = works_.find(problem.profile);
  if (it != works_.end()) return it->second;
  Work out;
  const std::vector<LayerProfile>& layers = problem.profile->layers;
  out.least_param_bytes = std::numeric_limits<double>::infinity();
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerProfile& layer = layers[l];
    // (a remat stage runs the forward of the layers it recomputes under no_grad)
    const double forward = problem.remat == RematPolicy::kOff ? layer.forward_ms
                                                               : std::min(layer.forward_ms, layer.ForwardNoGradMs());
    const double weight = layer.backward_weight_ms.value_or(0.0);
    const double input = layer.backward_input_ms.value_or(layer.backward_ms - weight);
    const double split = std::min(layer.backward_ms, input + weight);
    out.work_full += forward + layer.backward_ms;
    out.work_split += forward + split;
    out.path_full += forward + layer.backward_ms;
    out.path_split += forward + input;
    out.heaviest_full = std::max(out.heaviest_full, forward + layer.backward_ms);
    out.heaviest_split = std::max(out.heaviest_split, forward + split);
    if (l + 1 < layers.size()) out.output_bytes.push_back(static_cast<double>(layer.output_bytes));
    out.least_param_bytes = std::min(out.least_param_bytes, static_cast<double>(layer.param_bytes));
    out.param_bytes += static_cast<double>(layer.param_bytes);
    out.activation_bytes += static_cast<double>(layer.activation_bytes);
  }
  std::sort(out.output_bytes.begin(), out.output_bytes.end());
  // The first stage's weight pass ends the last micro-batch's way back (its rank's W of it).
  if (!layers.empty()) out.path_split += layers.front().backward_weight_ms.value_or(0.0);
  out.calibration = EffectiveCalibration(*problem.profile, *problem.cluster, problem.optimizer);
  return works_.emplace(problem.profile, std::move(out)).first->second;
}

const CheapBounds::Hops& CheapBounds::HopsOf(const PartitionProblem& problem) {
  const StageLayout layout = LayoutOf(problem.schedule);
  const auto key = std::make_tuple(static_cast<int>(layout), problem.ranks, problem.chunks, problem.replicas,
                                   static_cast<int>(problem.placement), problem.tensor_parallel, problem.profile);
  auto it = hops_.find(key);
  if (it != hops_.end()) return it->second;
  Hops out;
  std::vector<double> ms_per_byte;  // per boundary between ranks, both ways
  const std::vector<int> stage_rank =
      PlaceStages(problem.schedule, problem.ranks, StageCount(problem.schedule, problem.ranks, problem.chunks));
  const auto device = [&](int rank) {
    return DeviceOf(problem.placement, problem.ranks, problem.replicas, 0, rank, problem.tensor_parallel);
  };
  for (size_t s = 0; s + 1 < stage_rank.size(); ++s) {
    if (stage_rank[s] == stage_rank[s + 1]) continue;  // (the turn of a V stays on its rank)
    const int from = device(stage_rank[s]), to = device(stage_rank[s + 1]);
    const Link there = problem.cluster->LinkBetween(from, to);  // the activation
    const Link back = problem.cluster->LinkBetween(to, from);   // its gradient
    out.latency_ms += there.latency_ms + back.latency_ms;
    ms_per_byte.push_back(1e3 / there.bandwidth_bytes_per_s + 1e3 / back.bandwidth_bytes_per_s);
  }
  // The boundaries carry distinct layers' outputs: at least the smallest ones, the smallest over
  // the slowest links (the rearrangement inequality).
  std::sort(ms_per_byte.rbegin(), ms_per_byte.rend());
  const std::vector<double>& output_bytes = WorkOf(problem).output_bytes;
  for (size_t b = 0; b < ms_per_byte.size() && b < output_bytes.size(); ++b) {
    out.transfer_ms += ms_per_byte[b] * output_bytes[b];
  }
  return hops_.emplace(key, out).first->second;
}

double CheapBounds::MessagesMs(const PartitionProblem& problem, double samples) {
  const Hops& hops = HopsOf(problem);
  // (As the cost model: a message of no bytes pays its latency only, whatever the link.)
  return hops.latency_ms + hops.transfer_ms * samples;
}

double CheapBounds::AllReduceMs(const PartitionProblem& problem, double bytes) {
  const Cluster& cluster = *problem.cluster;
  const int replicas = problem.replicas;
  if (replicas < 2) return 0.0;
  for (const AllReduceSample& sample : cluster.allreduce) {
    if (sample.ranks == replicas) return 0.0;  // read from measurements (RingOf): nothing to bound it by
  }
  // Ring (cost_model.h): 2(D-1) steps at its largest latency and over its slowest link, any of
  // the cluster's links (pair by pair ones included); D groups of t devices that one node cannot
  // hold cross between nodes, so where no pair is measured apart, their link is among the ring's.
  const bool across = cluster.links.empty() && cluster.devices_per_node &&
                      int64_t{replicas} * problem.tensor_parallel > *cluster.devices_per_node;
  auto [it, fresh] = ring_links_.try_emplace(std::make_pair(&cluster, across));
  if (fresh) {
    std::vector<Link> possible = {cluster.link};
    if (cluster.devices_per_node) possible.push_back(cluster.inter_node_link);
    for (const LinkOverride& o : cluster.links) possible.push_back(o.link);
    if (across) possible = {cluster.inter_node_link};
    it->second = {std::numeric_limits<double>::infinity(), 0.0};
    for (const Link& link : possible) {
      it->second.first = std::min(it->second.first, link.latency_ms);
      it->second.second = std::max(it->second.second, link.bandwidth_bytes_per_s);
    }
  }
  const auto [latency, bandwidth] = it->second;
  const double d = static_cast<double>(replicas);
  return 2.0 * (d - 1) * (latency + (bytes > 0 ? bytes / d / bandwidth * 1e3 : 0.0));
}

double CheapBounds::Of(const PartitionProblem& problem) {
  const Work& work = WorkOf(problem);
  // Activations and messages scale with the samples per micro-batch; times also by the
  // calibrated compute scale of the ranks that share a node (under core sharing the stage times
  // carry one rank's factor, and sharing only slows them).
  const double samples = ProfileScale(problem);
  double scale = samples;
  if (work.calibration) {
    const int per_node = RanksPerNode(*problem.cluster, problem.ranks, problem.replicas, problem.tensor_parallel);
    scale *= work.calibration->ComputeScale(
        CoreSharingOf(*problem.profile, *problem.cluster, &*work.calibration, per_node, problem.ranks).static_ranks);
  }
  const bool split = SplitsBackward(problem.schedule);
  const double per_microbatch = (split ? work.work_split : work.work_full) * scale;
  const double path = (split ? std::min(work.path_full, work.path_split) : work.path_full) * scale;
  const double heaviest = (split ? work.heaviest_split : work.heaviest_full) * scale;
  const double messages = MessagesMs(problem, samples);
  // Each bound ends on a rank's last action, which its all-reduce follows.
  return AllReduceMs(problem, work.least_param_bytes) +
         std::max({per_microbatch * problem.microbatches / problem.ranks, path + messages,
                   heaviest * problem.microbatches});
}

double CheapBounds::Estimate(const PartitionProblem& problem) {
  const Work& work = WorkOf(problem);
  const double samples = ProfileScale(problem);
  const bool split = SplitsBackward(problem.schedule);
  const double k = problem.ranks, m = problem.microbatches;
  const double v = StageCount(problem.schedule, problem.ranks, problem.chunks) / k;
  double bubble = (k - 1) / (v * m);
  if (split) bubble /= 2;
  // One micro-batch's messages through every boundary (the fill and drain), and two per
  // micro-batch on the steady state's cycle between neighbouring ranks.
  const double messages = MessagesMs(problem, samples);
  const double boundaries = std::max(1.0, k * v - 1);
  double step = (split ? work.work_split : work.work_full) * samples * m / k * (1 + bubble) + messages +
                m * messages / boundaries;
  const double limit = problem.memory_limit_bytes;
  if (limit > 0) {
    const double state = StaticBytesPerParamByte(problem.optimizer, problem.profile->dtype,
                                                 problem.sharded_optimizer ? problem.replicas : 1) *
                         work.param_bytes / k;
    if (state > limit) return std::numeric_limits<double>::infinity();
    if (state + work.activation_bytes * samples > limit) step *= 4.0 / 3.0;
  }
  return step + AllReduceMs(problem, work.param_bytes / k);
}

}  // namespace gpipe
