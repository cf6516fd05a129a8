// gpipe-plan: one binary, subcommands from cli/commands.cpp's table. Where the build has LibTorch,
// gpipe-plan links none of it and hands run, profile, profile-links and validate to
// gpipe-plan-torch (cli/torch_dispatch.h); gpipe-plan-torch is this same file without the hand-over.
#include <iostream>

#include "cli/commands.h"
#ifdef GPIPE_TORCH_DISPATCH
#include "cli/torch_dispatch.h"
#endif

int main(int argc, char** argv) {
#ifdef GPIPE_TORCH_DISPATCH
  if (const int code = gpipe::cli::DispatchToTorchBinary(argc, argv, std::cerr); code >= 0) return code;
#endif
  return gpipe::cli::RunCli(argc, argv, std::cout, std::cerr);
}
