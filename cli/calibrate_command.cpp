// gpipe-plan calibrate RUN.json... -o CLUSTER.json: fit what the profile cannot know from run
// records and write the cluster with it; judge the fit on other runs.
#include <algorithm>
#include <cmath>
#include <ostream>

#include "cli/commands.h"
#include "compare/calibrate.h"
#include "compare/compare.h"
#include "core/files.h"
#include "core/text.h"

namespace gpipe::cli {
namespace {

class CalibrateCommand : public Command {
 public:
  explicit CalibrateCommand(CLI::App& app) {
    app.add_option("RUN", record_paths_, "Run records to fit (gpipe-run/1; each names its plan)")->required();
    app.add_option("-o,--output", output_path_, "Write the calibrated cluster (gpipe-cluster/1) here")->required();
    app.add_option("--cluster", cluster_path_, "The cluster to calibrate (default: the first run's plan's)");
    app.add_option("--judge", judge_paths_, "Run records left out of the fit, to judge it on");
    app.footer(
        "Examples:\n"
        "  gpipe-plan calibrate runs/k1-m2.json runs/k2-m8.json -o calibrated.json --judge runs/k2-m4.json\n"
        "  gpipe-plan plan --profile P.json --cluster calibrated.json --global-batch 64\n"
        "Fits, by least squares on the records' action times (first steps left out): the slowdown of compute when\n"
        "several ranks share a node, an overhead per forward and backward, the time a send occupies its rank,\n"
        "the link's latency and bandwidth as the executor sees them, and the time after a rank's last action\n"
        "(optimizer step) per GiB of its parameters. The cluster written holds them under \"calibration\".");
  }

  int Run(std::ostream& out, std::ostream& err) override {
    std::vector<CalibrationRun> runs;
    for (const std::string& path : record_paths_) {
      Expected<CalibrationRun> run = LoadCalibrationRun(path);
      if (!run.ok()) return Fail(err, "calibrate", run.status());
      runs.push_back(std::move(*run));
    }
    Cluster base = runs.front().plan.cluster;
    if (!cluster_path_.empty()) {
      Expected<Cluster> loaded = LoadCluster(cluster_path_);
      if (!loaded.ok()) return Fail(err, "calibrate", loaded.status());
      base = *loaded;
    }
    base.calibration.reset();
    for (CalibrationRun& run : runs) run.plan.cluster = base;
    Expected<CalibrationFit> fit = FitCalibration(runs);
    if (!fit.ok()) return Fail(err, "calibrate", fit.status());
    const Cluster calibrated = ApplyCalibration(base, *fit);
    const Status written = WriteFileAtomically(output_path_, ClusterToJson(calibrated).dump(2) + "\n");
    if (!written.ok()) return Fail(err, "calibrate", written);
    out << "fitted from " << runs.size() << " run record" << (runs.size() == 1 ? "" : "s") << ":\n";
    for (const std::string& note : fit->notes) out << "  " << note << "\n";
    out << "\n";
    Status judged = Judge("fitted on (in sample)", record_paths_, calibrated, out);
    if (judged.ok() && !judge_paths_.empty()) judged = Judge("held out", judge_paths_, calibrated, out);
    if (!judged.ok()) return Fail(err, "calibrate", judged);
    out << "calibrated cluster written to " << output_path_ << "\n";
    return kExitOk;
  }

 private:
  // Prints each run's predicted (on `cluster`) and measured step, and the errors' summary.
  static Status Judge(const char* what, const std::vector<std::string>& paths, const Cluster& cluster, std::ostream& out) {
    out << what << ":\n";
    std::vector<double> errors;
    for (const std::string& path : paths) {
      Expected<CalibrationRun> run = LoadCalibrationRun(path, "", &cluster);
      if (!run.ok()) return run.status();
      Expected<Comparison> c = Compare(run->plan, run->record);
      if (!c.ok()) return c.status().WithContext(path);
      errors.push_back(std::abs(c->StepError()));
      out << Sprintf("  %-40s predicted %9.2f ms  measured %9.2f ms  error %+6.1f%%  peak memory %+6.1f%%\n", path.c_str(),
                     c->predicted_step_ms, c->measured_step_ms, 100 * c->StepError(), 100 * c->PeakMemoryError());
    }
    out << Sprintf("  median |error| %.1f%%, largest %.1f%%\n\n", 100 * Median(errors),
                   100 * *std::max_element(errors.begin(), errors.end()));
    return Status::Ok();
  }

  std::vector<std::string> record_paths_, judge_paths_;
  std::string output_path_, cluster_path_;
};

}  // namespace

std::unique_ptr<Command> MakeCalibrateCommand(CLI::App& app) { return std::make_unique<CalibrateCommand>(app); }

}  // namespace gpipe::cli
