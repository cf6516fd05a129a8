// A launcher like torchrun's: starts this node's ranks as child processes running `argv`, with
// the environment torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), and waits for them. It never leaves a rank behind: when one fails the others
// get SIGTERM after a grace period and SIGKILL after another; SIGINT/SIGTERM sent to the launcher
// go to every rank; a rank whose launcher dies gets SIGTERM from the kernel (PR_SET_PDEATHSIG).
// No LibTorch here.
#pragma once

#include <chrono>
#include <iosfwd>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gpipe::executor {

struct LaunchOptions {
  int nnodes = 1;
  int node_rank = 0;
  /// Ranks in the whole job; nnodes must divide it.
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  /// The command every rank runs: argv[0] is the program (e.g. /proc/self/exe).
  std::vector<std::string> argv;
  /// How long the other ranks get to stop on their own after one failed.
  std::chrono::milliseconds grace{10000};
  /// When set, the ranks' standard output and error go to this file (appended) instead of the
  /// launcher's.
  std::string log_path;
};

/// This process's environment as a map.
std::map<std::string, std::string> EnvironmentMap();
/// The path of this program (for starting ranks of it).
std::string SelfExecutable();

/// The ports the kernel hands out by itself (ip_local_port_range; Linux's default 32768-60999
/// where it cannot be read).
std::pair<int, int> EphemeralPorts();
/// The lowest port FreeLoopbackPort picks.
inline constexpr int kFirstRendezvousPort = 20000;
/// A TCP port free on loopback now, for a single-node job not given one: picked at random from
/// kFirstRendezvousPort to below EphemeralPorts() (where none is free or that range is too
/// narrow, one the kernel gives; 29500 if none is found).
int FreeLoopbackPort();

/// The environment a rank is started with, as NAME=value strings (added to the launcher's own).
std::vector<std::string> RankEnvironment(const LaunchOptions& options, int local_rank);

/// Runs this node's ranks to the end. Returns 0 when all succeed; otherwise the exit status of
/// the first rank that failed (128 + signal when killed), after writing one line per failed rank
/// to `err` ("rank 1 exited with status 1 (first to fail)"). The first to fail is the one whose
/// own error came first (RecordRankFailure), not the first to exit: a rank whose peer failed
/// only loses its connection, and may exit before the peer that caused it.
int LaunchRanks(const LaunchOptions& options, std::ostream& err);

/// Called by a rank that fails with its own error: notes the time (in the folder the launcher
/// names in GPIPE_FAILURE_DIR; nothing when it is not set). A rank's first note stands, so the
/// trainer notes an error where it catches it, before the rank's teardown closes the
/// connections whose loss its peers will note later.
void RecordRankFailure(int rank);

}  // namespace gpipe::executor
