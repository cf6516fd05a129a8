#include "planner/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/schedule/validate.h"
#include "core/text.h"
#include "core/units.h"
#include "simulator/cost_model.h"
#include "simulator/report.h"
#include "simulator/simulator.h"

namespace gpipe {
namespace {

std::string Shape(const Plan& plan) {
  std::string text = std::string(ScheduleName(plan.schedule));
  if (plan.schedule == ScheduleKind::kInterleaved1F1B) {
    text += " v=" + std::to_string(plan.num_stages() / plan.num_ranks());
  }
  return text;
}

int RematStages(const Plan& plan) {
  return static_cast<int>(std::count_if(plan.stages.begin(), plan.stages.end(), [](const StagePlan& s) { return s.remat; }));
}

// Simulates `plan` (it is valid: the planner made it).
SimResult Simulated(const Plan& plan, CostModel* costs) {
  *costs = *BuildCostModel(plan);
  return *Simulate(*BuildSchedule(plan), *costs);
}

// "best step 30.59 s, lower bound 30.41 s, gap 0.59% (stopped at --gap 1%)".
std::string FormatGapLine(const SearchResult& result) {
  std::string line = "best step " + FormatMs(result.best->step_time_ms) + ", lower bound " +
                     FormatMs(result.lower_bound_ms) + " (no plan of the searched space is faster), gap " +
                     (result.gap == 0 ? std::string("0 (optimal)") : Format("%.2f%%", 100 * result.gap));
  if (!result.lower_bound_at.empty()) line += "; the bound comes from " + result.lower_bound_at;
  if (result.stopped_by_gap) line += "; stopped once the gap was at most --gap";
  if (result.stopped_by_time) line += "; stopped at --time-limit";
  return line + "\n";
}

}  // namespace

std::string FormatPlanReport(const SearchRequest& request, const SearchResult& result, double seconds) {
  std::string out;
  out += "searched " + std::to_string(result.searched) + " of " + std::to_string(result.configurations) +
         " configurations (" + std::to_string(result.skipped_by_bound) + " ruled out by a lower bound) in " +
         Format("%.2f", seconds) + " s; " +
         (!result.best                ? "no plan fits"
          : result.proven_optimal     ? "the best plan is proven optimal"
                                      : "optimality is not proven") +
         "\n";
  if (result.best) out += FormatGapLine(result);
  if (!result.proven_optimal && !result.unproven.empty()) {
    out += std::to_string(result.unproven.size()) + " configuration searches stopped at their node budget (--max-nodes; "
           "interleaved ones get a hundredth of it) and may hide a faster plan:";
    for (size_t i = 0; i < result.unproven.size() && i < 6; ++i) out += (i ? ", " : " ") + result.unproven[i];
    out += result.unproven.size() > 6 ? ", ...\n" : "\n";
  }
  out += "\n";
  if (!result.best) return out + ExplainInfeasible(request);
  const Candidate& best = *result.best;
  CostModel costs;
  const SimResult sim = Simulated(best.plan, &costs);
  out += "best plan: " + Shape(best.plan) + ", K=" + std::to_string(best.plan.num_ranks()) +
         " ranks x D=" + std::to_string(best.plan.replicas) + " replicas (" +
         PlacementName(best.plan.placement) + "), remat on " + std::to_string(RematStages(best.plan)) + " of " +
         std::to_string(best.plan.num_stages()) + " stages\n";
  out += FormatSimSummary(best.plan, costs, sim);
  out += "\nalternatives (none is both faster and smaller than another; within 25% of the best):\n";
  out += "  " + Pad("step", 11) + Pad("samples/s", 10) + Pad("bubble", 7) + Pad("peak memory", 12) +
         Pad("schedule", 19) + Pad("K", 3) + Pad("D", 3) + Pad("M", 5) + "remat\n";
  for (const Candidate& c : result.pareto) {
    out += "  " + Pad(FormatMs(c.step_time_ms), 11) + Pad(Format("%.1f", c.throughput_samples_per_s), 10) +
           Pad(Format("%.1f%%", 100 * c.bubble_fraction), 7) + Pad(FormatBytes(c.peak_memory_bytes), 12) +
           Pad(Shape(c.plan), 19) + Pad(std::to_string(c.plan.num_ranks()), 3) +
           Pad(std::to_string(c.plan.replicas), 3) + Pad(std::to_string(c.plan.microbatches), 5) +
           std::to_string(RematStages(c.plan)) + "/" + std::to_string(c.plan.num_stages()) + "\n";
  }
  return out;
}

nlohmann::json PlanReportJson(const SearchResult& result) {
  if (!result.best) return nlohmann::json::object();
  const Candidate& best = *result.best;
  nlohmann::json json = PlanToJson(best.plan);
  CostModel costs;
  const SimResult sim = Simulated(best.plan, &costs);
  json["prediction"] = SimResultToJson(best.plan, sim);
  json["prediction"]["proven_optimal"] = result.proven_optimal;
  json["prediction"]["unproven_configurations"] = result.unproven;
  json["prediction"]["lower_bound_ms"] = result.lower_bound_ms;
  json["prediction"]["gap"] = result.gap;
  json["prediction"]["lower_bound_configuration"] = result.lower_bound_at;
  json["prediction"]["stopped_by_time"] = result.stopped_by_time;
  json["prediction"]["stopped_by_gap"] = result.stopped_by_gap;
  nlohmann::json alternatives = nlohmann::json::array();
  for (const Candidate& c : result.pareto) {
    alternatives.push_back({{"schedule", ScheduleName(c.plan.schedule)},
                            {"stages", c.plan.num_stages()},
                            {"ranks", c.plan.num_ranks()},
                            {"replicas", c.plan.replicas},
                            {"microbatches", c.plan.microbatches},
                            {"remat_stages", RematStages(c.plan)},
                            {"step_time_ms", c.step_time_ms},
                            {"throughput_samples_per_s", c.throughput_samples_per_s},
                            {"bubble_fraction", c.bubble_fraction},
                            {"peak_memory_bytes", c.peak_memory_bytes}});
  }
  json["alternatives"] = alternatives;
  return json;
}

std::string ExplainInfeasible(const SearchRequest& request) {
  const double limit = static_cast<double>(request.cluster.device_memory_bytes);
  std::string out = "No plan fits in " + FormatBytes(limit) + " per device on " +
                    std::to_string(request.cluster.devices) + " devices.\n";
  // The fastest plan if memory were unlimited, and where it overflows.
  SearchRequest unlimited = request;
  unlimited.cluster.device_memory_bytes = int64_t{1} << 62;
  unlimited.remat = RematPolicy::kOff;
  unlimited.progress = nullptr;
  Expected<SearchResult> fastest = SearchPlans(unlimited);
  if (fastest.ok() && fastest->best) {
    const Plan& plan = fastest->best->plan;
    CostModel costs;
    const SimResult sim = Simulated(plan, &costs);
    out += "The fastest plan without a memory limit (" + Shape(plan) + ", K=" + std::to_string(plan.num_ranks()) +
           ", D=" + std::to_string(plan.replicas) + ", M=" + std::to_string(plan.microbatches) + ") overflows:\n";
    for (int r = 0; r < plan.num_ranks(); ++r) {
      const RankResult& rank = sim.ranks[r];
      if (rank.peak_memory_bytes <= limit) continue;
      std::string layers;
      for (const StagePlan& stage : plan.stages) {
        if (stage.rank != r) continue;
        layers += (layers.empty() ? "" : ", ") + std::to_string(stage.first_layer) + "-" + std::to_string(stage.end_layer - 1);
      }
      out += "  rank " + std::to_string(r) + " (layers " + layers + ") needs " + FormatBytes(rank.peak_memory_bytes) +
             ", " + FormatBytes(rank.peak_memory_bytes - limit) + " over: " + FormatBytes(rank.static_bytes) +
             " parameters, gradients and optimizer state, " + FormatBytes(rank.peak_activation_bytes) + " activations\n";
    }
  }
  // The least memory any plan needs: as many stages as devices allow, micro-batches of one
  // sample, 1F1B, remat wherever it saves memory; the partition with the smallest largest peak.
  PartitionProblem smallest;
  smallest.profile = &request.profile;
  smallest.cluster = &request.cluster;
  smallest.schedule = ScheduleKind::k1F1B;
  smallest.ranks = std::min(request.cluster.devices, request.profile.num_layers());
  smallest.microbatches = static_cast<int>(std::min<int64_t>(request.global_batch, 1 << 20));
  smallest.global_batch = request.global_batch;
  smallest.optimizer = request.optimizer;
  smallest.remat = request.remat == RematPolicy::kOff ? RematPolicy::kOff : RematPolicy::kAuto;
  Expected<LeastMemoryResult> least = LeastMemoryPartition(smallest);
  if (least.ok()) {
    int remat_stages = 0;
    for (const StagePlan& stage : least->plan.stages) remat_stages += stage.remat ? 1 : 0;
    out += "The smallest plan (K=" + std::to_string(smallest.ranks) + " stages, M=" +
           std::to_string(smallest.microbatches) + " micro-batches of " +
           std::to_string(request.global_batch / smallest.microbatches) + " sample" +
           (request.global_batch / smallest.microbatches == 1 ? "" : "s") + ", remat on " +
           std::to_string(remat_stages) + " of " + std::to_string(smallest.ranks) + " stages, 1f1b) needs " +
           FormatBytes(least->peak_bytes) + " per device.\n";
  }
  out += "What would help: more devices (more stages share the parameters), remat (--remat auto or on), more "
         "micro-batches (a smaller micro-batch keeps fewer activations), or an optimizer with less state "
         "(--optimizer sgd).\n";
  return out;
}

}  // namespace gpipe
