#include "cli/commands.h"

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "cli/help_text.h"
#include "core/suggest.h"

namespace gpipe::cli {

int Fail(std::ostream& err, const char* command, const Status& status) {
  err << "gpipe-plan " << command << ": " << status.message() << "\n";
  if (!status.usage()) return kExitFailure;
  err << "(run 'gpipe-plan " << command << " --help' for usage)\n";
  return kExitUsage;
}

const std::vector<CommandEntry>& Commands() {
  static const std::vector<CommandEntry> commands = {
      {"plan", "Find the fastest pipeline plan that fits in memory, and the alternatives", MakePlanCommand},
      {"simulate", "Predict a plan's step time, bubble and memory; draw its timeline", MakeSimulateCommand},
      {"run", "Train a model on a plan for real: one process per rank, LibTorch and c10d", MakeRunCommand},
      {"profile", "Measure each layer of a model on this device; write a profile for plan", MakeProfileCommand},
      {"profile-links", "Measure latency and bandwidth between ranks; write a cluster file", MakeProfileLinksCommand},
      {"compare", "Line up a plan's prediction with a run of it: where and why they differ", MakeCompareCommand},
      {"calibrate", "Fit overheads, links and compute slowdown from run records; write a cluster", MakeCalibrateCommand},
      {"validate", "Plan, run and compare a matrix of configurations here: how good the predictions are", MakeValidateCommand},
      {"export", "Write a plan as PyTorch's schedule CSV and split points, or as Megatron's layout", MakeExportCommand},
  };
  return commands;
}

int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"gpipe-plan: plan, simulate and run pipeline-parallel training (GPipe, 1F1B, "
               "interleaved 1F1B, ZB-H1, interleaved zero bubble, ZB-V, DualPipeV)", "gpipe-plan"};
  app.require_subcommand(1, 1);
  app.set_version_flag("--version", "gpipe-plan 0.1.0");
  app.footer(
      "Examples:\n"
      "  gpipe-plan plan --profile profiles/gpt3-13b-a100-80gb.json --cluster profiles/clusters/a100-80gb-8.json "
      "--global-batch 512 -o plan.json\n"
      "  gpipe-plan simulate plan.json --svg timeline.svg\n"
      "  gpipe-plan simulate profiles/plans/tiny-gpt-gpipe.json\n"
      "  gpipe-plan run build/tiny-gpt-plan.json --model models/tiny-gpt.json --steps 20 --record run.json\n"
      "  gpipe-plan simulate profiles/plans/gpt3-13b-8xa100-1f1b.json --svg timeline.svg --trace trace.json\n"
      "Run 'gpipe-plan SUBCOMMAND --help' for a subcommand's flags.\n"
      "Exit codes: 0 success; 1 an input file is wrong, nothing fits (plan), or the work failed; 2 the command\n"
      "line is wrong (unknown flag, bad or missing value, flags that do not go together).");
  std::vector<std::pair<CLI::App*, std::unique_ptr<Command>>> made;
  for (const CommandEntry& entry : Commands()) {
    CLI::App* sub = app.add_subcommand(entry.name, entry.summary);
    made.emplace_back(sub, entry.make(*sub));
    TidyHelp(*sub);
  }
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CommandEntry& entry : Commands()) names.emplace_back(entry.name);
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      err << "gpipe-plan: unknown subcommand \"" << argv[1] << "\"; known: " << ChoicesAndSuggestion(argv[1], names)
          << "\n(run 'gpipe-plan --help' for usage)\n";
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive as "errors" with exit code 0; CLI11 prints the help of the
    // subcommand that asked for it.
    if (e.get_exit_code() == 0) return app.exit(e, out, err);
    err << "gpipe-plan: " << e.what() << "\n(run 'gpipe-plan --help' for usage)\n";
    return kExitUsage;
  }
  for (auto& [sub, command] : made) {
    if (!sub->parsed()) continue;
    // Nothing aborts: an exception that escaped a command (LibTorch, TorchScript) is one line.
    try {
      return command->Run(out, err);
    } catch (const std::exception& e) {
      std::string what = e.what();
      // LibTorch appends a C++ stack trace; the user needs the message.
      for (const char* marker : {"\nException raised from", "\nframe #0"}) {
        if (const size_t at = what.find(marker); at != std::string::npos) what.resize(at);
      }
      err << "gpipe-plan " << sub->get_name() << ": " << what << "\n";
      return kExitFailure;
    }
  }
  err << "gpipe-plan: no subcommand given\n";
  return kExitUsage;
}

}  // namespace gpipe::cli
