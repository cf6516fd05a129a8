#include "simulator/cost_model_builder.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/profile_sizes.h"
#include "core/schedule/placement.h"
#include "core/text.h"
#include "simulator/layer_table.h"
#include "simulator/tensor_parallel.h"

namespace gpipe {

struct CostModelBuilder::Parts {
  Profile at_t;   // the plan's profile at its t, where it is not at it already
  Profile sized;  // at the plan's micro-batch size, where the profile answers per size
  const Profile* at_plan_t = nullptr;  // at_t, or the plan's own
  const Profile* profile = nullptr;    // sized, or at_plan_t
  std::optional<Calibration> calibration;
  std::optional<LayerTable> table;  // (reads *profile and calibration: Parts never moves)
  ScheduleKind schedule{};
  bool split = false;
  bool weight_times = true;  // every layer has backward_weight_ms
  int ranks = 0;
  int optimizer_shards = 1;
  std::vector<Ring> rings;  // per rank, over its replicas (empty: D = 1)
  CostModel base;
};

namespace {

std::string FormatScale(double scale) { return Format("%.3g", scale); }

}  // namespace

Expected<CostModelBuilder> CostModelBuilder::Of(const Plan& plan) {
  // A plan with t > 1 whose profile is the at_plan_t model's is priced at t (the planner's plans
  // embed the profile at their t already, which this leaves as it is).
  auto parts = std::make_shared<Parts>();
  Parts& p = *parts;
  if (plan.tensor_parallel != plan.profile.tensor_parallel) {
    Expected<Profile> derived = ProfileAtTensorParallel(plan.profile, plan.tensor_parallel, plan.cluster);
    if (!derived.ok()) return derived.status();
    p.at_t = std::move(*derived);
  }
  p.at_plan_t = plan.tensor_parallel != plan.profile.tensor_parallel ? &p.at_t : &plan.profile;
  const Profile& at_plan_t = *p.at_plan_t;
  CostModel& model = p.base;
  model.microbatch_size = plan.microbatch_size();
  model.global_batch = plan.global_batch;
  // A profile measured at several sizes answers at this size; one measured at one size scales.
  const bool several_sizes = MeasuredMicrobatchSizes(at_plan_t).size() > 1;
  // Co-located ranks probed at several sizes answer at this size too, whatever the layers do.
  const bool costs_by_size = at_plan_t.step_costs && !at_plan_t.step_costs->by_microbatch_size.empty();
  if (several_sizes) p.sized = ProfileAtMicrobatch(at_plan_t, model.microbatch_size, &model.profile_note);
  if (!several_sizes && costs_by_size) {
    p.sized = at_plan_t;
    p.sized.step_costs = p.sized.step_costs->AtMicrobatch(model.microbatch_size);
  }
  p.profile = several_sizes || costs_by_size ? &p.sized : &at_plan_t;
  const Profile& profile = *p.profile;
  model.scale = static_cast<double>(model.microbatch_size) / static_cast<double>(profile.microbatch_size);
  if (!several_sizes && model.scale != 1.0) {
    model.profile_note = "the profile measured micro-batches of " + std::to_string(profile.microbatch_size) +
                         "; times and activations are scaled linearly by " + FormatScale(model.scale);
  }
  if (const auto note = at_plan_t.extra.find("tensor_parallel_note"); note != at_plan_t.extra.end() && note->is_string()) {
    model.profile_note += (model.profile_note.empty() ? "" : "; ") + note->get<std::string>();
  }
  p.schedule = plan.schedule;
  p.split = SplitsBackward(plan.schedule);
  p.calibration = EffectiveCalibration(profile, plan.cluster, plan.optimizer);
  const Calibration* calibration = p.calibration ? &*p.calibration : nullptr;
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
  p.table.emplace(profile, model.scale, plan.optimizer, calibration, sharing.static_ranks, plan.optimizer_shards());
  model.active_rate = std::move(sharing.active_rate);
  p.weight_times = profile.HasWeightTimes();
  // Plan::DeviceOf recounts the ranks on every call; count them once here.
  const int ranks = plan.num_ranks();
  p.ranks = ranks;
  p.optimizer_shards = plan.optimizer_shards();
  const auto device = [&](int replica, int rank) {
    return DeviceOf(plan.placement, ranks, plan.replicas, replica, rank, t);
  };
  model.links.assign(ranks, std::vector<Link>(ranks));
  for (int from = 0; from < ranks; ++from) {
    for (int to = 0; to < ranks; ++to) model.links[from][to] = plan.cluster.LinkBetween(device(0, from), device(0, to));
  }
  if (calibration != nullptr) {
    model.send_overhead_ms = calibration->send_overhead_ms;
    model.send_issue_bytes_per_s = calibration->send_issue_bytes_per_s;
    if (!plan.cluster.calibration && profile.step_costs && !profile.step_costs->send_ms.empty()) {
      // What a send cost with this many ranks on the node, as the profiler's pipelines measured it.
      const std::vector<Measured>& sends = profile.step_costs->send_ms;
      const double measured = sends[std::min(sends.size(), static_cast<size_t>(per_node)) - 1].median;
      if (measured > 0) model.send_overhead_ms = measured;
    }
  }
  if (plan.replicas > 1) {
    p.rings.reserve(ranks);
    std::vector<int> devices;
    for (int r = 0; r < ranks; ++r) {
      devices.clear();
      for (int d = 0; d < plan.replicas; ++d) devices.push_back(device(d, r));
      p.rings.push_back(RingOf(plan.cluster, devices));
    }
  }
  return CostModelBuilder(std::move(parts));
}

const CostModel& CostModelBuilder::Base() const { return parts_->base; }

Status CostModelBuilder::FillStages(const Plan& plan, CostModel* model) const {
  const Parts& p = *parts_;
  model->stages.clear();
  for (const StagePlan& stage : plan.stages) {
    if (p.split && !p.weight_times) {
      GPIPE_RETURN_IF_ERROR(CheckWeightTimes(*p.profile, stage,
                                             "the " + std::string(ScheduleName(p.schedule)) +
                                                 " schedule splits backwards into input and weight gradients and "
                                                 "needs that time (the profiler measures it; or choose the 1f1b "
                                                 "schedule)"));
    }
    model->stages.push_back(p.table->Stage(stage));
  }
  model->shared_static_bytes.clear();
  if (p.table->has_tied_parameters()) {
    // A tied parameter in several stages of one rank is held there once.
    std::vector<LayerRanges> rank_layers(p.ranks);
    for (const StagePlan& stage : plan.stages) rank_layers[stage.rank].emplace_back(stage.first_layer, stage.end_layer);
    std::vector<double> shared(p.ranks, 0.0);
    bool any = false;
    for (int r = 0; r < p.ranks; ++r) {
      shared[r] = p.table->SharedStaticBytes(rank_layers[r]);
      any = any || shared[r] != 0.0;
    }
    if (any) model->shared_static_bytes = std::move(shared);
  }
  const std::vector<double> param_bytes = ParamBytesPerRank(plan, *p.at_plan_t);
  model->tail_ms.clear();
  if (p.calibration) {
    // With a sharded optimizer each replica updates its shard.
    model->tail_ms.resize(p.ranks);
    for (int r = 0; r < p.ranks; ++r) model->tail_ms[r] = p.calibration->TailMs(param_bytes[r] / p.optimizer_shards);
  }
  model->allreduce_ms.clear();
  for (const Ring& ring : p.rings) model->allreduce_ms.push_back(ring.AllReduceMs(param_bytes[model->allreduce_ms.size()]));
  return Status::Ok();
}

Expected<CostModel> BuildCostModel(const Plan& plan) {
  Expected<CostModelBuilder> builder = CostModelBuilder::Of(plan);
  if (!builder.ok()) return builder.status();
  CostModel model = builder->Base();
  GPIPE_RETURN_IF_ERROR(builder->FillStages(plan, &model));
  return model;
}

}  // namespace gpipe
