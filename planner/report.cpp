#include "planner/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/schedule/placement.h"
#include "core/schedule/validate.h"
#include "core/text.h"
#include "core/units.h"
#include "planner/infeasible.h"
#include "planner/remat_choices.h"
#include "simulator/cost_model.h"
#include "simulator/report.h"
#include "simulator/simulator.h"

namespace gpipe {
namespace {

std::string Shape(const Plan& plan) {
  std::string text = std::string(ScheduleName(plan.schedule));
  if (LayoutOf(plan.schedule) == StageLayout::kLoop) {
    text += " v=" + std::to_string(plan.num_stages() / plan.num_ranks());
  }
  return text;
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
  line += "\n";
  if (result.best_is_least_memory) {
    line += "the search found no plan that fits before it stopped; the plan below is the one of least memory "
            "(1F1B, one stage per device, one sample per micro-batch), which fits: give it more time "
            "(--time-limit) or --max-nodes for a faster one\n";
  }
  return line;
}

}  // namespace

std::string FormatPlanReport(const SearchRequest& request, const SearchResult& result, double seconds) {
  std::string out;
  out += "searched " + std::to_string(result.searched) + " of " + std::to_string(result.configurations) +
         " configurations (" + std::to_string(result.skipped_by_bound) + " ruled out by a lower bound" +
         (result.bounds_raised > 0 ? "; " + std::to_string(result.bounds_raised) + " lower bounds raised after" : "") +
         (result.dives > 0 ? "; the first plans of " + std::to_string(result.dives) +
                                 " tried ahead of their turn, none found by " +
                                 Format("%.0f", kDiveAfter * 100) + "% of the time limit"
                           : "") +
         ") in " +
         Format("%.2f", seconds) + " s; " +
         (!result.best && result.stopped_by_time
              ? "stopped at --time-limit without a plan, the least-memory plan included: most likely none fits"
          : !result.best              ? "no plan fits"
          : result.proven_optimal     ? "the best plan is proven optimal"
                                      : "optimality is not proven") +
         "\n";
  if (result.oversubscribed > 0) {
    out += "left out " + std::to_string(result.oversubscribed) + " configurations that put more than " +
           std::to_string(result.concurrent_ranks) + " ranks on a node: it computes " +
           std::to_string(result.concurrent_ranks) + " at once (as profiled), and past that the prediction prices the "
           "shared cores too kindly (docs/planner.md); --oversubscribe searches them\n";
  }
  if (result.best) out += FormatGapLine(result);
  if (!request.tensor_parallel && request.profile.TensorParallelSizes().size() == 1 &&
      request.profile.tensor_parallel == 1 && request.cluster.devices > 1) {
    out += "tensor parallelism: t = 1 only; the profile has no tensor_parallel_measurements (profiles/generate.py "
           "writes them for transformers; the profiler measures t = 1)\n";
  }
  if (!result.proven_optimal && !result.unproven.empty()) {
    out += std::to_string(result.unproven.size()) + " configuration searches stopped at their node budget (--max-nodes; "
           "interleaved ones get a hundredth of it) and may hide a faster plan:";
    for (size_t i = 0; i < result.unproven.size() && i < 6; ++i) out += (i ? ", " : " ") + result.unproven[i];
    out += result.unproven.size() > 6 ? ", ...\n" : "\n";
  }
  out += "\n";
  if (!result.best) return out + FormatInfeasible(ExplainInfeasible(request, &result));
  const Candidate& best = *result.best;
  CostModel costs;
  const SimResult sim = Simulated(best.plan, &costs);
  const int partial = PartialRematStages(best.plan);
  out += "best plan: " + Shape(best.plan) + ", " +
         (best.plan.tensor_parallel > 1 ? "t=" + std::to_string(best.plan.tensor_parallel) + " tensor-parallel x " : "") +
         "K=" + std::to_string(best.plan.num_ranks()) + " ranks x D=" + std::to_string(best.plan.replicas) +
         " replicas (" + PlacementName(best.plan.placement) +
         (best.plan.sharded_optimizer ? ", optimizer sharded over the replicas (ZeRO-1)" : "") + "), remat on " + std::to_string(RematStages(best.plan)) + " of " +
         std::to_string(best.plan.num_stages()) + " stages" +
         (partial > 0 ? " (" + std::to_string(partial) + " of them only their first layers)" : std::string()) + "\n";
  if (IsNewerSchedule(best.plan.schedule)) {
    out += ScheduleName(best.plan.schedule) + std::string(" wins: ");
    if (result.best_older) {
      const Candidate& older = *result.best_older;
      out += Format("%.2f%%", 100 * (older.step_time_ms / best.step_time_ms - 1)) + " faster than the best plan of " +
             "gpipe, 1f1b, interleaved-1f1b and zb-h1 (" + Shape(older.plan) +
             (older.plan.tensor_parallel > 1 ? " t=" + std::to_string(older.plan.tensor_parallel) : std::string()) +
             " K=" + std::to_string(older.plan.num_ranks()) +
             " D=" + std::to_string(older.plan.replicas) + " M=" + std::to_string(older.plan.microbatches) + ", " +
             FormatMs(older.step_time_ms) + ")\n";
    } else {
      out += "no plan of gpipe, 1f1b, interleaved-1f1b or zb-h1 fits\n";
    }
  }
  out += FormatSimSummary(best.plan, costs, sim);
  out += "\nalternatives (none is both faster and smaller than another; within 25% of the best; t: tensor "
         "parallelism, Dz: the optimizer sharded over D):\n";
  out += "  " + Pad("step", 11) + Pad("samples/s", 10) + Pad("bubble", 7) + Pad("peak memory", 12) +
         Pad("schedule", 19) + Pad("t", 3) + Pad("K", 4) + Pad("D", 5) + Pad("M", 5) + "remat\n";
  for (const Candidate& c : result.pareto) {
    out += "  " + Pad(FormatMs(c.step_time_ms), 11) + Pad(Format("%.1f", c.throughput_samples_per_s), 10) +
           Pad(Format("%.1f%%", 100 * c.bubble_fraction), 7) + Pad(FormatBytes(c.peak_memory_bytes), 12) +
           Pad(Shape(c.plan), 19) + Pad(std::to_string(c.plan.tensor_parallel), 3) +
           Pad(std::to_string(c.plan.num_ranks()), 4) +
           Pad(std::to_string(c.plan.replicas) + (c.plan.sharded_optimizer ? "z" : ""), 5) +
           Pad(std::to_string(c.plan.microbatches), 5) +
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
  json["prediction"]["best_is_least_memory"] = result.best_is_least_memory;
  json["prediction"]["stopped_by_gap"] = result.stopped_by_gap;
  nlohmann::json alternatives = nlohmann::json::array();
  for (const Candidate& c : result.pareto) {
    alternatives.push_back({{"schedule", ScheduleName(c.plan.schedule)},
                            {"stages", c.plan.num_stages()},
                            {"ranks", c.plan.num_ranks()},
                            {"replicas", c.plan.replicas},
                            {"tensor_parallel", c.plan.tensor_parallel},
                            {"sharded_optimizer", c.plan.sharded_optimizer},
                            {"microbatches", c.plan.microbatches},
                            {"remat_stages", RematStages(c.plan)},
                            {"step_time_ms", c.step_time_ms},
                            {"throughput_samples_per_s", c.throughput_samples_per_s},
                            {"bubble_fraction", c.bubble_fraction},
                            {"peak_memory_bytes", c.peak_memory_bytes}});
  }
  json["alternatives"] = alternatives;
  if (result.best_older) {
    const Candidate& older = *result.best_older;
    json["prediction"]["best_of_older_schedules"] = {{"schedule", ScheduleName(older.plan.schedule)},
                                                     {"stages", older.plan.num_stages()},
                                                     {"ranks", older.plan.num_ranks()},
                                                     {"replicas", older.plan.replicas},
                                                     {"microbatches", older.plan.microbatches},
                                                     {"step_time_ms", older.step_time_ms},
                                                     {"faster_by", older.step_time_ms / best.step_time_ms - 1}};
  }
  return json;
}

}  // namespace gpipe
