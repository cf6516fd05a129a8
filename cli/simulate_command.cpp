// gpipe-plan simulate PLAN.json: predict one training step of a plan.
#include <ostream>
#include <set>

#include "cli/commands.h"
#include "cli/pictures.h"
#include "core/files.h"
#include "core/plan.h"
#include "core/schedule/pytorch_csv.h"
#include "core/schedule/validate.h"
#include "simulator/cost_model.h"
#include "simulator/report.h"
#include "simulator/simulator.h"

namespace gpipe::cli {
namespace {

class SimulateCommand : public Command {
 public:
  explicit SimulateCommand(CLI::App& app) {
    app.add_option("PLAN", plan_path_, "A gpipe-plan/1 file (see docs/formats.md)")->required();
    app.add_flag("--json", json_, "Print one JSON object instead of the table");
    pictures_.Add(app, "the simulated timeline");
    app.add_flag("--print-schedule", print_schedule_, "Print each rank's action list (text form, e.g. 1F0)");
    app.add_option("--schedule-csv", schedule_csv_,
                   "Simulate this order instead of the plan's schedule: PyTorch's schedule CSV (one row per rank, "
                   "compute-only or with communication), checked against the plan's stages and M first");
    app.footer(
        "Examples:\n"
        "  gpipe-plan simulate profiles/plans/tiny-gpt-gpipe.json\n"
        "  gpipe-plan simulate profiles/plans/gpt3-13b-8xa100-1f1b.json --json\n"
        "  gpipe-plan simulate PLAN.json --svg timeline.svg --trace trace.json\n"
        "  gpipe-plan simulate PLAN.json --schedule-csv my_schedule.csv   (your own order, with the plan's times)\n"
        "The summary shows the step time, throughput, the bubble against GPipe's (K-1)/(M+K-1),\n"
        "and each rank's busy time and peak memory against the device's limit.");
  }

  int Run(std::ostream& out, std::ostream& err) override {
    Expected<Plan> plan = LoadPlan(plan_path_);
    if (!plan.ok()) return Fail(err, "simulate", plan.status());
    Expected<Schedule> schedule = schedule_csv_.empty() ? BuildSchedule(*plan) : LoadCsvSchedule(*plan, err);
    if (!schedule.ok()) {
      return Fail(err, "simulate", schedule.status().WithContext(schedule_csv_.empty() ? plan_path_ : schedule_csv_));
    }
    Expected<CostModel> costs = BuildCostModel(*plan);
    if (!costs.ok()) return Fail(err, "simulate", costs.status().WithContext(plan_path_));
    SimOptions options;
    options.record_timeline = pictures_.any();
    Expected<SimResult> result = Simulate(*schedule, *costs, options);
    if (!result.ok()) return Fail(err, "simulate", result.status());
    const Status written = pictures_.Write(TimelineFromSim(*result, PlanTitle(*plan, "simulated")));
    if (!written.ok()) return Fail(err, "simulate", written);
    if (json_) {
      out << SimResultToJson(*plan, *result).dump(2) << "\n";
    } else {
      out << FormatSimSummary(*plan, *costs, *result);
      if (!pictures_.trace_path.empty()) {
        out << "trace written to " << pictures_.trace_path << " (open in https://ui.perfetto.dev)\n";
      }
      if (!pictures_.svg_path.empty()) out << "timeline drawn in " << pictures_.svg_path << "\n";
    }
    if (print_schedule_) out << "\n" << ScheduleToText(*schedule);
    return kExitOk;
  }

 private:
  // The CSV's order on the plan's stages; zero-bubble actions need the profile's weight times.
  Expected<Schedule> LoadCsvSchedule(const Plan& plan, std::ostream& err) const {
    Expected<std::string> text = ReadTextFile(schedule_csv_, "a CSV file");
    if (!text.ok()) return text.status();
    Expected<PytorchCsvSchedule> csv = ScheduleFromPytorchCsv(*text, plan.num_stages(), plan.microbatches, schedule_csv_);
    if (!csv.ok()) return csv.status();
    std::set<int> split_stages;
    for (const auto& actions : csv->schedule.ranks) {
      for (const Action& a : actions) {
        if (a.op == Op::kBackwardInput || a.op == Op::kBackwardWeight) split_stages.insert(a.stage);
      }
    }
    for (int s : split_stages) {
      GPIPE_RETURN_IF_ERROR(CheckWeightTimes(plan.profile, plan.stages[s],
                                             "the CSV splits stage " + std::to_string(s) +
                                                 "'s backwards into I and W, which needs that time (the profiler "
                                                 "measures it)"));
    }
    if (csv->left_out > 0) {
      err << schedule_csv_ << ": " << csv->left_out
          << " UNSHARD/RESHARD/REDUCE_GRAD actions left out (the step's all-reduce is priced after the last action)\n";
    }
    return BuildSchedule(plan, csv->schedule);
  }

  std::string schedule_csv_;
  std::string plan_path_;
  PictureFlags pictures_;
  bool json_ = false;
  bool print_schedule_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeSimulateCommand(CLI::App& app) { return std::make_unique<SimulateCommand>(app); }

}  // namespace gpipe::cli
