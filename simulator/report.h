// Presenting a simulation: the readable summary and the JSON object that scripts read
// (`simulate --json`; the keys step_time_ms, bubble_fraction, throughput_samples_per_s and
// ranks[].busy_ms / peak_memory_bytes are a contract). bubble_fraction is the pipeline bubble of
// simulator/bubble.h; ranks[].model_state_bytes is parameters + gradients + optimizer state.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/plan.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"

namespace gpipe {

/// GPipe's closed-form bubble for K equal stages and M micro-batches: (K-1)/(M+K-1).
double GpipeBubble(int ranks, int microbatches);

/// Carries "fits" (every rank's peak within the device's memory), "memory_limit_bytes" and
/// "peak_memory_bytes" (the largest over the ranks).
nlohmann::json SimResultToJson(const Plan& plan, const SimResult& result);

/// A table a person reads: the plan, step time, throughput, bubble against the closed form, and
/// per rank its stages, busy time and peak memory against the device's limit. A plan that does
/// not fit says so on its third line, before any figure ("DOES NOT FIT: ...").
std::string FormatSimSummary(const Plan& plan, const CostModel& costs, const SimResult& result);

/// "simulated: gpt3-13b, 1f1b, K=8, M=32" for trace and picture titles.
std::string PlanTitle(const Plan& plan, const std::string& what);

}  // namespace gpipe
