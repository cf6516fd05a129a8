// Planning and running here, as `validate` and the profiler's pipeline probe do: a plan written
// from a search request, and a plan run for real by this program's `run` subcommand (one process
// per rank), its record read back with the plan.
//
// RunPlanHere starts the current program: REQUIRES the caller is the gpipe-plan binary.
#pragma once

#include <iosfwd>
#include <string>

#include "compare/calibrate.h"
#include "core/status.h"
#include "planner/search.h"

namespace gpipe {

/// Plans `request` and writes `<stem>.plan.json`; returns its path. Fails when no plan fits.
Expected<std::string> WritePlan(const SearchRequest& request, const std::string& stem);

/// Runs the plan at `plan_path` on `model_path` for `steps` steps, one thread per rank, and reads
/// back `<stem>.run.json`; the ranks' output goes to `<stem>.log`, which a failure names.
Expected<CalibrationRun> RunPlanHere(const std::string& plan_path, const std::string& model_path, int steps,
                                     const std::string& stem, std::ostream& progress);

}  // namespace gpipe
