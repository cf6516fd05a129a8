// One rank's training loop: every step starts with a barrier (so all ranks' clocks start
// together, as in the simulator), walks the rank's action list through the StageRunner, sums
// gradients over the data-parallel replicas of each stage, and steps the optimizer once per global
// batch. It also saves and resumes checkpoints and measures what the run record holds.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "core/model.h"
#include "core/plan.h"
#include "core/run_record.h"
#include "core/schedule/schedule.h"
#include "core/schedule/wire.h"
#include "core/status.h"
#include "executor/communicator.h"

namespace gpipe::executor {

struct TrainOptions {
  int steps = 1;
  torch::Device device = torch::kCPU;
  /// Empty: no checkpoints.
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  /// Continue from the latest checkpoint in checkpoint_dir (error when there is none).
  bool resume = false;
  /// A safetensors file of the whole model (executor/weights.h) to start from (fine-tuning);
  /// empty: the model's seeded initial weights.
  std::string init_weights;
  /// Where to write the whole model's weights after the last step; empty: not written. Every
  /// checkpoint holds them too.
  std::string save_weights;
  /// Evaluate every eval_every steps (and after the last; 0: never) on eval_batches batches of
  /// the validation data (DataSource::EvalBatch), each the size of the global batch.
  int eval_every = 0;
  int eval_batches = 1;
  /// How long the end of a step waits for the device (a GPU stream stuck on a message that never
  /// comes) before failing with an error.
  std::chrono::milliseconds timeout{60000};
  /// Tests only: at (step, process rank), one gradient element set to inf after the backward, as an
  /// fp16 overflow leaves it (a 16-bit plan's step is then skipped on every rank).
  std::optional<std::pair<int, int>> inject_inf;
  /// How receives are posted; only tests choose the design before lanes, to show it deadlocks.
  WirePosting posting = WirePosting::kAheadInSenderOrder;
  /// Called on every rank after each step with the step's record and the number of steps; the
  /// loss is meaningful on ranks that hold the last stage.
  std::function<void(const StepRecord&, int)> on_step;
};

/// What one rank saw.
struct RankOutcome {
  RankRecord record;
  /// Steps run by this rank: its own time; loss where it holds the last stage (averaged over
  /// replicas), else 0.
  std::vector<StepRecord> steps;
  bool has_last_stage = false;
  std::string memory_measure;
  /// ActionClock::name() of the clock that timed it.
  std::string clock = "host";
  /// The rank's parameters after training, in stage and layer order (for tests).
  std::vector<torch::Tensor> parameters;
};

/// A fingerprint of what a checkpoint must match: the plan's cut, schedule, batch and optimizer
/// and the model's layers.
std::string RunFingerprint(const Plan& plan, const ModelSpec& model);

/// Trains this process's rank (comm.rank() is its device index in the plan). `lowered` is
/// BuildSchedule(plan). Errors name the rank, the step and the action that failed.
Expected<RankOutcome> TrainRank(const Plan& plan, const ModelSpec& model, const Schedule& lowered,
                                Communicator& comm, const TrainOptions& options);

/// Merges the ranks' outcomes into one record: a step's time is the slowest rank's.
RunRecord MergeOutcomes(const Plan& plan, const ModelSpec& model, std::vector<RankOutcome> outcomes);

/// The optimizer the plan names, over `params`, with the model's training settings
/// (core/training.h): SGD for sgd and momentum, AdamW for adam and adam-mixed; one-dimensional
/// parameters in a group of their own, without weight decay unless decay_1d. Its learning rate is
/// step 0's.
std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const Plan& plan, const ModelSpec& model,
                                                       const std::vector<torch::Tensor>& params);
/// The same over `tensors` (a sharded optimizer's slices), `matrix[k]` saying whether tensor k is
/// decayed as a parameter of two dimensions or more.
std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const Plan& plan, const ModelSpec& model,
                                                       const std::vector<torch::Tensor>& tensors,
                                                       const std::vector<bool>& matrix);

/// Gives every parameter group of `optimizer` this learning rate.
void SetLearningRate(torch::optim::Optimizer& optimizer, double learning_rate);

/// Returns the norm sqrt(squared_norm) and, when max_norm > 0, scales every gradient of `params`
/// by min(1, max_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_ does.
double ClipGradients(const std::vector<torch::Tensor>& params, double squared_norm, double max_norm);

}  // namespace gpipe::executor
