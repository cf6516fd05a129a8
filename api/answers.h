// The answers of `gpipe-plan plan --json`, `simulate --json` and `export`, as functions: the CLI
// prints them and the Python API (python/bindings.cpp) returns them, so both give the same
// answers from the same code.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/plan.h"
#include "core/status.h"
#include "planner/search.h"

namespace gpipe::api {

/// What `plan --json` prints for a finished search of `request`: the best plan with its
/// prediction, bound, gap and alternatives (PlanReportJson), or, when nothing fits, the report of
/// what would (InfeasibleJson, which runs its own programs).
nlohmann::json PlanAnswer(const SearchRequest& request, const SearchResult& result);

/// What `simulate --json` prints for `plan`: step time, bubble, and per rank its time and memory.
Expected<nlohmann::json> SimulateAnswer(const Plan& plan);

/// What `export --format FORMAT` writes for `plan`: "pytorch-csv" (PyTorch's schedule CSV, with
/// its sends and receives when `with_communication`) or "megatron-layout" (Megatron-LM's flags).
Expected<std::string> ExportAnswer(const Plan& plan, const std::string& format, bool with_communication);

}  // namespace gpipe::api
