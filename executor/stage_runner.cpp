#include "executor/stage_runner.h"

#include <stdexcept>
#include <string>
#include <tuple>

#include "executor/rng_state.h"

namespace gpipe::executor {

RankWire RankWireOf(const Schedule& schedule, int rank, WirePosting posting) {
  RankWire wire;
  wire.first_step = std::move(BuildWireProgram(schedule, true, posting).ranks[static_cast<size_t>(rank)]);
  wire.later_steps = std::move(BuildWireProgram(schedule, false, posting).ranks[static_cast<size_t>(rank)]);
  return wire;
}

StageRunner::StageRunner(RunnerConfig config, std::vector<StageSetup> stages, RankWire wire, Communicator& comm,
                         ActionClock& clock)
    : config_(std::move(config)), stages_(std::move(stages)), wire_(std::move(wire)), comm_(comm), clock_(clock) {
  for (size_t i = 0; i < stages_.size(); ++i) stage_index_[stages_[i].stage] = i;
}

StageSetup& StageRunner::Stage(int stage) {
  auto it = stage_index_.find(stage);
  if (it == stage_index_.end()) throw std::logic_error("stage " + std::to_string(stage) + " is not on this rank");
  return stages_[it->second];
}

StageRunner::Micro& StageRunner::MicroOf(int stage, int microbatch) { return micro_[{stage, microbatch}]; }

bool StageRunner::IsLocal(int stage) const { return config_.stage_process[static_cast<size_t>(stage)] == comm_.rank(); }

bool StageRunner::HasLastStage() const { return stage_index_.count(config_.num_stages - 1) > 0; }

std::vector<torch::Tensor> StageRunner::Parameters() const {
  std::vector<torch::Tensor> params;
  for (const StageSetup& stage : stages_) {
    for (const torch::Tensor& p : ParametersOf(stage.layers)) params.push_back(p);
  }
  return UniqueTensors(params);
}

void StageRunner::BeginStep(const Batch& replica_batch) {
  // Only the first stage reads the inputs and only the last the targets: a rank holds neither
  // unless it runs that stage (the memory model counts no batch on the others). Copies, not
  // views: a view would keep the whole global batch alive, and one micro-batch's input could
  // not be freed before the others'.
  const auto copy = [&](const torch::Tensor& t) {
    return t.to(config_.device, t.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
  };
  inputs_.clear();
  if (IsLocal(0)) {
    const int64_t b = replica_batch.input.size(0) / config_.microbatches;
    for (int i = 0; i < config_.microbatches; ++i) inputs_.push_back(copy(replica_batch.input.narrow(0, i * b, b)));
  }
  targets_ = IsLocal(config_.num_stages - 1) ? copy(replica_batch.target) : torch::Tensor();
  loss_sum_ = torch::Tensor();
  step_loss_ = 0;
  ClearWeightCopies();
}

ActionMarks StageRunner::Execute(const std::vector<Action>& actions, size_t index) {
  const Action& a = actions[index];
  const std::vector<WireStep>& steps = (first_step_ ? wire_.first_step : wire_.later_steps).at(index);
  ReapSends();
  size_t k = 0;
  // Receives posted ahead for the next compute action overlap this one and are not its time.
  if (IsCompute(a.op)) {
    for (; k < steps.size() && steps[k].op == WireOp::kPostRecv; ++k) RunStep(a, steps[k]);
  }
  marks_ = ActionMarks();
  marks_.start = clock_.Mark();
  for (; k < steps.size(); ++k) RunStep(a, steps[k]);
  marks_.end = clock_.Mark();
  return marks_;
}

void StageRunner::RunStep(const Action& a, const WireStep& step) {
  switch (step.op) {
    case WireOp::kPostRecv: PostReceive(step.message); return;
    case WireOp::kRecvHeader: ReceiveHeader(step.message); return;
    case WireOp::kWaitRecv: {
      auto it = incoming_.find(step.message);
      if (it == incoming_.end()) throw std::logic_error("the " + MessageToText(step.message) + " was never posted");
      it->second.work->Wait();
      return;
    }
    case WireOp::kSendHeader: SendHeader(a); return;
    case WireOp::kSend: Send(a); return;
    case WireOp::kCompute: break;
  }
  switch (a.op) {
    case Op::kForward: Forward(a); return;
    case Op::kBackward: Backward(a); return;
    case Op::kBackwardInput: BackwardInput(a); return;
    case Op::kBackwardWeight: BackwardWeight(a); return;
    default: throw std::logic_error("the wire program computes at " + ActionToText(a));
  }
}

Values StageRunner::RunLayers(StageSetup& stage, size_t begin, size_t end, Values x, Values* boundaries) {
  // The input is kept (for its gradient, or for the recompute; a leaf, past recomputed layers)
  // and the first stage's is the batch: a layer that may write into its input gets a copy.
  if (begin < end && stage.layers[begin]->MayWriteInput()) x = ClonedOf(x);
  const AutocastScope autocast(config_.compute_type, config_.device);
  for (size_t l = begin; l < end; ++l) {
    x = stage.layers[l]->Apply(x);
    if (boundaries != nullptr && boundaries->empty() && AnyRequiresGrad(x)) *boundaries = x;
  }
  return x;
}

torch::Tensor StageRunner::Target(int microbatch) const {
  const int64_t b = targets_.size(0) / config_.microbatches;
  return targets_.narrow(0, microbatch * b, b);
}

torch::Tensor StageRunner::LossOfOutputs(const Action& a, const Values& out) const {
  if (out.size() != 1) {
    throw std::runtime_error("the last layer returned " + std::to_string(out.size()) +
                             " tensors; the loss takes one (the logits) at " + ActionToText(a));
  }
  return LossOf(*config_.model, out[0], Target(a.microbatch));
}

void StageRunner::SetToSend(Micro& m, const Values& values) {
  std::tie(m.to_send, m.to_send_shape) = Pack(values);
}

void StageRunner::Forward(const Action& a) {
  StageSetup& stage = Stage(a.stage);
  Micro& m = MicroOf(a.stage, a.microbatch);
  Values x;
  if (IsFirst(a.stage)) {
    // Taken: from here the micro-batch's own state holds its input, until its backward.
    torch::Tensor& input = inputs_.at(static_cast<size_t>(a.microbatch));
    if (!input.defined()) {
      throw std::logic_error("the input of micro-batch " + std::to_string(a.microbatch) + " was already taken at " +
                             ActionToText(a));
    }
    x = {std::move(input)};
    input = torch::Tensor();
  } else if (IsLocal(a.stage - 1)) {
    x = m.input;  // handed over by the previous stage's forward
  } else {
    x = TakeIncoming({MessageKind::kActivation, a.stage - 1, a.microbatch});
  }
  if (x.empty()) throw std::logic_error("no input for " + ActionToText(a));
  Values out;
  const size_t layers = stage.layers.size();
  const bool whole_remat = stage.recomputed > 0 && !stage.partial_remat();
  if (stage.recomputed > 0) {
    m.rng_state = SaveRng(config_.device);
    {
      torch::NoGradGuard no_grad;
      out = RunLayers(stage, 0, static_cast<size_t>(stage.recomputed), x, nullptr);
    }
    m.input = DetachedOf(x);
    if (stage.partial_remat()) {
      m.tail_input = LeavesOf(out);
      out = RunLayers(stage, static_cast<size_t>(stage.recomputed), layers, m.tail_input, nullptr);
    }
  } else {
    if (!IsFirst(a.stage)) x = LeavesOf(x);
    m.input = x;
    out = RunLayers(stage, 0, layers, x, config_.split_backward && IsFirst(a.stage) ? &m.boundaries : nullptr);
  }
  if (IsLast(a.stage)) {
    torch::Tensor loss = LossOfOutputs(a, out);
    // Summed on the device and read once per step: an item() here would stall every micro-batch.
    const torch::Tensor l = loss.detach().to(torch::kDouble);
    loss_sum_ = loss_sum_.defined() ? loss_sum_ + l : l;
    if (!whole_remat) m.root = {loss * config_.loss_scale};
    return;
  }
  if (!whole_remat) m.root = out;
  if (IsLocal(a.stage + 1)) {
    MicroOf(a.stage + 1, a.microbatch).input = DetachedOf(out);
  } else {
    SetToSend(m, DetachedOf(out));
  }
}

Values StageRunner::PrepareBackward(const Action& a, bool keep_boundaries) {
  StageSetup& stage = Stage(a.stage);
  Micro& m = MicroOf(a.stage, a.microbatch);
  if (stage.recomputed > 0) {
    marks_.recompute_start = clock_.Mark();
    torch::Tensor now_state = SaveRng(config_.device);
    RestoreRng(config_.device, *m.rng_state);
    Values x = IsFirst(a.stage) ? m.input : LeavesOf(m.input);
    m.input = x;
    m.boundaries.clear();
    Values out = RunLayers(stage, 0, static_cast<size_t>(stage.recomputed), x, keep_boundaries ? &m.boundaries : nullptr);
    RestoreRng(config_.device, now_state);
    if (stage.partial_remat()) {
      m.recomputed = std::move(out);  // the root stays the later layers' outputs (or loss)
    } else {
      m.root = IsLast(a.stage) ? Values{LossOfOutputs(a, out) * config_.loss_scale} : out;
    }
    marks_.recompute_end = clock_.Mark();
  }
  if (m.root.empty()) throw std::logic_error("backward before forward at " + ActionToText(a));
  return m.root;
}

Values StageRunner::GradOutput(const Action& a) {
  Micro& m = MicroOf(a.stage, a.microbatch);
  if (IsLast(a.stage)) return {};
  if (IsLocal(a.stage + 1)) {
    if (m.grad_output.empty() && !m.root.empty()) {
      // A boundary without a floating-point tensor has no gradient: nothing was handed back.
      if (AnyFloatingPoint(m.root)) throw std::logic_error("no output gradient for " + ActionToText(a));
    }
    return m.grad_output;
  }
  m.grad_output = TakeIncoming({MessageKind::kGradient, a.stage + 1, a.microbatch});
  return m.grad_output;
}

void StageRunner::HandBackInputGrad(const Action& a, Values grads) {
  if (IsFirst(a.stage)) return;
  if (IsLocal(a.stage - 1)) {
    MicroOf(a.stage - 1, a.microbatch).grad_output = std::move(grads);
  } else {
    SetToSend(MicroOf(a.stage, a.microbatch), grads);
  }
}

void StageRunner::Backward(const Action& a) {
  const Values root = PrepareBackward(a, false);
  RunBackward(root, GradOutput(a));
  Micro& m = MicroOf(a.stage, a.microbatch);
  // Partial remat: the later layers' backward ended at their input leaves; the recomputed
  // layers' runs on from there.
  if (Stage(a.stage).partial_remat()) RunBackward(m.recomputed, InputGradients(m.tail_input));
  HandBackInputGrad(a, IsFirst(a.stage) ? Values() : InputGradients(m.input));
  FinishBackward(a);
}

void StageRunner::FinishBackward(const Action& a) {
  Micro& m = MicroOf(a.stage, a.microbatch);
  Micro done;
  done.to_send = std::move(m.to_send);
  done.to_send_shape = std::move(m.to_send_shape);
  done.backward_done = true;
  m = std::move(done);
  ReleaseIfDone(a.stage, a.microbatch);
}

void StageRunner::ReleaseIfDone(int stage, int microbatch) {
  auto it = micro_.find({stage, microbatch});
  if (it != micro_.end() && it->second.backward_done && !it->second.to_send.defined()) micro_.erase(it);
}

void StageRunner::BackwardInput(const Action& a) {
  // The first stage's input needs no gradient: its layers' outputs are where I stops instead, so
  // that W still holds only weight gradients.
  const bool first = IsFirst(a.stage);
  const Values root = PrepareBackward(a, /*keep_boundaries=*/first);
  const Values grad = GradOutput(a);
  Micro& m = MicroOf(a.stage, a.microbatch);
  StageSetup& stage = Stage(a.stage);
  Values anchor_grads;
  if (stage.partial_remat()) {
    // The later layers' I stops at their input leaves; the recomputed layers' I goes on from
    // there with the gradient it found. W runs both.
    Values tail_grads;
    m.tail_weight_pass = executor::BackwardInput(root, grad, m.tail_input, ParametersOf(stage.layers), &tail_grads);
    m.weight_pass = executor::BackwardInput(m.recomputed, GradientMessage(m.tail_input, tail_grads),
                                            first ? m.boundaries : m.input, ParametersOf(stage.layers), &anchor_grads);
  } else {
    m.weight_pass = executor::BackwardInput(root, grad, first ? m.boundaries : m.input, ParametersOf(stage.layers),
                                            &anchor_grads);
  }
  m.boundaries.clear();
  HandBackInputGrad(a, first ? Values() : GradientMessage(m.input, anchor_grads));
}

void StageRunner::BackwardWeight(const Action& a) {
  Micro& m = MicroOf(a.stage, a.microbatch);
  if (!m.tail_weight_pass.empty()) m.tail_weight_pass.Run();
  m.weight_pass.Run();
  FinishBackward(a);
}

int StageRunner::PeerOf(const Message& m) const {
  return config_.stage_process[static_cast<size_t>(IsLocal(m.from_stage) ? m.to_stage() : m.from_stage)];
}

void StageRunner::SendHeader(const Action& a) {
  const Message m = MessageOf(a);
  const Micro& micro = MicroOf(a.stage, a.microbatch);
  if (!micro.to_send.defined()) throw std::logic_error("nothing to send at " + ActionToText(a));
  Expected<torch::Tensor> header = EncodeShapeHeader(micro.to_send_shape, config_.device);
  if (!header.ok()) throw std::runtime_error(header.status().message());
  const Message h{m.kind, m.from_stage, 0, true};
  outgoing_.push_back({*header, comm_.Send(*header, PeerOf(h), MessageTag(h))});
}

void StageRunner::Send(const Action& a) {
  const Message m = MessageOf(a);
  Micro& micro = MicroOf(a.stage, a.microbatch);
  if (!micro.to_send.defined()) throw std::logic_error("nothing to send at " + ActionToText(a));
  torch::Tensor tensor = micro.to_send.contiguous();
  micro.to_send = torch::Tensor();
  outgoing_.push_back({tensor, comm_.Send(tensor, PeerOf(m), MessageTag(m))});
  ReleaseIfDone(a.stage, a.microbatch);
}

void StageRunner::ReceiveHeader(const Message& m) {
  torch::Tensor buffer = ShapeHeaderBuffer(config_.device);
  comm_.Recv(buffer, PeerOf(m), MessageTag(m))->Wait();
  Expected<ShapeHeader> header = DecodeShapeHeader(buffer);
  if (!header.ok()) {
    throw std::runtime_error("the " + MessageToText(m) + " from rank " + std::to_string(PeerOf(m)) + ": " +
                             header.status().message());
  }
  shapes_[{m.kind, m.from_stage}] = *header;
}

void StageRunner::PostReceive(const Message& m) {
  auto shape = shapes_.find({m.kind, m.from_stage});
  if (shape == shapes_.end()) throw std::logic_error("a receive of the " + MessageToText(m) + " was posted before its shape header");
  if (incoming_.count(m) > 0) throw std::logic_error("the " + MessageToText(m) + " was posted twice");
  torch::Tensor buffer = shape->second.EmptyOn(config_.device);
  std::unique_ptr<PendingWork> work = comm_.Recv(buffer, PeerOf(m), MessageTag(m));
  incoming_.emplace(m, Incoming{buffer, shape->second, std::move(work)});
}

Values StageRunner::TakeIncoming(const Message& m) {
  auto it = incoming_.find(m);
  if (it == incoming_.end()) throw std::logic_error("no receive was posted for the " + MessageToText(m));
  it->second.work->Wait();
  Values values = it->second.shape.Unpack(it->second.buffer);
  incoming_.erase(it);
  return values;
}

void StageRunner::ReapSends() {
  size_t done = 0;
  while (done < outgoing_.size() && outgoing_[done].work->Done()) ++done;
  if (done > 0) outgoing_.erase(outgoing_.begin(), outgoing_.begin() + static_cast<std::ptrdiff_t>(done));
}

void StageRunner::FinishStep() {
  for (Outgoing& o : outgoing_) o.work->Wait();
  outgoing_.clear();
  if (!incoming_.empty()) {
    throw std::logic_error("the " + MessageToText(incoming_.begin()->first) + " was received but never used in this step");
  }
  for (auto it = micro_.begin(); it != micro_.end();) {
    const Micro& m = it->second;
    if (!m.input.empty() || !m.root.empty() || m.to_send.defined()) {
      throw std::logic_error("stage " + std::to_string(it->first.first) + " still holds micro-batch " +
                             std::to_string(it->first.second) + " at the end of the step");
    }
    it = micro_.erase(it);
  }
  first_step_ = false;
  step_loss_ = HasLastStage() && loss_sum_.defined() ? loss_sum_.item<double>() / config_.microbatches : 0.0;
  inputs_.clear();
  targets_ = torch::Tensor();
  ClearWeightCopies();
}

}  // namespace gpipe::executor
