// What `gpipe-plan plan` is asked, as one struct: the flags of the CLI and the keyword arguments of
// the Python API (gpipe_plan.plan) fill the same PlanOptions, and MakePlanRequest checks them and
// turns them into the search's request, so both ask the planner the same question and get the
// same one-line errors (naming the flag, e.g. "--memory: ...").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "planner/search.h"

namespace gpipe::api {

/// The search's default limit: it stops with the best plan and its gap so far. On the GPT-3 175B
/// profile at 1,024 A100s the full search took 25 s and reached the gap 5 s reach (12.9%).
inline constexpr double kDefaultTimeLimitS = 8;

/// One field per flag of `gpipe-plan plan` (its --help says what each does); unset: searched or
/// the default.
struct PlanOptions {
  int64_t global_batch = 0;
  std::optional<int> devices, stages, replicas, microbatches, chunks, tensor_parallel;
  /// "80GB", "74.5GiB", ... (core/units.h).
  std::optional<std::string> memory, schedule, placement, optimizer, precision;
  std::string remat = "auto";
  std::string sharded_optimizer = "auto";  // auto, on, off
  bool oversubscribe = false;
  int64_t max_nodes = 200'000;
  double time_limit_s = kDefaultTimeLimitS;  // 0: no limit
  double gap = 0;
};

/// The request for `profile` (read from `profile_where`, named in errors) on `cluster`. Errors
/// about the options are Usage errors naming the flag.
Expected<SearchRequest> MakePlanRequest(Profile profile, Cluster cluster, const std::string& profile_where,
                                        const PlanOptions& options);

/// The options that set the request's shape, as flags, e.g. "--global-batch 63 --stages 2
/// --microbatches 2" (added to the search's complaints about them).
std::string PinFlags(const PlanOptions& options);

}  // namespace gpipe::api
