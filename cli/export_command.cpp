// gpipe-plan export PLAN.json --format F: a plan in another tool's terms (PyTorch's schedule CSV
// and split points, Megatron-Core's layout).
#include <filesystem>
#include <ostream>

#include "api/answers.h"
#include "cli/commands.h"
#include "core/files.h"
#include "core/plan.h"
#include "core/schedule/pytorch_csv.h"
#include "core/schedule/validate.h"

namespace gpipe::cli {
namespace {

class ExportCommand : public Command {
 public:
  explicit ExportCommand(CLI::App& app) {
    app.add_option("PLAN", plan_path_, "A gpipe-plan/1 file (see docs/formats.md)")->required();
    app.add_option("--format", format_, "pytorch-csv or megatron-layout")
        ->required()
        ->check(CLI::IsMember({"pytorch-csv", "megatron-layout"}));
    app.add_option("-o,--output", output_path_, "Write here instead of standard output");
    app.add_flag("--with-communication", with_communication_,
                 "pytorch-csv: the schedule with its sends and receives (PyTorch's \"compute_comms\"), "
                 "as our executor runs it; without it, compute actions only and PyTorch adds its own");
    app.add_option("--stages", stages_path_,
                   "pytorch-csv: write the split points (layers per stage, K, M, the PyTorch class) here; "
                   "default: next to -o as NAME.stages.json");
    app.footer(
        "Examples:\n"
        "  gpipe-plan export PLAN.json --format pytorch-csv -o schedule.csv\n"
        "      schedule.csv: one row per rank, e.g. 0F0,0F1,0I0,0W0 (load it with\n"
        "      torch.distributed.pipelining's _PipelineScheduleRuntime._load_csv); schedule.stages.json:\n"
        "      each stage's rank and layer range, M and the PyTorch schedule class\n"
        "  gpipe-plan export PLAN.json --format pytorch-csv --with-communication -o schedule.csv\n"
        "  gpipe-plan export PLAN.json --format megatron-layout\n"
        "      --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout \"Et*5|t*5L\"\n"
        "'gpipe-plan simulate --schedule-csv S.csv PLAN.json' reads such a CSV back (yours or PyTorch's).");
  }

  int Run(std::ostream& out, std::ostream& err) override {
    Expected<Plan> plan = LoadPlan(plan_path_);
    if (!plan.ok()) return Fail(err, "export", plan.status());
    Expected<std::string> text = api::ExportAnswer(*plan, format_, with_communication_);
    if (!text.ok()) return Fail(err, "export", text.status().WithContext(plan_path_));
    if (format_ == "pytorch-csv") {
      std::string stages_path = stages_path_;
      if (stages_path.empty() && !output_path_.empty()) {
        stages_path = std::filesystem::path(output_path_).replace_extension(".stages.json").string();
      }
      if (!stages_path.empty()) {
        const Status written =
            WriteFileAtomically(stages_path, PytorchStagesJson(*plan, with_communication_).dump(2) + "\n");
        if (!written.ok()) return Fail(err, "export", written);
        err << "split points written to " << stages_path << "\n";
      }
    }
    if (output_path_.empty()) {
      out << *text;
      return kExitOk;
    }
    const Status written = WriteFileAtomically(output_path_, *text);
    if (!written.ok()) return Fail(err, "export", written);
    err << format_ << " written to " << output_path_ << "\n";
    return kExitOk;
  }

 private:
  std::string plan_path_, format_, output_path_, stages_path_;
  bool with_communication_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeExportCommand(CLI::App& app) { return std::make_unique<ExportCommand>(app); }

}  // namespace gpipe::cli
