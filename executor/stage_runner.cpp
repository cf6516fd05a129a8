#include "executor/stage_runner.h"

#include <stdexcept>
#include <string>

namespace gpipe::executor {
namespace {

constexpr int kActivation = 0;
constexpr int kGradient = 1;
constexpr int kHeaderOffset = 2;  // header of kind k travels with tag kind k + 2
constexpr int kHeaderSize = 16;

// The default generator of `device`, whose state a remat stage replays so that dropout masks of
// the recomputed forward equal the first ones.
at::Generator GeneratorOf(const torch::Device& device) { return at::globalContext().defaultGenerator(device); }

torch::Tensor SaveRng(const torch::Device& device) {
  at::Generator gen = GeneratorOf(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void RestoreRng(const torch::Device& device, const torch::Tensor& state) {
  at::Generator gen = GeneratorOf(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace

StageRunner::StageRunner(RunnerConfig config, std::vector<StageSetup> stages, Communicator& comm)
    : config_(std::move(config)), stages_(std::move(stages)), comm_(comm) {
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

double StageRunner::StepLoss() const { return HasLastStage() ? loss_sum_ / config_.microbatches : 0.0; }

std::vector<torch::Tensor> StageRunner::Parameters() const {
  std::vector<torch::Tensor> params;
  for (const StageSetup& stage : stages_) {
    for (const torch::Tensor& p : ParametersOf(stage.layers)) params.push_back(p);
  }
  return params;
}

double StageRunner::Now() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start_).count();
}

void StageRunner::BeginStep(const Batch& replica_batch, std::chrono::steady_clock::time_point step_start) {
  // Only the first stage reads the inputs and only the last the targets: a rank holds neither
  // unless it runs that stage (the memory model counts no batch on the others).
  batch_ = {IsLocal(0) ? replica_batch.input.to(config_.device) : torch::Tensor(),
            IsLocal(config_.num_stages - 1) ? replica_batch.target.to(config_.device) : torch::Tensor()};
  step_start_ = step_start;
  loss_sum_ = 0;
}

ActionTime StageRunner::Execute(const std::vector<Action>& actions, size_t index) {
  const Action& a = actions[index];
  ReapSends();
  if (IsCompute(a.op)) {
    for (size_t j = index + 1; j < actions.size() && !IsCompute(actions[j].op); ++j) {
      if (IsRecv(actions[j].op)) PostReceive(actions[j], /*only_if_shape_known=*/true);
    }
  }
  ActionTime time;
  recompute_ms_ = 0;
  time.start_ms = Now();
  switch (a.op) {
    case Op::kForward: Forward(a); break;
    case Op::kBackward: Backward(a); break;
    case Op::kBackwardInput: BackwardInput(a); break;
    case Op::kBackwardWeight: BackwardWeight(a); break;
    case Op::kSendActivation: Send(a); break;
    case Op::kSendGradient: Send(a); break;
    case Op::kRecvActivation: Receive(a); break;
    case Op::kRecvGradient: Receive(a); break;
  }
  time.end_ms = Now();
  time.recompute_ms = recompute_ms_;
  return time;
}

torch::Tensor StageRunner::RunLayers(StageSetup& stage, torch::Tensor x, std::vector<torch::Tensor>* boundaries) {
  for (auto& layer : stage.layers) {
    x = layer->Forward(x);
    if (boundaries != nullptr) boundaries->push_back(x);
  }
  return x;
}

torch::Tensor StageRunner::Target(int microbatch) const {
  const int64_t b = batch_.target.size(0) / config_.microbatches;
  return batch_.target.narrow(0, microbatch * b, b);
}

void StageRunner::Forward(const Action& a) {
  StageSetup& stage = Stage(a.stage);
  Micro& m = MicroOf(a.stage, a.microbatch);
  torch::Tensor x;
  if (IsFirst(a.stage)) {
    const int64_t b = batch_.input.size(0) / config_.microbatches;
    x = batch_.input.narrow(0, a.microbatch * b, b);
  } else if (IsLocal(a.stage - 1)) {
    x = m.input;  // handed over by the previous stage's forward
  } else {
    x = TakeIncoming(kActivation, a.stage - 1, a.microbatch);
  }
  if (!x.defined()) throw std::logic_error("no input for " + ActionToText(a));
  torch::Tensor out;
  if (stage.remat) {
    m.rng_state = SaveRng(config_.device);
    torch::NoGradGuard no_grad;
    out = RunLayers(stage, x, nullptr);
    m.input = x.detach();
  } else {
    if (!IsFirst(a.stage)) x = x.detach().requires_grad_(true);
    m.input = x;
    out = RunLayers(stage, x, config_.split_backward && IsFirst(a.stage) ? &m.boundaries : nullptr);
  }
  if (IsLast(a.stage)) {
    torch::Tensor loss = LossOf(*config_.model, out, Target(a.microbatch));
    loss_sum_ += loss.detach().item<double>();
    if (!stage.remat) m.root = loss * config_.loss_scale;
    return;
  }
  if (!stage.remat) m.root = out;
  if (IsLocal(a.stage + 1)) {
    MicroOf(a.stage + 1, a.microbatch).input = out.detach();
  } else {
    m.to_send = out.detach();
  }
}

torch::Tensor StageRunner::PrepareBackward(const Action& a, bool keep_boundaries) {
  StageSetup& stage = Stage(a.stage);
  Micro& m = MicroOf(a.stage, a.microbatch);
  if (stage.remat) {
    const double start = Now();
    torch::Tensor now_state = SaveRng(config_.device);
    RestoreRng(config_.device, *m.rng_state);
    torch::Tensor x = IsFirst(a.stage) ? m.input : m.input.detach().requires_grad_(true);
    m.input = x;
    m.boundaries.clear();
    torch::Tensor out = RunLayers(stage, x, keep_boundaries ? &m.boundaries : nullptr);
    RestoreRng(config_.device, now_state);
    m.root = IsLast(a.stage) ? LossOf(*config_.model, out, Target(a.microbatch)) * config_.loss_scale : out;
    recompute_ms_ = Now() - start;
  }
  if (!m.root.defined()) throw std::logic_error("backward before forward at " + ActionToText(a));
  return m.root;
}

torch::Tensor StageRunner::GradOutput(const Action& a) {
  Micro& m = MicroOf(a.stage, a.microbatch);
  if (IsLast(a.stage)) return {};
  if (IsLocal(a.stage + 1)) {
    if (!m.grad_output.defined()) throw std::logic_error("no output gradient for " + ActionToText(a));
    return m.grad_output;
  }
  m.grad_output = TakeIncoming(kGradient, a.stage + 1, a.microbatch);
  return m.grad_output;
}

void StageRunner::HandBackInputGrad(const Action& a, const torch::Tensor& grad) {
  if (IsFirst(a.stage)) return;
  torch::Tensor g = grad.defined() ? grad : torch::zeros_like(MicroOf(a.stage, a.microbatch).input);
  if (IsLocal(a.stage - 1)) {
    MicroOf(a.stage - 1, a.microbatch).grad_output = g;
  } else {
    MicroOf(a.stage, a.microbatch).to_send = g;
  }
}

void StageRunner::Backward(const Action& a) {
  torch::Tensor root = PrepareBackward(a, false);
  torch::Tensor grad = GradOutput(a);
  if (grad.defined()) {
    torch::autograd::backward({root}, {grad});
  } else {
    torch::autograd::backward({root});
  }
  HandBackInputGrad(a, IsFirst(a.stage) ? torch::Tensor() : MicroOf(a.stage, a.microbatch).input.grad());
  ReleaseMicro(a);
}

void StageRunner::ReleaseMicro(const Action& a) {
  auto it = micro_.find({a.stage, a.microbatch});
  if (it == micro_.end()) return;
  torch::Tensor to_send = std::move(it->second.to_send);
  micro_.erase(it);
  if (to_send.defined()) MicroOf(a.stage, a.microbatch).to_send = std::move(to_send);
}

void StageRunner::BackwardInput(const Action& a) {
  // The first stage's input needs no gradient: its layers' outputs are where I stops instead, so
  // that W still holds only weight gradients.
  const bool first = IsFirst(a.stage);
  torch::Tensor root = PrepareBackward(a, /*keep_boundaries=*/first);
  torch::Tensor grad = GradOutput(a);
  Micro& m = MicroOf(a.stage, a.microbatch);
  std::vector<torch::Tensor> anchor_grads;
  m.weight_pass = executor::BackwardInput(root, grad, first ? m.boundaries : std::vector<torch::Tensor>{m.input},
                                          ParametersOf(Stage(a.stage).layers), &anchor_grads);
  m.boundaries.clear();
  HandBackInputGrad(a, first ? torch::Tensor() : anchor_grads.front());
}

void StageRunner::BackwardWeight(const Action& a) {
  MicroOf(a.stage, a.microbatch).weight_pass.Run();
  ReleaseMicro(a);
}

void StageRunner::Send(const Action& a) {
  const int kind = a.op == Op::kSendActivation ? kActivation : kGradient;
  const int peer_stage = kind == kActivation ? a.stage + 1 : a.stage - 1;
  const int peer = config_.stage_process[static_cast<size_t>(peer_stage)];
  Micro& m = MicroOf(a.stage, a.microbatch);
  if (!m.to_send.defined()) throw std::logic_error("nothing to send at " + ActionToText(a));
  torch::Tensor tensor = m.to_send.contiguous();
  m.to_send = torch::Tensor();
  if (header_sent_.insert({kind, a.stage}).second) {
    torch::Tensor header = torch::zeros({kHeaderSize}, torch::kLong);
    header[0] = tensor.dim();
    header[1] = static_cast<int64_t>(tensor.scalar_type());
    for (int64_t d = 0; d < tensor.dim(); ++d) header[2 + d] = tensor.size(d);
    header = header.to(config_.device);
    outgoing_.push_back({header, comm_.Send(header, peer, MessageTag(kind + kHeaderOffset, a.stage, 0))});
  }
  outgoing_.push_back({tensor, comm_.Send(tensor, peer, MessageTag(kind, a.stage, a.microbatch))});
  // Nothing of this micro-batch is left on a stage whose backward is done.
  auto it = micro_.find({a.stage, a.microbatch});
  if (it != micro_.end() && !it->second.input.defined() && !it->second.root.defined()) micro_.erase(it);
}

std::tuple<int, int, int> StageRunner::IncomingKey(const Action& a) {
  const int kind = a.op == Op::kRecvActivation ? kActivation : kGradient;
  return {kind, kind == kActivation ? a.stage - 1 : a.stage + 1, a.microbatch};
}

void StageRunner::PostReceive(const Action& a, bool only_if_shape_known) {
  const auto key = IncomingKey(a);
  const auto [kind, from_stage, microbatch] = key;
  if (incoming_.count(key) > 0) return;
  auto shape = shapes_.find({kind, from_stage});
  if (shape == shapes_.end()) {
    if (only_if_shape_known) return;
    const int peer = config_.stage_process[static_cast<size_t>(from_stage)];
    torch::Tensor header = torch::zeros({kHeaderSize}, torch::TensorOptions().dtype(torch::kLong).device(config_.device));
    comm_.Recv(header, peer, MessageTag(kind + kHeaderOffset, from_stage, 0))->Wait();
    header = header.cpu();
    const int64_t dims = header[0].item<int64_t>();
    if (dims < 0 || dims > kHeaderSize - 2) throw std::runtime_error("bad shape header from rank " + std::to_string(peer));
    std::vector<int64_t> sizes;
    for (int64_t d = 0; d < dims; ++d) sizes.push_back(header[2 + d].item<int64_t>());
    shape = shapes_.emplace(std::make_pair(kind, from_stage),
                            std::make_pair(sizes, static_cast<c10::ScalarType>(header[1].item<int64_t>()))).first;
  }
  const int peer = config_.stage_process[static_cast<size_t>(from_stage)];
  torch::Tensor buffer = torch::empty(shape->second.first, torch::TensorOptions().dtype(shape->second.second).device(config_.device));
  std::unique_ptr<PendingWork> work = comm_.Recv(buffer, peer, MessageTag(kind, from_stage, microbatch));
  incoming_.emplace(key, Incoming{buffer, std::move(work)});
}

void StageRunner::Receive(const Action& a) {
  PostReceive(a, /*only_if_shape_known=*/false);
  incoming_.at(IncomingKey(a)).work->Wait();
}

torch::Tensor StageRunner::TakeIncoming(int kind, int stage, int microbatch) {
  auto it = incoming_.find({kind, stage, microbatch});
  if (it == incoming_.end()) {
    throw std::logic_error("no receive was posted for the " + std::string(kind == kActivation ? "activation" : "gradient") +
                           " of stage " + std::to_string(stage) + ", micro-batch " + std::to_string(microbatch));
  }
  it->second.work->Wait();
  torch::Tensor tensor = it->second.buffer;
  incoming_.erase(it);
  return tensor;
}

void StageRunner::ReapSends() {
  size_t done = 0;
  while (done < outgoing_.size() && outgoing_[done].work->Done()) ++done;
  if (done > 0) outgoing_.erase(outgoing_.begin(), outgoing_.begin() + static_cast<std::ptrdiff_t>(done));
}

void StageRunner::FinishStep() {
  for (Outgoing& o : outgoing_) o.work->Wait();
  outgoing_.clear();
  if (!incoming_.empty()) throw std::logic_error("a receive was posted but never used in this step");
  for (auto it = micro_.begin(); it != micro_.end();) {
    const Micro& m = it->second;
    if (m.input.defined() || m.root.defined() || m.to_send.defined()) {
      throw std::logic_error("stage " + std::to_string(it->first.first) + " still holds micro-batch " +
                             std::to_string(it->first.second) + " at the end of the step");
    }
    it = micro_.erase(it);
  }
}

}  // namespace gpipe::executor
