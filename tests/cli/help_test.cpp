// What every subcommand's --help shows: plain value names (no CLI11 type labels such as
// "INT:INT in [1 - 1024]" or "FLOAT:INT"), every default of an optional flag, ranges and choices
// in words, and the exit codes on the top-level help.
#include <gtest/gtest.h>

#include <string>

#include "cli/commands.h"
#include "tests/cli/run_cli.h"

namespace gpipe::cli {
namespace {

TEST(Help, NoTypeLabelsInAnySubcommand) {
  for (const CommandEntry& entry : Commands()) {
    const Outcome o = Cli({entry.name, "--help"});
    EXPECT_EQ(o.code, kExitOk) << entry.name;
    for (const char* label : {"INT:", "FLOAT:", "TEXT:", "UINT:", " in [", "FLOAT ", " INT "}) {
      EXPECT_EQ(o.out.find(label), std::string::npos) << entry.name << " shows " << label << ":\n" << o.out;
    }
  }
}

TEST(Help, DefaultsRangesAndChoicesInWords) {
  struct Row {
    const char* command;
    const char* shown;
  };
  const Row rows[] = {
      {"plan", "--max-nodes N"},
      {"plan", "Partition-search budget per configuration [default: 200000]"},
      {"plan", "[default: auto]"},
      {"plan", "80GB (= 74.51 GiB, as cards are sold)"},
      {"run", "Training steps (one optimizer step per global batch) (at least 1) [default: "},
      {"run", "(one of cpu, cuda) [default: cpu]"},
      {"run", "--timeout NUMBER"},
      {"profile-links", "(2 to 65536)"},
      {"validate", "[default: 1,2]"},
  };
  for (const Row& row : rows) {
    const Outcome o = Cli({row.command, "--help"});
    EXPECT_NE(o.out.find(row.shown), std::string::npos) << row.command << " --help lacks " << row.shown << ":\n" << o.out;
  }
}

TEST(Help, TopLevelStatesTheExitCodes) {
  const Outcome o = Cli({"--help"});
  EXPECT_EQ(o.code, kExitOk);
  EXPECT_NE(o.out.find("Exit codes: 0 success; 1 an input file is wrong, nothing fits (plan), or the work failed; 2"),
            std::string::npos)
      << o.out;
}

}  // namespace
}  // namespace gpipe::cli
