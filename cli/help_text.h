// What `--help` shows for each flag: a plain value name (N, NUMBER, TEXT, FILE...), the allowed
// range or choices in words, and the default, so that no flag's default is left to guess and no
// CLI11 type label ("INT:INT in [1 - 1024]", "FLOAT:INT") reaches the user.
#pragma once

#include <CLI/CLI.hpp>

namespace gpipe::cli {

/// Rewrites every option of `app` (not its subcommands): the value name becomes N (whole
/// numbers), NUMBER or TEXT; a range check reads "(1 to 1024)" or "(at least 1)" and a set of
/// choices "(one of cpu, cuda)" at the end of the description; a default that the flag's variable
/// holds is added as "[default: 10]". Checks themselves are unchanged.
void TidyHelp(CLI::App& app);

}  // namespace gpipe::cli
