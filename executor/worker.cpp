#include "executor/worker.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <ostream>
#include <thread>

#include "core/schedule/validate.h"
#include "core/text.h"
#include "executor/c10d_communicator.h"
#include "executor/host_memory.h"
#include "executor/launcher.h"
#include "executor/layers.h"
#include "executor/local_communicator.h"
#include "executor/nccl_emulation.h"

#ifdef GPIPE_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace gpipe::executor {
namespace {

Expected<int> IntFromEnv(const std::map<std::string, std::string>& env, const std::string& name, int min) {
  auto it = env.find(name);
  if (it == env.end()) return Status::Invalid("environment variable " + name + " is not set");
  try {
    size_t used = 0;
    const int value = std::stoi(it->second, &used);
    if (used != it->second.size() || value < min) throw std::invalid_argument(name);
    return value;
  } catch (const std::exception&) {
    return Status::Invalid("environment variable " + name + "=\"" + it->second + "\" is not a whole number >= " +
                           std::to_string(min));
  }
}

nlohmann::json OutcomeToJson(const RankOutcome& o) {
  nlohmann::json steps = nlohmann::json::array();
  for (const StepRecord& s : o.steps) steps.push_back(StepRecordToJson(s));
  return {{"record", RankRecordToJson(o.record)},
          {"steps", steps},
          {"has_last_stage", o.has_last_stage},
          {"memory_measure", o.memory_measure},
          {"clock", o.clock}};
}

Expected<RankOutcome> OutcomeFromJson(const std::string& text) {
  RankOutcome o;
  try {
    const nlohmann::json json = nlohmann::json::parse(text);
    Expected<RankRecord> record = RankRecordFromJson(json.at("record"), "rank record");
    if (!record.ok()) return record.status();
    o.record = std::move(*record);
    for (const nlohmann::json& s : json.at("steps")) {
      Expected<StepRecord> step = StepRecordFromJson(s, "rank record: steps");
      if (!step.ok()) return step.status();
      o.steps.push_back(*step);
    }
    o.has_last_stage = json.at("has_last_stage").get<bool>();
    o.memory_measure = json.at("memory_measure").get<std::string>();
    o.clock = json.at("clock").get<std::string>();
  } catch (const std::exception& e) {
    return Status::Invalid(std::string("a rank sent an unreadable record: ") + e.what());
  }
  return o;
}

// "step 3/10  loss 4.1234  lr 6.00e-04  grad norm 1.234  812.5 samples/s  2.1 s left"; fp16 adds the
// loss scale, and says when the step was skipped.
void PrintProgress(std::ostream& out, const StepRecord& step, int steps, int64_t batch, double* mean_ms, int* seen) {
  *mean_ms = (*mean_ms * *seen + step.time_ms) / (*seen + 1);
  ++*seen;
  std::string optimizer;
  if (step.learning_rate) optimizer += Sprintf("  lr %.2e", *step.learning_rate);
  if (step.grad_norm) optimizer += Sprintf("  grad norm %.4g", *step.grad_norm);
  if (step.eval_loss) optimizer += Sprintf("  eval loss %.4f", *step.eval_loss);
  if (step.loss_scale) optimizer += Sprintf("  loss scale %g", *step.loss_scale);
  if (step.skipped) optimizer += "  skipped (inf/nan gradients; loss scale halved)";
  out << Sprintf("step %d/%d  loss %.4f%s  %.1f samples/s  %.1f s left\n", step.step + 1, steps, step.loss,
                 optimizer.c_str(), static_cast<double>(batch) / (step.time_ms / 1000.0),
                 *mean_ms * (steps - step.step - 1) / 1000.0);
  out.flush();
}

// Makes `device` this process's current CUDA device (what ProcessGroupNCCL and the caching
// allocator take as the rank's GPU), before the process group exists.
Status BindCudaDevice(int device) {
#ifdef GPIPE_WITH_CUDA
  try {
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
  } catch (const std::exception& e) {
    return Status::Invalid("--device cuda: could not make GPU " + std::to_string(device) +
                           " this process's device: " + e.what());
  }
  return Status::Ok();
#else
  return Status::Invalid("--device cuda: this build has no CUDA LibTorch (GPU " + std::to_string(device) +
                         " cannot be bound); use --device cpu");
#endif
}

// What TrainRank needs of the run's settings (the device is each caller's own).
TrainOptions OptionsFrom(const RunSettings& settings) {
  TrainOptions options;
  options.steps = settings.steps;
  options.checkpoint_dir = settings.checkpoint_dir;
  options.checkpoint_every = settings.checkpoint_every;
  options.resume = settings.resume;
  options.init_weights = settings.init_weights;
  options.save_weights = settings.save_weights;
  options.eval_every = settings.eval_every;
  options.eval_batches = settings.eval_batches;
  options.inject_inf = settings.inject_inf;
  options.posting = settings.posting;
  options.timeout = settings.timeout;
  return options;
}

}  // namespace

Expected<std::optional<WorkerEnv>> WorkerEnvFrom(const std::map<std::string, std::string>& env) {
  WorkerEnv w;
  const bool torchrun = env.count("RANK") > 0 && env.count("WORLD_SIZE") > 0;
  const bool slurm = env.count("SLURM_PROCID") > 0 && env.count("SLURM_NTASKS") > 0;
  if (!torchrun && !slurm) return std::optional<WorkerEnv>();
  const std::string rank_var = torchrun ? "RANK" : "SLURM_PROCID";
  const std::string size_var = torchrun ? "WORLD_SIZE" : "SLURM_NTASKS";
  const std::string local_var = torchrun ? "LOCAL_RANK" : "SLURM_LOCALID";
  Expected<int> rank = IntFromEnv(env, rank_var, 0);
  if (!rank.ok()) return rank.status();
  Expected<int> size = IntFromEnv(env, size_var, 1);
  if (!size.ok()) return size.status();
  if (*rank >= *size) {
    return Status::Invalid(rank_var + "=" + std::to_string(*rank) + " is not below " + size_var + "=" +
                           std::to_string(*size));
  }
  w.rank = *rank;
  w.world_size = *size;
  if (env.count(local_var) > 0) {
    Expected<int> local = IntFromEnv(env, local_var, 0);
    if (!local.ok()) return local.status();
    w.local_rank = *local;
    w.local_rank_var = local_var;
  }
  if (auto it = env.find("MASTER_ADDR"); it != env.end()) w.master_addr = it->second;
  if (env.count("MASTER_PORT") > 0) {
    Expected<int> port = IntFromEnv(env, "MASTER_PORT", 1);
    if (!port.ok()) return port.status();
    w.master_port = *port;
  }
  return std::optional<WorkerEnv>(w);
}

Expected<int> CudaDeviceForLocalRank(int local_rank, int device_count, const std::string& local_var_name,
                                     const std::optional<std::string>& cuda_visible_devices) {
  const std::string visible = cuda_visible_devices.has_value()
                                  ? "CUDA_VISIBLE_DEVICES=\"" + *cuda_visible_devices + "\""
                                  : "CUDA_VISIBLE_DEVICES is not set";
  if (device_count <= 0) {
    return Status::Invalid("--device cuda: this process sees no GPU (" + visible +
                           "); list the node's GPUs in CUDA_VISIBLE_DEVICES (or unset it), or use --device cpu");
  }
  if (local_rank >= 0 && local_rank < device_count) return local_rank;
  const std::string count = std::to_string(device_count);
  const std::string var = local_var_name.empty() ? "the local rank" : local_var_name;
  std::string message = "--device cuda: " + var + "=" + std::to_string(local_rank) + " names GPU " +
                        std::to_string(local_rank) + ", but this process sees " + count +
                        (device_count == 1 ? " GPU" : " GPUs") + " (" + visible + "), numbered from 0. ";
  if (device_count == 1) message += "Each process sees one GPU, so its local rank would have to be 0. ";
  if (local_var_name == "SLURM_LOCALID") {
    message += "SLURM_LOCALID numbers the tasks of a node; it names their GPUs only when every task sees all of the "
               "node's GPUs, and here SLURM gave each task " +
               std::string(device_count == 1 ? "one GPU of its own" : "only " + count) +
               " (a per-task binding such as --gpus-per-task or --gpu-bind=single/map_gpu). Fix: start the tasks "
               "with every GPU of the node visible to each (e.g. srun --gpus-per-node=<tasks per node> "
               "--gpu-bind=none, no --gpus-per-task), or start at most " +
               count + " tasks per node";
  } else {
    message += var +
               " counts the processes of a node, so each process must see at least as many GPUs as the node "
               "runs processes. Fix: let every process see all of the node's GPUs (unset CUDA_VISIBLE_DEVICES or "
               "list them all in it), or start at most " +
               count + " processes per node (--nproc-per-node)";
  }
  return Status::Invalid(message);
}

// The NCCL process group reads these when it is constructed (ProcessGroupNCCL.hpp in torch 2.11
// declares each with its comment; the defaults and the behaviour below are from the matching
// ProcessGroupNCCL.cpp). Our NCCL waits are stream waits (C10dWork); a message that never comes is
// caught at the end of the step, where the host waits for the step's last event for --timeout and
// then fails with a readable error naming the rank and step (ActionClock::EndStep). The group's own
// timeout is --timeout + 60 s (c10d_communicator.cpp), so that error comes first; these settings
// keep NCCL's watchdog and its heartbeat monitor from killing the process around it.
//
//  TORCH_NCCL_ASYNC_ERROR_HANDLING=2 (CleanUpOnly). Header: "Control whether or not we perform
//    Async Error Handling with NCCL", and on the modes: "TearDown: tear down process upon error",
//    "CleanUpOnly: just clean up collectives and abort communicators without tearing down
//    process", "SkipCleanUp: ... tear down process without cleaning up NCCL communicators";
//    SHOULD_TEAR_DOWN(a) is (a != NoHandling && a != CleanUpOnly) and SHOULD_CLEAN_UP(a) is
//    (a != NoHandling && a != SkipCleanUp). The default is 3 (SkipCleanUp), which makes the
//    watchdog rethrow the collective's error on its own thread and so std::terminate the process.
//    With 2 the watchdog aborts the communicators (a GPU kernel stuck on a dead peer is released,
//    the process can exit) and leaves the error to the waiting thread, i.e. to us. The legacy
//    name NCCL_ASYNC_ERROR_HANDLING, when the user set it, counts as their setting.
//  TORCH_NCCL_DUMP_ON_TIMEOUT=0. Header: "Control whether dumping debug info on watchdog timeout
//    is enabled." When on (the default in the source), after a timeout on this rank or a dump
//    signal from another rank through the store, the heartbeat monitor dumps the flight recorder
//    and then, unless the group was destroyed meanwhile, sleeps TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC
//    and terminates the process (LOG(FATAL), i.e. abort): a peer's timeout would kill this rank
//    before its own error. Off, the monitor only watches the watchdog's heartbeat.
//  TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=1000, only when the user left the dump setting alone.
//    Header: "Control how much extra time we will wait for dumping the debugging info before we
//    exit and throws timeout exception." The watchdog sleeps four times this (15 s x 4 by
//    default) after a failure before it aborts the communicators; with no dump to wait for, 4 s.
//  TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC = max(480, --timeout + 60 s). Header: "Control the watchdog
//    heartbeat timeout period after which the monitoring thread will abort the process" (and
//    TORCH_NCCL_ENABLE_MONITORING: "aborts the process when the ProcessGroupNCCL Watchdog thread
//    gets stuck and no heartbeat is detected after TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"). 480 s is
//    the source's default; a --timeout longer than it would otherwise let the monitor abort the
//    process before our timeout fires. Monitoring itself stays on: a truly hung watchdog still ends.
//  TORCH_NCCL_BLOCKING_WAIT is left alone: it makes every wait poll the host, and with it set
//    the group starts no watchdog at all.
std::vector<std::pair<std::string, std::string>> NcclEnvironmentDefaults(
    std::chrono::milliseconds timeout, const std::map<std::string, std::string>& env) {
  std::vector<std::pair<std::string, std::string>> defaults;
  const auto unset = [&env](std::initializer_list<const char*> names) {
    return std::none_of(names.begin(), names.end(), [&env](const char* n) { return env.count(n) > 0; });
  };
  if (unset({"TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"})) {
    defaults.emplace_back("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2");
  }
  if (unset({"TORCH_NCCL_DUMP_ON_TIMEOUT"})) {
    defaults.emplace_back("TORCH_NCCL_DUMP_ON_TIMEOUT", "0");
    if (unset({"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC"})) {
      defaults.emplace_back("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "1000");
    }
  }
  if (unset({"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"})) {
    const int64_t timeout_s = (static_cast<int64_t>(timeout.count()) + 999) / 1000;
    defaults.emplace_back("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", std::to_string(std::max<int64_t>(480, timeout_s + 60)));
  }
  return defaults;
}

Expected<int> BindCudaRank(const WorkerEnv& env, std::chrono::milliseconds timeout) {
  // The device and NCCL's settings are in place before the process group exists: it reads both
  // when it is constructed.
  const std::map<std::string, std::string> environment = EnvironmentMap();
  const auto visible = environment.find("CUDA_VISIBLE_DEVICES");
  Expected<int> device = CudaDeviceForLocalRank(
      env.local_rank, static_cast<int>(torch::cuda::device_count()), env.local_rank_var,
      visible == environment.end() ? std::nullopt : std::optional<std::string>(visible->second));
  if (!device.ok()) return device.status();
  GPIPE_RETURN_IF_ERROR(BindCudaDevice(*device));
  for (const auto& [name, value] : NcclEnvironmentDefaults(timeout, environment)) {
    setenv(name.c_str(), value.c_str(), /*overwrite=*/0);
  }
  return device;
}

Expected<Schedule> CheckRunnable(const Plan& plan, const ModelSpec& model, int world_size) {
  Expected<int> layers = CountLayers(model);
  if (!layers.ok()) return layers.status();
  if (*layers != plan.profile.num_layers()) {
    return Status::Invalid("the model " + model.name + " has " + std::to_string(*layers) +
                           " layers but the plan's profile (" + plan.profile.model + ") has " +
                           std::to_string(plan.profile.num_layers()) +
                           "; plan with a profile of this model (gpipe-plan profile)");
  }
  const int needed = plan.num_ranks() * plan.replicas;
  if (world_size > 0 && world_size != needed) {
    return Status::Invalid("the job has " + std::to_string(world_size) + " ranks but the plan needs K x D = " +
                           std::to_string(plan.num_ranks()) + " x " + std::to_string(plan.replicas) + " = " +
                           std::to_string(needed));
  }
  GPIPE_RETURN_IF_ERROR(CheckPipelineShape(plan.global_batch, plan.num_ranks(), plan.replicas, plan.microbatches,
                                           /*devices=*/0)
                            .WithContext("the plan"));
  Expected<Schedule> schedule = BuildSchedule(plan);
  if (!schedule.ok()) return schedule.status();
  // What NCCL needs of the wire, proven before any rank starts (Gloo needs less).
  GPIPE_RETURN_IF_ERROR(CheckWireOnNccl(*schedule));
  return schedule;
}

Expected<std::optional<RunRecord>> RunWorker(const Plan& plan, const ModelSpec& model, const WorkerEnv& env,
                                             const RunSettings& settings, std::ostream& progress) {
  Expected<Schedule> schedule = CheckRunnable(plan, model, env.world_size);
  if (!schedule.ok()) return schedule.status();
  at::set_num_threads(settings.threads_per_rank);
  KeepFreedHostMemory();
  const bool cuda = settings.device == "cuda";
  if (cuda && !torch::cuda::is_available()) {
    return Status::Invalid("--device cuda: this machine has no usable GPU (or LibTorch has no CUDA); use --device cpu");
  }
  int cuda_device = 0;
  if (cuda) {
    Expected<int> device = BindCudaRank(env, settings.timeout);
    if (!device.ok()) return device.status();
    cuda_device = *device;
  }
  RendezvousOptions rendezvous = RendezvousFor(env.rank, env.world_size, env.master_addr, env.master_port,
                                               settings.timeout, cuda);
  rendezvous.device_index = cuda_device;
  Expected<std::unique_ptr<Communicator>> comm = ConnectC10d(rendezvous);
  if (!comm.ok()) return comm.status();

  TrainOptions options = OptionsFrom(settings);
  options.device = cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(cuda_device)) : torch::Device(torch::kCPU);
  const int last_rank = plan.stages.back().rank;
  const bool reporter = plan.DeviceOf(0, last_rank) == env.rank;
  double mean_ms = 0;
  int seen = 0;
  if (reporter) {
    options.on_step = [&](const StepRecord& step, int steps) {
      PrintProgress(progress, step, steps, plan.global_batch, &mean_ms, &seen);
    };
  }
  Expected<RankOutcome> outcome = TrainRank(plan, model, *schedule, **comm, options);
  if (!outcome.ok()) return outcome.status();
  std::vector<std::string> gathered;
  try {
    gathered = (*comm)->GatherToRankZero(OutcomeToJson(*outcome).dump());
  } catch (const std::exception& e) {
    return Status::Invalid(std::string("collecting the run record: ") + e.what());
  }
  if (env.rank != 0) return std::optional<RunRecord>();
  std::vector<RankOutcome> outcomes;
  for (const std::string& text : gathered) {
    Expected<RankOutcome> o = OutcomeFromJson(text);
    if (!o.ok()) return o.status();
    outcomes.push_back(std::move(*o));
  }
  RunRecord record = MergeOutcomes(plan, model, std::move(outcomes));
  record.device = settings.device;
  record.backend = (*comm)->backend();
  record.threads_per_rank = settings.threads_per_rank;
  return std::optional<RunRecord>(std::move(record));
}

Expected<RunRecord> TrainInProcess(const Plan& plan, const ModelSpec& model, const RunSettings& settings,
                                   std::vector<RankOutcome>* outcomes) {
  Expected<Schedule> schedule = CheckRunnable(plan, model, 0);
  if (!schedule.ok()) return schedule.status();
  if (settings.wire != "exact" && settings.wire != "nccl") {
    return Status::Usage("--wire " + settings.wire + ": use exact (tags matched exactly) or nccl (NCCL's rules)");
  }
  TrainOptions options = OptionsFrom(settings);
  if (settings.device == "cuda") {
    if (!torch::cuda::is_available()) {
      return Status::Invalid("--device cuda: this machine has no usable GPU (or LibTorch has no CUDA); use --device cpu");
    }
    options.device = torch::Device(torch::kCUDA, 0);
  }
  const int world = plan.num_ranks() * plan.replicas;
  const bool nccl = settings.wire == "nccl";
  auto exact = nccl ? nullptr : std::make_shared<LocalHub>(world, settings.timeout);
  auto emulated = nccl ? std::make_shared<NcclHub>(world, settings.nccl_queues, settings.timeout) : nullptr;
  std::vector<std::optional<Expected<RankOutcome>>> results(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      at::set_num_threads(settings.threads_per_rank);
      std::unique_ptr<Communicator> comm = nccl ? MakeNcclEmulation(emulated, r) : MakeLocalCommunicator(exact, r);
      Expected<RankOutcome> outcome = TrainRank(plan, model, *schedule, *comm, options);
      if (!outcome.ok()) nccl ? emulated->Abort(outcome.status().message()) : exact->Abort(outcome.status().message());
      results[static_cast<size_t>(r)] = std::move(outcome);
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<RankOutcome> ok;
  // The first failure is the cause; the others stopped because of it.
  for (auto& result : results) {
    if (!result->ok() && result->status().message().find("stopped: ") == std::string::npos) {
      return result->status();
    }
  }
  for (auto& result : results) {
    if (!result->ok()) return result->status();
    ok.push_back(std::move(result->value()));
  }
  if (outcomes != nullptr) *outcomes = ok;
  RunRecord record = MergeOutcomes(plan, model, std::move(ok));
  record.device = settings.device;
  record.backend = nccl ? "nccl-emulated" : "in-process";
  record.threads_per_rank = settings.threads_per_rank;
  return record;
}

}  // namespace gpipe::executor
