// Bad command lines a user really types, one row each: the arguments, the exit code and the exact
// error gpipe-plan prints. The exit codes mean one thing for every subcommand (cli/commands.h):
//   1: an input file is wrong (one line naming the file, the field and the value), or nothing fits;
//   2: the command line is wrong (an unknown subcommand or flag, a missing or malformed value, a
//      value out of range, flags that do not go together): the error and a pointer to --help.
// Every row fails before any planning or simulating starts, except "nothing fits", which prints
// its report on stdout and nothing on stderr. In the arguments and the error, {source} stands for
// the repository's folder.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/commands.h"
#include "tests/cli/run_cli.h"

namespace gpipe::cli {
namespace {

const std::string kSource = GPIPE_SOURCE_DIR;

std::string Expand(std::string text) {
  for (size_t at = text.find("{source}"); at != std::string::npos; at = text.find("{source}")) {
    text.replace(at, 8, kSource);
  }
  return text;
}

struct Row {
  std::vector<std::string> args;
  int code;
  const char* error;
};

// `plan` on the tiny GPT's profile and the two-CPU cluster, with `more` flags.
std::vector<std::string> Plan(std::vector<std::string> more) {
  std::vector<std::string> args = {"plan", "--profile", "{source}/profiles/tiny-gpt-cpu.json", "--cluster",
                                   "{source}/profiles/clusters/cpu-2.json", "-q"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// clang-format off
const Row kRows[] = {
    {Plan({"--global-batch", "64", "--schedule", "1fb1"}), kExitUsage,
     "gpipe-plan plan: --schedule: unknown schedule \"1fb1\"; known: gpipe, 1f1b, interleaved-1f1b, zb-h1, interleaved-zb, zb-v, dualpipe-v; did you mean \"1f1b\"?\n(run 'gpipe-plan plan --help' for usage)\n"},
    {Plan({"--global-batch", "64", "--schedule", "ZB-H1"}), kExitUsage,
     "gpipe-plan plan: --schedule: unknown schedule \"ZB-H1\"; known: gpipe, 1f1b, interleaved-1f1b, zb-h1, interleaved-zb, zb-v, dualpipe-v; did you mean \"zb-h1\"?\n(run 'gpipe-plan plan --help' for usage)\n"},
    {Plan({"--global-batch", "0"}), kExitUsage, "gpipe-plan plan: --global-batch: must be at least 1, got 0\n(run 'gpipe-plan plan --help' for usage)\n"},
    {Plan({"--global-batch", "63", "--microbatches", "2", "--stages", "2"}), kExitUsage,
     "gpipe-plan plan: --global-batch 63 --stages 2 --microbatches 2: the global batch 63 does not split into D x M = 1 x 2 "
     "micro-batches of whole samples; use a multiple of 2\n(run 'gpipe-plan plan --help' for usage)\n"},
    {Plan({"--global-batch", "64", "--stages", "3", "--schedule", "gpipe"}), kExitUsage,
     "gpipe-plan plan: --global-batch 64 --stages 3 --schedule gpipe: K x D = 3 ranks x 1 replicas = 3 devices is more than "
     "the cluster's 2\n(run 'gpipe-plan plan --help' for usage)\n"},
    {Plan({"--global-batch", "64", "--memory", "80XB"}), kExitUsage,
     "gpipe-plan plan: --memory: \"80XB\" is not a byte size; write a number with an optional suffix: B, KiB, MiB, GiB, "
     "TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. 80GiB\n(run 'gpipe-plan plan --help' for usage)\n"},
    {Plan({"--global-batch", "64", "--memory", "0"}), kExitUsage, "gpipe-plan plan: --memory: must be more than 0\n(run 'gpipe-plan plan --help' for usage)\n"},
    {Plan({"--global-batch", "64", "--stages", "0"}), kExitUsage, "gpipe-plan plan: --stages: must be at least 1, got 0\n(run 'gpipe-plan plan --help' for usage)\n"},
    {Plan({"--global-batch", "64", "--devices", "0"}), kExitUsage, "gpipe-plan plan: --devices: must be at least 1, got 0\n(run 'gpipe-plan plan --help' for usage)\n"},
    {Plan({"--global-batch", "64", "--chunks", "0"}), kExitUsage, "gpipe-plan plan: --chunks: must be at least 1, got 0\n(run 'gpipe-plan plan --help' for usage)\n"},
    {Plan({"--global-batch", "64", "--max-nodes", "0"}), kExitUsage, "gpipe-plan plan: --max-nodes: must be at least 1\n(run 'gpipe-plan plan --help' for usage)\n"},
    {Plan({"--global-batch", "64", "--remat", "yes"}), kExitUsage,
     "gpipe-plan plan: --remat: unknown remat policy \"yes\"; known: off, on, auto, stages\n(run 'gpipe-plan plan --help' for usage)\n"},
    {Plan({"--global-batch", "64", "--optimizer", "adamw"}), kExitUsage,
     "gpipe-plan plan: --optimizer: unknown optimizer \"adamw\"; known: sgd, momentum, adam, adam-mixed; did you mean \"adam\"?\n(run 'gpipe-plan plan --help' for usage)\n"},
    {Plan({"--global-batch", "64", "--placement", "replica_major"}), kExitUsage,
     "gpipe-plan plan: --placement: unknown placement \"replica_major\"; known: pipeline-major, replica-major; did you mean "
     "\"replica-major\"?\n(run 'gpipe-plan plan --help' for usage)\n"},
    {Plan({"--global-batch", "64", "--stages", "two"}), kExitUsage,
     "gpipe-plan: Could not convert: --stages = two\n(run 'gpipe-plan --help' for usage)\n"},
    {{"plan", "--profile", "{source}/profiles/tiny-gpt-cpu.json", "--global-batch", "64"}, kExitUsage,
     "gpipe-plan: --cluster is required\n(run 'gpipe-plan --help' for usage)\n"},
    {{"plan", "--profile", "{source}/profiles/clusters/cpu-2.json", "--cluster", "{source}/profiles/clusters/cpu-2.json",
      "--global-batch", "64"}, kExitFailure,
     "gpipe-plan plan: {source}/profiles/clusters/cpu-2.json.format: is \"gpipe-cluster/1\", a cluster, not a profile "
     "(\"gpipe-profile/1\"); is it the wrong file?\n"},
    {{"simulate", "{source}/profiles/tiny-gpt-cpu.json"}, kExitFailure,
     "gpipe-plan simulate: {source}/profiles/tiny-gpt-cpu.json.format: is \"gpipe-profile/1\", a profile, not a plan "
     "(\"gpipe-plan/1\"); is it the wrong file?\n"},
    {{"simulate", "{source}/profiles/plans/no-such-plan.json"}, kExitFailure,
     "gpipe-plan simulate: {source}/profiles/plans/no-such-plan.json: cannot open the file (does it exist and is it "
     "readable?)\n"},
    {{"simulate", "{source}/profiles/plans"}, kExitFailure,
     "gpipe-plan simulate: {source}/profiles/plans: is a directory; give the path of a JSON file\n"},
    {{"simulate"}, kExitUsage, "gpipe-plan: PLAN is required\n(run 'gpipe-plan --help' for usage)\n"},
    {Plan({"--global-batch", "64", "--memory", "80"}), kExitUsage,
     "gpipe-plan plan: --memory: 80 is 80 bytes, less than 64 KiB; a bare number is bytes: did you mean 80GiB? (or MiB, "
     "GB, ...)\n(run 'gpipe-plan plan --help' for usage)\n"},
    {{"simulat", "plan.json"}, kExitUsage,
     "gpipe-plan: unknown subcommand \"simulat\"; known: plan, simulate, run, profile, profile-links, compare, calibrate, "
     "validate, export; did you mean \"simulate\"?\n(run 'gpipe-plan --help' for usage)\n"},
    {{"plan.json"}, kExitUsage,
     "gpipe-plan: unknown subcommand \"plan.json\"; known: plan, simulate, run, profile, profile-links, compare, "
     "calibrate, validate, export\n(run 'gpipe-plan --help' for usage)\n"},
    // Flags that need one another: a command-line error in every subcommand, LibTorch or not.
    {{"run", "{source}/profiles/plans/tiny-gpt-gpipe.json", "--model", "{source}/models/tiny-gpt.json",
      "--checkpoint-every", "5"}, kExitUsage,
     "gpipe-plan run: --checkpoint-every needs --checkpoint-dir\n(run 'gpipe-plan run --help' for usage)\n"},
    {{"run", "{source}/profiles/plans/tiny-gpt-gpipe.json", "--model", "{source}/models/tiny-gpt.json",
      "--steps", "0"}, kExitUsage,
     "gpipe-plan: --steps: Value 0 not in range 1 to 1073741824\n(run 'gpipe-plan --help' for usage)\n"},
    {{"compare", "{source}/profiles/plans/tiny-gpt-gpipe.json"}, kExitUsage,
     "gpipe-plan: RUN is required\n(run 'gpipe-plan --help' for usage)\n"},
    {{"compare", "{source}/profiles/plans/tiny-gpt-gpipe.json", "{source}/no-such-run.json"}, kExitFailure,
     "gpipe-plan compare: {source}/no-such-run.json: cannot open the file (does it exist and is it readable?)\n"},
    {{"calibrate", "{source}/no-such-run.json"}, kExitUsage,
     "gpipe-plan: --output is required\n(run 'gpipe-plan --help' for usage)\n"},
    {{"simulate", "{source}/profiles/plans/tiny-gpt-gpipe.json", "--svgg"}, kExitUsage,
     "gpipe-plan: The following argument was not expected: --svgg\n(run 'gpipe-plan --help' for usage)\n"},
    // Nothing fits: exit 1, the report (what would fit) on stdout, nothing on stderr.
    {Plan({"--global-batch", "64", "--memory", "1MiB"}), kExitFailure, ""},
};
// clang-format on

TEST(BadFlags, EachGetsItsExactError) {
  for (const Row& row : kRows) {
    std::vector<std::string> args;
    for (const std::string& arg : row.args) args.push_back(Expand(arg));
    const Outcome o = Cli(args);
    std::string line;
    for (const std::string& arg : args) line += " " + arg;
    EXPECT_EQ(o.code, row.code) << line;
    EXPECT_EQ(o.err, Expand(row.error)) << line;
  }
}

}  // namespace
}  // namespace gpipe::cli
