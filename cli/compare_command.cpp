// gpipe-plan compare PLAN.json RUN.json: the simulator's prediction of a plan next to a run of it.
#include <ostream>

#include "cli/commands.h"
#include "cli/pictures.h"
#include "compare/calibrate.h"
#include "compare/compare.h"
#include "core/cluster.h"

namespace gpipe::cli {
namespace {

class CompareCommand : public Command {
 public:
  explicit CompareCommand(CLI::App& app) {
    app.add_option("PLAN", plan_path_, "The gpipe-plan/1 file that ran")->required();
    app.add_option("RUN", record_path_, "Its run record (gpipe-run/1, from 'gpipe-plan run --record')")->required();
    app.add_option("--cluster", cluster_path_, "Predict on this cluster file instead of the plan's (e.g. a calibrated one)");
    app.add_flag("--json", json_, "Print one JSON object instead of the tables");
    pictures_.Add(app, "the predicted step above the measured one (lanes 'sim r' and 'run r')");
    app.footer(
        "Examples:\n"
        "  gpipe-plan compare build/tiny-gpt-plan.json build/tiny-gpt-run.json --svg both.svg --trace both.json\n"
        "  gpipe-plan compare PLAN.json RUN.json --cluster calibrated.json --json\n"
        "Measured figures are medians over the record's steps after the first (the samples/s that 'run'\n"
        "prints). Errors are (predicted - measured) / measured, differences predicted - measured: negative\n"
        "when the prediction is too low. The bubble is the pipeline's fill, drain and waits (0 for one rank);\n"
        "idle is all time not computing. The findings say which part of the difference comes from compute\n"
        "(a slow stage), waiting (a slow link or peer), sends, gaps between actions, and the work after the\n"
        "last action (optimizer step); 'gpipe-plan calibrate' fits them.");
  }

  int Run(std::ostream& out, std::ostream& err) override {
    Cluster cluster;
    if (!cluster_path_.empty()) {
      Expected<Cluster> loaded = LoadCluster(cluster_path_);
      if (!loaded.ok()) return Fail(err, "compare", loaded.status());
      cluster = *loaded;
    }
    Expected<CalibrationRun> run = LoadCalibrationRun(record_path_, plan_path_, cluster_path_.empty() ? nullptr : &cluster);
    if (!run.ok()) return Fail(err, "compare", run.status());
    Expected<Comparison> c = Compare(run->plan, run->record);
    if (!c.ok()) return Fail(err, "compare", c.status().WithContext(record_path_));
    const Status written = pictures_.Write(StackTimelines(c->predicted, "sim", c->measured, "run", c->title));
    if (!written.ok()) return Fail(err, "compare", written);
    if (json_) {
      out << ComparisonToJson(*c).dump(2) << "\n";
      return kExitOk;
    }
    out << ComparisonTable(*c);
    if (!pictures_.svg_path.empty()) out << "both timelines drawn in " << pictures_.svg_path << "\n";
    if (!pictures_.trace_path.empty()) out << "both timelines written to " << pictures_.trace_path << " (Perfetto)\n";
    return kExitOk;
  }

 private:
  std::string plan_path_, record_path_, cluster_path_;
  bool json_ = false;
  PictureFlags pictures_;
};

}  // namespace

std::unique_ptr<Command> MakeCompareCommand(CLI::App& app) { return std::make_unique<CompareCommand>(app); }

}  // namespace gpipe::cli
