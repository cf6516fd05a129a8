// The real wire: torch's c10d. Ranks meet at a TCPStore that rank 0 serves on
// master_addr:master_port; Gloo carries CPU tensors, NCCL GPU tensors (when built with CUDA).
// Sub-groups for data-parallel sums are made on first use, by every member at the same point.
// Point-to-point messages travel in two process groups, one for messages to higher ranks and one
// for messages to lower ranks. NCCL needs this: it runs a pair's sends and receives of one group
// in issue order, both directions in one queue, so with one group a receive posted ahead of a
// send could wait for the peer's receive posted ahead of its own send (core/schedule/wire.h
// proves the two-group design). On Gloo it is faster: each direction gets its own connection and
// lock (c10d_communicator.cpp). A wait on NCCL makes the current stream wait and returns (no
// host polling); Gloo's waits block the host with the run's timeout.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/status.h"
#include "executor/communicator.h"

namespace gpipe::executor {

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int rank = 0;
  int world_size = 1;
  /// Every wait (rendezvous, receive, sum) gives up after this long with an error.
  std::chrono::milliseconds timeout{60000};
  /// NCCL for GPU ranks, else Gloo.
  bool nccl = false;
  /// The GPU this rank is bound to (NCCL barriers run there).
  int device_index = 0;
};

/// The rendezvous of a process started by a launcher, torchrun or SLURM (see WorkerEnv).
RendezvousOptions RendezvousFor(int rank, int world_size, const std::string& master_addr, int master_port,
                                std::chrono::milliseconds timeout, bool nccl);

/// Joins the job; errors say who did not come and where it was waited for.
Expected<std::unique_ptr<Communicator>> ConnectC10d(const RendezvousOptions& options);

/// True when this build can use NCCL (LibTorch with CUDA).
bool NcclCompiledIn();

}  // namespace gpipe::executor
