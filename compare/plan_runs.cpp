#include "compare/plan_runs.h"

#include <filesystem>
#include <ostream>

#include "core/files.h"
#include "executor/launcher.h"
#include "planner/report.h"

namespace gpipe {

Expected<std::string> WritePlan(const SearchRequest& request, const std::string& stem) {
  Expected<SearchResult> result = SearchPlans(request);
  if (!result.ok()) return result.status();
  if (!result->best) return Status::Invalid("no plan fits the cluster's memory");
  const std::string plan_path = stem + ".plan.json";
  GPIPE_RETURN_IF_ERROR(WriteFileAtomically(plan_path, PlanReportJson(*result).dump(1) + "\n"));
  return plan_path;
}

Expected<CalibrationRun> RunPlanHere(const std::string& plan_path, const std::string& model_path, int steps,
                                     const std::string& stem, std::ostream& progress) {
  const std::string record_path = stem + ".run.json";
  Expected<Plan> plan = LoadPlan(plan_path);
  if (!plan.ok()) return plan.status();
  executor::LaunchOptions launch;
  launch.world_size = plan->num_ranks() * plan->replicas;
  launch.master_port = executor::FreeLoopbackPort();
  launch.argv = {executor::SelfExecutable(), "run", plan_path, "--model", model_path, "--steps",
                 std::to_string(steps), "--threads-per-rank", "1", "--record", record_path, "--timeout", "120"};
  launch.log_path = stem + ".log";
  std::error_code ec;
  std::filesystem::remove(record_path, ec);
  std::filesystem::remove(launch.log_path, ec);
  if (executor::LaunchRanks(launch, progress) != 0) {
    return Status::Invalid("the run failed; its ranks' output is in " + launch.log_path);
  }
  return LoadCalibrationRun(record_path, plan_path);
}

}  // namespace gpipe
