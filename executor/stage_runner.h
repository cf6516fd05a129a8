// One rank's part of a training step: its stages' layers, what each micro-batch keeps between its
// forward and backward, and the messages in flight. The trainer walks the rank's action list from
// the schedule and hands every action to Execute, whose one exhaustive switch calls one small
// function per op; no schedule has code of its own here.
//
// What a micro-batch keeps on a stage between F and its backward:
//   no remat: the stage input and the autograd graph of its forward (all activations);
//   remat:    the stage input only (and the RNG state), the forward is recomputed at B or I;
//   zb-h1:    I keeps the graph and the gradients arriving at each parameterised operation until
//             W starts there (executor/split_backward.h), so that W computes weight gradients only.
// Stages on the same rank (interleaved 1F1B with K = 1) hand tensors over in memory.
// The first message on each stage boundary and direction carries a shape header; later ones are
// received straight into buffers posted one compute action ahead, so receives overlap compute;
// a RECV action waits for its message, so its measured time is the time the rank sat idle.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "core/model.h"
#include "core/schedule/schedule.h"
#include "executor/communicator.h"
#include "executor/data.h"
#include "executor/layers.h"
#include "executor/split_backward.h"

namespace gpipe::executor {

struct StageSetup {
  int stage = 0;
  bool remat = false;
  std::vector<std::unique_ptr<Layer>> layers;
};

struct RunnerConfig {
  const ModelSpec* model = nullptr;
  int num_stages = 0;
  int microbatches = 1;
  /// The process rank that runs each stage of this rank's pipeline replica.
  std::vector<int> stage_process;
  /// Each micro-batch's loss is multiplied by this before backward: 1 / (M * D), so that summed
  /// gradients equal those of the mean loss over the global batch.
  double loss_scale = 1.0;
  torch::Device device = torch::kCPU;
  /// The schedule splits backward into I and W (zb-h1).
  bool split_backward = false;
};

/// When one action ran, in ms from the start of the step.
struct ActionTime {
  double start_ms = 0;
  double end_ms = 0;
  double recompute_ms = 0;
};

class StageRunner {
 public:
  StageRunner(RunnerConfig config, std::vector<StageSetup> stages, Communicator& comm);

  /// Starts a step on this replica's share of the global batch ([M * b] samples).
  void BeginStep(const Batch& replica_batch, std::chrono::steady_clock::time_point step_start);
  /// Runs `actions[index]`; before a compute action, posts the receives that the next compute
  /// action needs, so that they arrive while this one runs.
  ActionTime Execute(const std::vector<Action>& actions, size_t index);
  /// Waits for the sends still in flight and checks that every micro-batch was finished.
  void FinishStep();
  /// Mean of the micro-batch losses of this step (last stage only; 0 elsewhere).
  double StepLoss() const;
  bool HasLastStage() const;

  std::vector<torch::Tensor> Parameters() const;
  /// Every stage's layers, for checkpoints.
  std::vector<StageSetup>& stages() { return stages_; }

 private:
  struct Micro {
    torch::Tensor input;
    torch::Tensor root;  // the stage output with its graph, or the scaled loss on the last stage
    std::vector<torch::Tensor> boundaries;  // each layer's output (zb-h1, first stage: I's anchors)
    WeightPass weight_pass;                 // what I left for W (zb-h1)
    torch::Tensor grad_output;
    torch::Tensor to_send;
    std::optional<torch::Tensor> rng_state;
  };
  struct Incoming {
    torch::Tensor buffer;
    std::unique_ptr<PendingWork> work;
  };
  struct Outgoing {
    torch::Tensor tensor;
    std::unique_ptr<PendingWork> work;
  };

  StageSetup& Stage(int stage);
  Micro& MicroOf(int stage, int microbatch);
  bool IsLocal(int stage) const;
  bool IsFirst(int stage) const { return stage == 0; }
  bool IsLast(int stage) const { return stage == config_.num_stages - 1; }

  void Forward(const Action& a);
  void Backward(const Action& a);
  void BackwardInput(const Action& a);
  void BackwardWeight(const Action& a);
  void Send(const Action& a);
  void PostReceive(const Action& a, bool only_if_shape_known);
  /// A RECV action: posts the receive if it is not yet, and waits for it (its time is the wait).
  void Receive(const Action& a);
  /// The (kind, sending stage, micro-batch) a RECV action waits for.
  static std::tuple<int, int, int> IncomingKey(const Action& a);
  /// Drops what a micro-batch kept on its stage once its backward is done, except a gradient
  /// still waiting for its SEND_B.
  void ReleaseMicro(const Action& a);

  torch::Tensor RunLayers(StageSetup& stage, torch::Tensor x, std::vector<torch::Tensor>* boundaries);
  torch::Tensor Target(int microbatch) const;
  /// The root of the backward, recomputing the forward first on remat stages.
  torch::Tensor PrepareBackward(const Action& a, bool keep_boundaries);
  torch::Tensor GradOutput(const Action& a);
  void HandBackInputGrad(const Action& a, const torch::Tensor& grad);
  torch::Tensor TakeIncoming(int kind, int stage, int microbatch);
  void ReapSends();
  double Now() const;

  RunnerConfig config_;
  std::vector<StageSetup> stages_;
  std::map<int, size_t> stage_index_;
  Communicator& comm_;

  Batch batch_;
  std::chrono::steady_clock::time_point step_start_;
  std::map<std::pair<int, int>, Micro> micro_;
  std::map<std::tuple<int, int, int>, Incoming> incoming_;
  std::vector<Outgoing> outgoing_;
  std::map<std::pair<int, int>, std::pair<std::vector<int64_t>, c10::ScalarType>> shapes_;
  std::set<std::pair<int, int>> header_sent_;
  double loss_sum_ = 0;
  double recompute_ms_ = 0;
};

}  // namespace gpipe::executor
