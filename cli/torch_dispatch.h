// The subcommands that need LibTorch (run, profile, profile-links, validate) live in a second
// binary, gpipe-plan-torch, next to gpipe-plan; gpipe-plan itself links no LibTorch, so --help,
// plan, simulate, compare, calibrate and export start in milliseconds. For those subcommands
// gpipe-plan replaces itself (execv) with gpipe-plan-torch and the same arguments; the ranks of
// `run` are started from gpipe-plan-torch.
#pragma once

#include <iosfwd>
#include <string>

namespace gpipe::cli {

/// Whether `command` needs the executor or profiler.
bool NeedsTorch(const std::string& command);

/// Where gpipe-plan-torch is: $GPIPE_PLAN_TORCH when set, else beside this executable.
std::string TorchBinaryPath();

/// When argv[1] names a subcommand that needs LibTorch: execs gpipe-plan-torch with the same
/// arguments (no return on success), or writes one line saying what is missing and returns
/// kExitFailure. Returns -1 (nothing done) for every other subcommand.
int DispatchToTorchBinary(int argc, char** argv, std::ostream& err);

}  // namespace gpipe::cli
