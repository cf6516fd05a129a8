// The run record format, gpipe-run/1: what `gpipe-plan run` measured. Per step the loss and the
// wall time; per rank its stages, peak memory and every action's start and end (milliseconds from
// the start of its step, all ranks starting each step together after a barrier). `compare` reads
// it next to the simulator's prediction; the trace tools draw it like a simulated step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/schedule/action.h"
#include "core/status.h"

namespace gpipe {

inline constexpr const char* kRunRecordFormat = "gpipe-run/1";

struct ActionRecord {
  int step = 0;
  Action action;
  double start_ms = 0;
  double end_ms = 0;
  /// For a remat stage's backward: the recomputed forward at its head, [start, start + recompute).
  double recompute_ms = 0;
  /// The rank's memory (as RankRecord::peak_memory_bytes counts it) at the action's end, and
  /// its peak while the action ran; -1 when not recorded.
  int64_t memory_bytes = -1;
  int64_t peak_memory_bytes = -1;
};

struct RankRecord {
  int rank = 0;
  int replica = 0;
  /// The rank within its pipeline (0 .. K-1).
  int pipeline_rank = 0;
  std::vector<int> stages;
  /// Peak bytes of tensor storage allocated by this rank (see RunRecord::memory_measure).
  int64_t peak_memory_bytes = 0;
  /// On GPU: the caching allocator's peak reserved bytes (what the device gave the process,
  /// allocated or cached); 0 on the CPU, which reserves nothing.
  int64_t peak_reserved_bytes = 0;
  /// Parameters: the bytes the rank's layers hold once built, before the optimizer, the data and
  /// any checkpoint are loaded. (The simulator's static bytes are the model state: parameters,
  /// gradients and optimizer state.) Read from "static_memory_bytes" in older records.
  int64_t parameter_bytes = 0;
  /// Each step's peak, so the warm-up step can be told apart.
  std::vector<int64_t> step_peak_memory_bytes;
  /// What the rank held as each step began (parameters, optimizer state, the data; gradients are freed):
  /// a step's peak minus this is what the step itself added (activations, gradients, buffers).
  std::vector<int64_t> step_start_memory_bytes;
  std::vector<ActionRecord> actions;
};

struct StepRecord {
  int step = 0;
  double loss = 0;
  double time_ms = 0;
  /// The learning rate the step's update used, and the global gradient norm before clipping
  /// (every stage, a tied parameter once); absent in older records.
  std::optional<double> learning_rate{};
  std::optional<double> grad_norm{};
  /// The mean loss over the evaluation batches run after this step (run --eval-every), if any.
  std::optional<double> eval_loss{};
  /// fp16 only: the loss scale the step's backward used, and whether its gradients held an inf or
  /// a NaN on some rank, so that no rank updated (executor/precision.h).
  std::optional<double> loss_scale{};
  bool skipped = false;
};

struct RunRecord {
  std::string model;
  std::string plan;
  std::string schedule;
  /// "cpu" or "cuda"; "gloo", "nccl", "in-process" (tags matched exactly) or "nccl-emulated"
  /// (in-process under NCCL's rules, executor/nccl_emulation.h).
  std::string device = "cpu";
  std::string backend = "gloo";
  int threads_per_rank = 1;
  int64_t global_batch = 0;
  int microbatches = 0;
  int num_ranks = 1;
  int replicas = 1;
  /// What the layers computed in: the plan's precision ("fp32", "bf16", "fp16").
  std::string precision = "fp32";
  /// What peak_memory_bytes counts, in words.
  std::string memory_measure;
  /// What timed the actions and steps: "host" (steady clock) or "cuda-events" (events on the
  /// compute stream, steps ended by a device synchronisation).
  std::string clock = "host";
  std::vector<StepRecord> steps;
  /// ThroughputOf(steps, global_batch): samples per second at the median step after the first.
  double throughput_samples_per_s = 0;
  std::vector<RankRecord> ranks;
  nlohmann::json extra = nlohmann::json::object();
};

/// The steps whose times are measured: every one after the first (it warms up), or the only one.
std::vector<StepRecord> MeasuredSteps(const std::vector<StepRecord>& steps);
/// Their times.
std::vector<double> MeasuredStepTimes(const std::vector<StepRecord>& steps);

/// The measured step time of a run: the median of MeasuredStepTimes. run, compare, calibrate and
/// validate all report this one figure.
double MeasuredStepMs(const std::vector<StepRecord>& steps);

/// Samples per second at that step time: global_batch / MeasuredStepMs (0 for no steps).
double ThroughputOf(const std::vector<StepRecord>& steps, int64_t global_batch);

/// What `gpipe-plan run` prints at the end: the loss, ThroughputOf the steps (the figure compare
/// reports as measured), and per rank its peak memory and parameter bytes.
std::string FormatRunSummary(const RunRecord& record);

Expected<RunRecord> RunRecordFromJson(const nlohmann::json& json, const std::string& where);
Expected<RunRecord> LoadRunRecord(const std::string& path);
nlohmann::json RunRecordToJson(const RunRecord& record);
nlohmann::json RankRecordToJson(const RankRecord& rank);
/// One step: NaN (a loss or norm that overflowed) is written as null and read back as NaN.
nlohmann::json StepRecordToJson(const StepRecord& step);
Expected<StepRecord> StepRecordFromJson(const nlohmann::json& json, const std::string& where);
Expected<RankRecord> RankRecordFromJson(const nlohmann::json& json, const std::string& where);

}  // namespace gpipe
