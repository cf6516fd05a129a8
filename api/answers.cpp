#include "api/answers.h"

#include "core/megatron_layout.h"
#include "core/schedule/lower.h"
#include "core/schedule/pytorch_csv.h"
#include "core/schedule/validate.h"
#include "planner/infeasible.h"
#include "planner/report.h"
#include "simulator/cost_model.h"
#include "simulator/report.h"
#include "simulator/simulator.h"

namespace gpipe::api {

nlohmann::json PlanAnswer(const SearchRequest& request, const SearchResult& result) {
  if (result.best) return PlanReportJson(result);
  nlohmann::json report = InfeasibleJson(ExplainInfeasible(request, &result));
  // The search stopped at the time limit without a plan (the least-memory plan did not fit either).
  report["search_stopped_by_time"] = result.stopped_by_time;
  return report;
}

Expected<nlohmann::json> SimulateAnswer(const Plan& plan) {
  Expected<SimResult> result = SimulatePlan(plan, SimOptions{false});
  if (!result.ok()) return result.status();
  return SimResultToJson(plan, *result);
}

Expected<std::string> ExportAnswer(const Plan& plan, const std::string& format, bool with_communication) {
  if (format == "megatron-layout") {
    Expected<std::string> flags = MegatronFlags(plan);
    if (!flags.ok()) return flags.status();
    return *flags + "\n";
  }
  if (format != "pytorch-csv") {
    return Status::Usage("--format: \"" + format + "\" is not one of pytorch-csv, megatron-layout");
  }
  // Lowered, validated and dry-run; compute-only, the same order without its sends and receives.
  Expected<Schedule> schedule = BuildSchedule(plan);
  if (!schedule.ok()) return schedule.status();
  // With its sends and receives: each rank's receives posted in its peers' send order, as
  // PyTorch's runtime, which matches messages untagged, needs (lower.h).
  return ScheduleToPytorchCsv(with_communication ? PostReceivesInSendOrder(*schedule) : ComputeOnly(*schedule));
}

}  // namespace gpipe::api
