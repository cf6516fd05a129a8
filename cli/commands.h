// The subcommands of gpipe-plan, as one table. Each entry names a subcommand, and its factory adds
// the subcommand's flags to a CLI11 app and returns the object those flags fill; Run() then does
// the work. cli/ holds no logic of its own: each command reads its flags, calls into planner/,
// simulator/, compare/ or executor/ and prints.
#pragma once

#include <iosfwd>
#include <memory>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace gpipe::cli {

/// Exit codes, the same for every subcommand:
///   0 success;
///   1 an input file is wrong (one line naming the file, the field and the value), nothing fits
///     (plan: no plan fits the memory; the report says what would), or the work itself failed
///     (a rank of `run` died, a measurement could not be taken);
///   2 the command line is wrong: an unknown subcommand or flag, a missing or malformed value, a
///     value out of range, or flags that do not go together (e.g. a batch that does not split
///     into --microbatches).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

/// Writes "gpipe-plan <command>: <message>" to `err`. Returns kExitUsage for a Usage status (and
/// points at `gpipe-plan <command> --help`), kExitFailure otherwise.
int Fail(std::ostream& err, const char* command, const Status& status);
/// What commands that need LibTorch say in a build without it.
inline constexpr const char* kNoExecutor =
    "this build has no executor: configure with -DGPIPE_WITH_TORCH=ON and CMAKE_PREFIX_PATH pointing at "
    "LibTorch (scripts/setup.sh does both)";

class Command {
 public:
  virtual ~Command() = default;
  /// Does the work after the flags were parsed; prints results to `out` and errors to `err`.
  virtual int Run(std::ostream& out, std::ostream& err) = 0;
};

struct CommandEntry {
  const char* name;
  const char* summary;
  /// Adds the flags to `app` (already named and described) and returns the command they fill.
  std::unique_ptr<Command> (*make)(CLI::App& app);
};

/// Every subcommand, in the order `--help` lists them.
const std::vector<CommandEntry>& Commands();

/// Parses argv, runs the chosen subcommand and returns the exit code.
int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

/// One factory per subcommand (each in its own file).
std::unique_ptr<Command> MakePlanCommand(CLI::App& app);
std::unique_ptr<Command> MakeSimulateCommand(CLI::App& app);
std::unique_ptr<Command> MakeRunCommand(CLI::App& app);
std::unique_ptr<Command> MakeProfileCommand(CLI::App& app);
std::unique_ptr<Command> MakeProfileLinksCommand(CLI::App& app);
std::unique_ptr<Command> MakeCompareCommand(CLI::App& app);
std::unique_ptr<Command> MakeCalibrateCommand(CLI::App& app);
std::unique_ptr<Command> MakeValidateCommand(CLI::App& app);
std::unique_ptr<Command> MakeExportCommand(CLI::App& app);

}  // namespace gpipe::cli
