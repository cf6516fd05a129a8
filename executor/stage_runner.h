// One rank's part of a training step: its stages' layers, what each micro-batch keeps between its
// forward and backward, and the messages in flight. The trainer walks the rank's action list from
// the schedule and hands every action to Execute, whose one exhaustive switch calls one small
// function per op; no schedule has code of its own here.
//
// What a micro-batch keeps on a stage between F and its backward:
//   no remat: the stage input and the autograd graph of its forward (all activations);
//   remat:    the stage input only (and the RNG state), the forward is recomputed at B or I;
//   remat of the first n layers: the stage input, the tensors leaving layer n (as leaves) and
//             the graph of the layers after them; at B or I the first n layers are recomputed,
//             the rest's backward runs down to those leaves and theirs on from there;
//   zb-h1:    I keeps the graph and the gradients arriving at each parameterised operation until
//             W starts there (executor/split_backward.h), so that W computes weight gradients only.
// Stages on the same rank (interleaved 1F1B with K = 1) hand tensors over in memory.
// The wire follows the rank's WireProgram (core/schedule/wire.h), the same one the NCCL dry run
// proves: each action performs its wire steps in order, so receives are posted one compute action
// ahead and in the order the peer sends; the first step of a run carries a shape header
// (executor/shape_header.h) before the first message of each stage boundary and direction. A RECV
// action waits for its message, so its measured time is the time the rank (or its stream) sat idle.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "core/model.h"
#include "core/schedule/schedule.h"
#include "core/schedule/wire.h"
#include "executor/action_clock.h"
#include "executor/communicator.h"
#include "executor/data.h"
#include "executor/layers.h"
#include "executor/precision.h"
#include "executor/shape_header.h"
#include "executor/split_backward.h"

namespace gpipe::executor {

struct StageSetup {
  int stage = 0;
  /// How many of the stage's first layers recompute their forward in the backward (0: none; all
  /// of them: the whole stage rematerializes).
  int recomputed = 0;
  std::vector<std::unique_ptr<Layer>> layers;

  /// Only some of its first layers recompute: the rest keep their graph.
  bool partial_remat() const { return recomputed > 0 && recomputed < static_cast<int>(layers.size()); }
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
  /// The 16-bit type the layers compute in under autocast (executor/precision.h); none: fp32.
  std::optional<c10::ScalarType> compute_type;
};

/// This rank's wire steps for each of its actions: in a run's first step and in later ones.
struct RankWire {
  std::vector<std::vector<WireStep>> first_step;
  std::vector<std::vector<WireStep>> later_steps;
};
/// Rank `rank`'s part of both programs of `schedule`.
RankWire RankWireOf(const Schedule& schedule, int rank, WirePosting posting = WirePosting::kAheadInSenderOrder);

/// When one action ran: ActionClock marks, read once the step is over. recompute marks are -1
/// unless the action recomputed a forward (remat).
struct ActionMarks {
  int start = -1;
  int end = -1;
  int recompute_start = -1;
  int recompute_end = -1;
};

class StageRunner {
 public:
  /// `clock` times the actions (the trainer begins and ends its steps).
  StageRunner(RunnerConfig config, std::vector<StageSetup> stages, RankWire wire, Communicator& comm,
              ActionClock& clock);

  /// Starts a step on this replica's share of the global batch ([M * b] samples). The first
  /// stage keeps a copy of each micro-batch's input until its forward takes it, the last stage a
  /// copy of the targets until the step ends; nothing refers to `replica_batch` afterwards, so
  /// a rank holds what the memory model counts (a micro-batch's input from its forward to its
  /// backward), not the global batch.
  void BeginStep(const Batch& replica_batch);
  /// Runs `actions[index]` with its wire steps; a compute action's receives posted ahead are not
  /// part of its time.
  ActionMarks Execute(const std::vector<Action>& actions, size_t index);
  /// Waits for the sends still in flight, checks that every micro-batch was finished and reads
  /// the step's loss off the device (once per step).
  void FinishStep();
  /// Mean of the micro-batch losses of the finished step (last stage only; 0 elsewhere).
  double StepLoss() const { return step_loss_; }
  bool HasLastStage() const;
  /// The factor each micro-batch's loss is multiplied by before its backward, from the next step
  /// on: 1 / (M * D), times fp16's loss scale.
  void SetLossScale(double scale) { config_.loss_scale = scale; }

  std::vector<torch::Tensor> Parameters() const;
  /// Every stage's layers, for checkpoints.
  std::vector<StageSetup>& stages() { return stages_; }

 private:
  struct Micro {
    Values input;
    Values root;  // the stage outputs with their graph, or the scaled loss on the last stage
    // zb-h1, first stage: I's anchors, the outputs of the stage's lowest layer that has any
    // needing a gradient. Every path from a parameter above meets theirs, and I holds the
    // gradient it finds at each anchor until it ends: anchored at every layer's outputs, it held
    // all of the stage's inner gradients at once, which the memory model does not count.
    Values boundaries;
    WeightPass weight_pass;  // what I left for W (zb-h1)
    // Partial remat: the leaves the layers after the recomputed ones start from, the recomputed
    // layers' outputs with their graph (from B or I on), and what I left for W of the later layers.
    Values tail_input;
    Values recomputed;
    WeightPass tail_weight_pass;
    Values grad_output;  // one per floating-point output
    torch::Tensor to_send;  // a packed message (executor/shape_header.h)
    ShapeHeader to_send_shape;
    std::optional<torch::Tensor> rng_state;
    bool backward_done = false;  // B, or W after I, has run: only a gradient still to send stays
  };
  struct Incoming {
    torch::Tensor buffer;
    ShapeHeader shape;
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

  void RunStep(const Action& a, const WireStep& step);
  void Forward(const Action& a);
  void Backward(const Action& a);
  void BackwardInput(const Action& a);
  void BackwardWeight(const Action& a);
  /// The process rank at the other end of `m`.
  int PeerOf(const Message& m) const;
  void PostReceive(const Message& m);
  void ReceiveHeader(const Message& m);
  void SendHeader(const Action& a);
  void Send(const Action& a);
  /// The one way a micro-batch leaves a stage: once its backward is done and nothing is left to
  /// send, nothing of it stays.
  void FinishBackward(const Action& a);
  void ReleaseIfDone(int stage, int microbatch);

  /// Runs the stage's layers [begin, end) on `x`; into an empty `boundaries`, the outputs of the
  /// first of them with any output that needs a gradient.
  Values RunLayers(StageSetup& stage, size_t begin, size_t end, Values x, Values* boundaries);
  torch::Tensor Target(int microbatch) const;
  /// The loss of the last stage's outputs (one tensor: the logits).
  torch::Tensor LossOfOutputs(const Action& a, const Values& out) const;
  /// The roots of the backward, recomputing the forward first on remat stages.
  Values PrepareBackward(const Action& a, bool keep_boundaries);
  Values GradOutput(const Action& a);
  /// Hands `grads` (one per floating-point input) to the previous stage, in memory or by message.
  void HandBackInputGrad(const Action& a, Values grads);
  /// Packs `values` as the micro-batch's message to send.
  void SetToSend(Micro& m, const Values& values);
  Values TakeIncoming(const Message& m);
  void ReapSends();

  RunnerConfig config_;
  std::vector<StageSetup> stages_;
  std::map<int, size_t> stage_index_;
  RankWire wire_;
  Communicator& comm_;
  ActionClock& clock_;

  // This step's micro-batch inputs, each its own copy, taken by its forward (first stage only),
  // and the targets (last stage only): the batch the trainer drew is not held.
  std::vector<torch::Tensor> inputs_;
  torch::Tensor targets_;
  bool first_step_ = true;  // the run's first step carries the shape headers
  std::map<std::pair<int, int>, Micro> micro_;
  std::map<Message, Incoming> incoming_;
  std::vector<Outgoing> outgoing_;
  std::map<std::pair<MessageKind, int>, ShapeHeader> shapes_;  // by (kind, sending stage)
  torch::Tensor loss_sum_;  // on the device, summed over the step's micro-batches
  double step_loss_ = 0;
  ActionMarks marks_;
};

}  // namespace gpipe::executor
