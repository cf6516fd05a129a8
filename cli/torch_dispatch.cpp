#include "cli/torch_dispatch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <vector>

#include "cli/commands.h"
#include "executor/launcher.h"

namespace gpipe::cli {

bool NeedsTorch(const std::string& command) {
  return command == "run" || command == "profile" || command == "profile-links" || command == "validate";
}

std::string TorchBinaryPath() {
  if (const char* path = std::getenv("GPIPE_PLAN_TORCH"); path != nullptr && *path != '\0') return path;
  const std::string self = executor::SelfExecutable();
  const size_t slash = self.rfind('/');
  return (slash == std::string::npos ? std::string() : self.substr(0, slash + 1)) + "gpipe-plan-torch";
}

int DispatchToTorchBinary(int argc, char** argv, std::ostream& err) {
  if (argc < 2 || !NeedsTorch(argv[1])) return -1;
  const std::string path = TorchBinaryPath();
  std::vector<char*> args(argv, argv + argc);
  args[0] = const_cast<char*>(path.c_str());
  args.push_back(nullptr);
  execv(path.c_str(), args.data());
  // Only on failure.
  const int error = errno;
  err << "gpipe-plan " << argv[1] << ": this subcommand needs the executor (LibTorch), in " << path << ", which "
      << (error == ENOENT ? "is not installed" : std::string("could not start: ") + std::strerror(error))
      << "; build with -DGPIPE_WITH_TORCH=ON (scripts/setup.sh does), or pip install gpipe-plan where torch is "
         "installed (plan, simulate, compare, calibrate and export need none of it)\n";
  return kExitFailure;
}

}  // namespace gpipe::cli
