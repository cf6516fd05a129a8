#include "simulator/report.h"

#include <algorithm>
#include <cstdio>

#include "core/text.h"
#include "core/units.h"

namespace gpipe {
namespace {

std::string StagesOf(const Plan& plan, int rank, bool layers) {
  std::string text;
  for (int s = 0; s < plan.num_stages(); ++s) {
    const StagePlan& stage = plan.stages[s];
    if (stage.rank != rank) continue;
    if (!text.empty()) text += ",";
    text += layers ? std::to_string(stage.first_layer) + "-" + std::to_string(stage.end_layer - 1)
                   : std::to_string(s) + (!stage.remat ? "" : stage.remat_layers > 0 ? "r" + std::to_string(stage.remat_layers) : "r");
  }
  return text;
}

// The ranks whose peak exceeds the device's memory, as "rank 0 by 858.68 MiB, rank 3 by 1.20 GiB";
// empty when every rank fits.
std::string Overflows(const Plan& plan, const SimResult& result) {
  const double limit = static_cast<double>(plan.cluster.device_memory_bytes);
  std::string text;
  for (size_t r = 0; r < result.ranks.size(); ++r) {
    const double peak = result.ranks[r].peak_memory_bytes;
    if (peak <= limit) continue;
    text += (text.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " by " + FormatBytes(peak - limit);
  }
  return text;
}

}  // namespace

double GpipeBubble(int ranks, int microbatches) {
  return static_cast<double>(ranks - 1) / static_cast<double>(microbatches + ranks - 1);
}

nlohmann::json SimResultToJson(const Plan& plan, const SimResult& result) {
  nlohmann::json ranks = nlohmann::json::array();
  const double limit = static_cast<double>(plan.cluster.device_memory_bytes);
  for (size_t r = 0; r < result.ranks.size(); ++r) {
    const RankResult& rank = result.ranks[r];
    nlohmann::json stages = nlohmann::json::array();
    for (int s = 0; s < plan.num_stages(); ++s) {
      if (plan.stages[s].rank == static_cast<int>(r)) stages.push_back(s);
    }
    ranks.push_back({{"rank", r},
                     {"stages", stages},
                     {"busy_ms", rank.busy_ms},
                     {"end_ms", rank.end_ms},
                     {"wait_ms", rank.wait_ms},
                     {"peak_memory_bytes", rank.peak_memory_bytes},
                     {"model_state_bytes", rank.static_bytes},
                     {"peak_activation_bytes", rank.peak_activation_bytes},
                     {"peak_buffer_bytes", rank.peak_buffer_bytes},
                     {"max_in_flight_microbatches", rank.max_in_flight},
                     {"memory_limit_bytes", limit},
                     {"fits", rank.peak_memory_bytes <= limit}});
  }
  double most = 0;
  for (const RankResult& rank : result.ranks) most = std::max(most, rank.peak_memory_bytes);
  return {{"fits", most <= limit},
          {"memory_limit_bytes", limit},
          {"peak_memory_bytes", most},
          {"step_time_ms", result.step_time_ms},
          {"bubble_fraction", result.bubble_fraction},
          {"throughput_samples_per_s", result.throughput_samples_per_s},
          {"gpipe_closed_form_bubble", GpipeBubble(plan.num_ranks(), plan.microbatches)},
          {"schedule", ScheduleName(plan.schedule)},
          {"num_ranks", plan.num_ranks()},
          {"num_stages", plan.num_stages()},
          {"microbatches", plan.microbatches},
          {"microbatch_size", plan.microbatch_size()},
          {"global_batch", plan.global_batch},
          {"num_actions", result.num_actions},
          {"ranks", ranks}};
}

std::string PlanTitle(const Plan& plan, const std::string& what) {
  return what + ": " + plan.profile.model + ", " + ScheduleName(plan.schedule) +
         (plan.tensor_parallel > 1 ? ", t=" + std::to_string(plan.tensor_parallel) : std::string()) +
         ", K=" + std::to_string(plan.num_ranks()) + ", M=" + std::to_string(plan.microbatches);
}

std::string FormatSimSummary(const Plan& plan, const CostModel& costs, const SimResult& result) {
  const int ranks = plan.num_ranks();
  std::string out;
  out += plan.profile.model + " on " + plan.profile.device + " (cluster " +
         (plan.cluster.name.empty() ? std::to_string(plan.cluster.devices) + " devices" : plan.cluster.name) + ")\n";
  out += "schedule " + std::string(ScheduleName(plan.schedule)) + ", K=" + std::to_string(ranks) +
         " ranks, " + std::to_string(plan.num_stages()) + " stages, M=" + std::to_string(plan.microbatches) +
         " micro-batches of " + std::to_string(plan.microbatch_size()) + " (global batch " +
         std::to_string(plan.global_batch) + "), optimizer " + OptimizerName(plan.optimizer) +
         (plan.sharded_optimizer ? " sharded over the replicas (ZeRO-1)" : "") + ", " + plan.precision() + "\n";
  if (plan.tensor_parallel > 1) {
    out += "tensor parallelism t=" + std::to_string(plan.tensor_parallel) + ": each rank runs on " +
           std::to_string(plan.tensor_parallel) + " devices of a node, " + std::to_string(plan.tensor_parallel) +
           " x " + std::to_string(ranks) + " x " + std::to_string(plan.replicas) + " = " +
           std::to_string(plan.tensor_parallel * ranks * plan.replicas) + " devices; times and memory below are one "
           "device's\n";
  }
  const std::string overflows = Overflows(plan, result);
  if (!overflows.empty()) {
    out += "DOES NOT FIT: peak memory exceeds the device's " + FormatMemoryLimit(static_cast<double>(plan.cluster.device_memory_bytes)) +
           " on " + overflows + ". The step time below is what it would be with enough memory; 'gpipe-plan plan' "
           "finds plans that fit (docs/memory.md).\n";
  }
  if (!costs.profile_note.empty()) out += "note: " + costs.profile_note + "\n";
  if (!costs.calibration_note.empty()) out += "beyond layers: " + costs.calibration_note + "\n";
  out += "\n";
  out += "step time   " + FormatMs(result.step_time_ms) + "\n";
  out += "throughput  " + Format("%.2f", result.throughput_samples_per_s) + " samples/s\n";
  out += "bubble      " + Format("%.1f%%", 100.0 * result.bubble_fraction) +
         "  (pipeline fill, drain and waits; equal stages, free links: (K-1)/(M+K-1) = " +
         Format("%.1f%%", 100.0 * GpipeBubble(ranks, plan.microbatches)) + ")\n\n";
  const double limit = static_cast<double>(plan.cluster.device_memory_bytes);
  out += Pad("rank", 5) + Pad("stages", 8) + Pad("layers", 12) + Pad("busy", 11) + Pad("idle", 7) +
         Pad("peak memory", 12) + Pad("= model state", 15) + Pad("+ activations", 14) + Pad("+ buffers", 11) +
         "of " + FormatMemoryLimit(limit) + "\n";
  for (int r = 0; r < ranks; ++r) {
    const RankResult& rank = result.ranks[r];
    const double idle = result.step_time_ms > 0 ? 1.0 - rank.busy_ms / result.step_time_ms : 0.0;
    const bool fits = rank.peak_memory_bytes <= limit;
    out += Pad(std::to_string(r), 5) + Pad(StagesOf(plan, r, false), 8) + Pad(StagesOf(plan, r, true), 12) +
           Pad(FormatMs(rank.busy_ms), 11) + Pad(Format("%.1f%%", 100.0 * idle), 7) +
           Pad(FormatBytes(rank.peak_memory_bytes), 12) + Pad(FormatBytes(rank.static_bytes), 15) +
           Pad(FormatBytes(rank.peak_activation_bytes), 14) + Pad(FormatBytes(rank.peak_buffer_bytes), 11) +
           (fits ? "fits" : "OVER by " + FormatBytes(rank.peak_memory_bytes - limit)) + "\n";
  }
  out += "(idle: share of the step not computing; model state: parameters + gradients + optimizer state;\n"
         " r after a stage number: rematerialized; rN: only its first N layers recompute)\n";
  if (plan.replicas > 1) {
    double allreduce = 0;
    for (double ms : costs.allreduce_ms) allreduce = std::max(allreduce, ms);
    out += std::string(plan.sharded_optimizer ? "gradient reduce-scatter and weight all-gather" : "gradient all-reduce") +
           " across " + std::to_string(plan.replicas) + " replicas (" + PlacementName(plan.placement) + "): up to " +
           FormatMs(allreduce) + " after each rank's last backward\n";
  }
  return out;
}

}  // namespace gpipe
