// Running a plan: one rank of a multi-process job (RunWorker, what every process started by the
// launcher, torchrun or SLURM does), or every rank as a thread of this process over the in-process
// wire (TrainInProcess, for tests and quick checks). Both check the plan against the model first.
#pragma once

#include <chrono>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/model.h"
#include "core/plan.h"
#include "core/run_record.h"
#include "core/schedule/schedule.h"
#include "core/status.h"
#include "executor/trainer.h"

namespace gpipe::executor {

/// Where this process sits in the job, from torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
/// MASTER_ADDR, MASTER_PORT) or SLURM's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID).
struct WorkerEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  /// The variable local_rank came from: "LOCAL_RANK" (torchrun) or "SLURM_LOCALID" (SLURM);
  /// empty when neither was set and local_rank is the default 0.
  std::string local_rank_var;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};
/// nullopt when the environment names no job (then the caller launches one).
Expected<std::optional<WorkerEnv>> WorkerEnvFrom(const std::map<std::string, std::string>& env);

/// The CUDA device a rank binds, before its process group exists: its local rank, which must be
/// below the number of GPUs this process sees (`device_count`). Otherwise the error names
/// `local_var_name` (LOCAL_RANK or SLURM_LOCALID) and CUDA_VISIBLE_DEVICES (its value when set,
/// `cuda_visible_devices`) and says how to fix the binding. Pure, so it is tested without a GPU.
Expected<int> CudaDeviceForLocalRank(int local_rank, int device_count, const std::string& local_var_name,
                                     const std::optional<std::string>& cuda_visible_devices = std::nullopt);

/// The ProcessGroupNCCL environment defaults a CUDA rank sets before its process group exists, so
/// that a timed-out collective surfaces as this program's own timeout error (--timeout: the end of
/// a step waits that long for the GPU) rather than the NCCL watchdog tearing the process down first. Only variables absent
/// from `env` are returned (a user's own setting wins); the caller sets them with overwrite=0.
/// worker.cpp documents each choice against the torch headers.
std::vector<std::pair<std::string, std::string>> NcclEnvironmentDefaults(
    std::chrono::milliseconds timeout, const std::map<std::string, std::string>& env);

/// For a rank of a `--device cuda` job, before its process group exists: binds the GPU its local
/// rank names (CudaDeviceForLocalRank over the GPUs this process sees) and sets NCCL's environment
/// defaults for `timeout` (NcclEnvironmentDefaults). Returns the bound device's index.
Expected<int> BindCudaRank(const WorkerEnv& env, std::chrono::milliseconds timeout);

struct RunSettings {
  int steps = 10;
  int threads_per_rank = 1;
  /// "cpu", or "cuda" (each rank on the GPU its local rank numbers, bound before the process
  /// group is created; NCCL on the wire).
  std::string device = "cpu";
  std::chrono::milliseconds timeout{60000};
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  bool resume = false;
  /// TrainOptions::init_weights and save_weights.
  std::string init_weights;
  std::string save_weights;
  /// TrainOptions::eval_every and eval_batches.
  int eval_every = 0;
  int eval_batches = 1;
  /// For TrainInProcess: "exact" (tags matched exactly, LocalHub) or "nccl" (NCCL's rules,
  /// NcclHub with one queue per pair and direction, as the executor's two NCCL groups).
  std::string wire = "exact";
  /// Tests only: the NCCL wire's queues and the executor's posting, to show the design before
  /// lanes (one queue per pair, receives in the receiver's order) deadlocks.
  NcclQueues nccl_queues = NcclQueues::kPerDirection;
  WirePosting posting = WirePosting::kAheadInSenderOrder;
  /// Tests only: TrainOptions::inject_inf.
  std::optional<std::pair<int, int>> inject_inf;
};

/// The checks before any rank starts: the model's layers match the plan's profile, the batch
/// splits, and the plan's schedule builds; returns that schedule (lowered, as ranks walk it).
/// `world_size` (when > 0) must be K x D.
Expected<Schedule> CheckRunnable(const Plan& plan, const ModelSpec& model, int world_size);

/// Trains this process's rank; rank 0 returns the merged record, the others nullopt. Progress
/// lines go to `progress` from the rank that holds the last stage of replica 0.
Expected<std::optional<RunRecord>> RunWorker(const Plan& plan, const ModelSpec& model, const WorkerEnv& env,
                                             const RunSettings& settings, std::ostream& progress);

/// Every rank of the plan as a thread of this process, over the in-process wire `settings.wire`
/// (each thread one intra-op thread), on the CPU or all on GPU 0. `outcomes`, when given, receives each rank's outcome (with its parameters).
Expected<RunRecord> TrainInProcess(const Plan& plan, const ModelSpec& model, const RunSettings& settings,
                                   std::vector<RankOutcome>* outcomes = nullptr);

}  // namespace gpipe::executor
