// libFuzzer target for gpipe-plan's command line: the input is split at NUL bytes into arguments
// and parsed by the same CLI11 app, with the same subcommand table, as `gpipe-plan` builds. Only the
// parsing runs (no subcommand's work: it would plan, simulate or write files). A parse either
// succeeds or throws CLI::ParseError; any other exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"gpipe-plan"};
  std::string current;
  for (size_t i = 0; i < size && args.size() < 64; ++i) {
    if (data[i] == 0) {
      args.push_back(std::move(current));
      current.clear();
    } else {
      current += static_cast<char>(data[i]);
    }
  }
  if (!current.empty()) args.push_back(std::move(current));
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());

  CLI::App app{"gpipe-plan", "gpipe-plan"};
  app.require_subcommand(1, 1);
  app.set_version_flag("--version", "gpipe-plan");
  std::vector<std::unique_ptr<gpipe::cli::Command>> made;
  for (const gpipe::cli::CommandEntry& entry : gpipe::cli::Commands()) {
    made.push_back(entry.make(*app.add_subcommand(entry.name, entry.summary)));
  }
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    // A usage error or --help/--version: what RunCli reports and exits on.
  }
  return 0;
}
