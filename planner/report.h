// Presenting the planner's answer: the chosen plan stage by stage with its time and memory
// against the limit, the alternatives that trade step time for memory, and for budgets nothing
// fits, the report of planner/infeasible.h.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "planner/search.h"

namespace gpipe {

/// The table for people: configuration, step time, throughput, bubble against the closed form,
/// per stage its layers, time, memory breakdown and remat, then the Pareto list.
std::string FormatPlanReport(const SearchRequest& request, const SearchResult& result, double seconds);

/// The plan in gpipe-plan/1 form with a "prediction" object (step_time_ms, bubble_fraction,
/// throughput_samples_per_s, ranks[].busy_ms / peak_memory_bytes) and the "alternatives".
nlohmann::json PlanReportJson(const SearchResult& result);

}  // namespace gpipe
