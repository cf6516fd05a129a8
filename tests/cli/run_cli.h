// Runs gpipe-plan in-process, as a user would type it, and captures what it prints.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace gpipe::cli {

struct Outcome {
  int code;
  std::string out;
  std::string err;
};

/// `args` without the program name, e.g. {"simulate", "plan.json", "--json"}.
inline Outcome Cli(std::vector<std::string> args) {
  args.insert(args.begin(), "gpipe-plan");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = RunCli(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

}  // namespace gpipe::cli
