// When no plan fits a budget: what it would take. The report leads with the least memory the
// smallest plan (one stage per device) needs on these devices and the fewest devices on which a
// plan fits at this batch (both searched, min_devices.h), then only the changes that would make a
// plan fit here, each checked.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/min_devices.h"
#include "planner/search.h"

namespace gpipe {

/// One change of the request that makes a plan fit on the same devices, checked by LeastMemoryOn.
struct FittingChange {
  /// The flags to use, e.g. "--optimizer sgd" or "--remat auto".
  std::string flags;
  /// What the change gives up or means, e.g. "less optimizer state; it changes the training".
  std::string note;
  /// The least memory a plan needs with the change (fits the limit).
  double least_bytes = 0;
};

struct InfeasibleReport {
  double limit_bytes = 0;
  int devices = 0;
  int64_t global_batch = 0;
  /// The least memory on these devices, with the request's pins (absent if even that plan cannot
  /// be built, e.g. pins that do not go together).
  std::optional<LeastMemory> least;
  /// The fewest devices with a fitting plan at this batch, with K, D, M and the schedule free
  /// (remat and optimizer as asked), up to one layer per device; absent when none is enough, or
  /// when the scan ran out of time (`fewest_stopped`: the request's time limit, from the report's
  /// start).
  std::optional<FewestDevicesResult> fewest;
  bool fewest_stopped = false;
  /// The request's remat was auto (by layer) and the profile has so many layers that the report's
  /// least-memory programs priced whole stages instead (its figures are then upper bounds).
  bool whole_stage_programs = false;
  /// Whether the request pinned K, D, M or the schedule (the least memory above keeps the pins).
  bool pinned = false;
  /// Whether remat was allowed (--remat auto or on): then the least-memory plans use it.
  bool remat_allowed = true;
  /// The largest t the profile prices (1: none beyond). The least-memory programs split no layer
  /// (t = 1), so with t > 1 a plan may fit on fewer devices than `fewest` says.
  int max_tensor_parallel = 1;
  std::vector<FittingChange> changes;
  /// The time limit came before every change was checked (`changes` has those found before it).
  bool changes_stopped = false;
};

/// Searches what would make a plan fit. REQUIRES: SearchPlans(request) found no plan; `searched`,
/// when given, is what it returned (its least-memory plan on these devices, when it tried one
/// under the remat the report prices, is not computed again).
InfeasibleReport ExplainInfeasible(const SearchRequest& request, const SearchResult* searched = nullptr);

/// The report for people: the least memory (and on which rank, split into model state and
/// activations), the fewest devices, the changes that fit; nothing that would not change the answer.
std::string FormatInfeasible(const InfeasibleReport& report);

/// The same as JSON: {"fits": false, "memory_limit_bytes", "devices", "global_batch",
/// "least_memory_bytes", "least_memory_plan": {...}, "fewest_devices" (null when none),
/// "fewest_devices_plan": {..., "peak_memory_bytes", "step_time_ms"},
/// "changes": [{"flags", "note", "least_memory_bytes"}], "changes_stopped_by_time",
/// "fewest_devices_stopped_by_time"} (`plan --json` adds "search_stopped_by_time").
nlohmann::json InfeasibleJson(const InfeasibleReport& report);

}  // namespace gpipe
