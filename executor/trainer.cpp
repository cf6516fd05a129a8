#include "executor/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "core/schedule/placement.h"
#include "executor/action_clock.h"
#include "executor/checkpoint.h"
#include "executor/exception_text.h"
#include "executor/data.h"
#include "executor/launcher.h"
#include "executor/layers.h"
#include "executor/memory_meter.h"
#include "executor/optimizer_shard.h"
#include "executor/precision.h"
#include "executor/stage_runner.h"
#include "executor/weights.h"

namespace gpipe::executor {
namespace {

// Sums gradients (and the loss, on last-stage ranks) over the replicas of this pipeline rank.
double SumOverReplicas(Communicator& comm, const std::vector<int>& group, std::vector<torch::Tensor> params,
                       bool has_loss, double loss, const torch::Device& device) {
  std::vector<torch::Tensor> pieces;
  for (torch::Tensor& p : params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);  // a parameter the step did not reach
    pieces.push_back(p.grad().reshape({-1}));
  }
  // On the rank's device even when the stage has no parameters: NCCL takes GPU tensors only.
  if (has_loss) pieces.push_back(torch::full({1}, loss, torch::TensorOptions().dtype(torch::kFloat).device(device)));
  torch::Tensor flat = torch::cat(pieces);
  comm.AllReduceSum(flat, group);
  int64_t offset = 0;
  for (const torch::Tensor& p : params) {
    const int64_t n = p.numel();
    p.grad().copy_(flat.narrow(0, offset, n).view_as(p));
    offset += n;
  }
  return has_loss ? flat[offset].item<double>() / static_cast<double>(group.size()) : 0.0;
}

std::string StageList(const std::vector<int>& stages) {
  std::string text;
  for (int s : stages) text += (text.empty() ? "" : ",") + std::to_string(s);
  return text;
}

// A parameter this rank holds that other ranks of its replica hold too.
struct SharedGroup {
  torch::Tensor parameter;
  std::vector<int> ranks;  // sorted process ranks, this one among them
};

Expected<std::vector<SharedGroup>> SharedGroupsOf(const Plan& plan, const ModelSpec& model, const Schedule& lowered,
                                                  int replica, int rank, std::vector<StageSetup>& stages) {
  Expected<std::vector<SharedParameter>> shared = SharedParametersOf(model);
  if (!shared.ok()) return shared.status();
  std::map<int, Layer*> mine;
  for (StageSetup& stage : stages) {
    const StagePlan& sp = plan.stages[static_cast<size_t>(stage.stage)];
    for (int l = sp.first_layer; l < sp.end_layer; ++l) mine[l] = stage.layers[static_cast<size_t>(l - sp.first_layer)].get();
  }
  GPIPE_RETURN_IF_ERROR(TieParameters(*shared, mine));
  std::vector<SharedGroup> groups;
  for (const SharedParameter& p : *shared) {
    std::set<int> ranks;
    torch::Tensor parameter;
    for (size_t k = 0; k < p.layers.size(); ++k) {
      for (int s = 0; s < plan.num_stages(); ++s) {
        const StagePlan& sp = plan.stages[static_cast<size_t>(s)];
        if (p.layers[k] < sp.first_layer || p.layers[k] >= sp.end_layer) continue;
        ranks.insert(plan.DeviceOf(replica, lowered.stage_rank[static_cast<size_t>(s)]));
      }
      if (auto it = mine.find(p.layers[k]); it != mine.end() && !parameter.defined()) {
        parameter = it->second->ParameterNamed(p.names[k]);
      }
    }
    if (parameter.defined() && ranks.size() > 1 && ranks.count(rank) > 0) {
      groups.push_back({parameter, std::vector<int>(ranks.begin(), ranks.end())});
    }
  }
  return groups;
}

// Every holder of a shared parameter ends the step with the sum of their gradients, in the same
// order on every rank (the order of the model's ties).
void SumSharedGradients(Communicator& comm, const std::vector<SharedGroup>& groups) {
  for (const SharedGroup& g : groups) {
    torch::Tensor p = g.parameter;
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    torch::Tensor grad = p.grad();
    comm.AllReduceSum(grad, g.ranks);
  }
}

// The squared L2 norm of the whole model's gradient: this rank's share (on replica 0 only, the
// replicas holding the same summed gradients; a tied parameter on the lowest of its ranks only)
// summed over every rank.
//
// With a sharded optimizer (`shard` not null) each replica holds the summed gradient of its range
// only: every replica counts its pieces (those of a tied parameter on the lowest of its ranks only).
double GlobalSquaredGradNorm(Communicator& comm, const std::vector<torch::Tensor>& params,
                             const std::vector<SharedGroup>& shared, int replica, const torch::Device& device,
                             const OptimizerShard* shard = nullptr) {
  const auto counts = [&](const torch::Tensor& p) {
    const auto tie = std::find_if(shared.begin(), shared.end(),
                                  [&p](const SharedGroup& g) { return g.parameter.is_same(p); });
    return tie == shared.end() || tie->ranks.front() == comm.rank();
  };
  std::vector<torch::Tensor> counted;
  if (shard == nullptr) {
    for (const torch::Tensor& p : params) {
      if (counts(p) && p.grad().defined()) counted.push_back(p.grad());
    }
  } else {
    for (size_t k = 0; k < shard->pieces().size(); ++k) {
      const torch::Tensor& piece = shard->pieces()[k];
      if (counts(shard->owner(k)) && piece.grad().defined()) counted.push_back(piece.grad());
    }
  }
  torch::Tensor sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  if (replica == 0 || shard != nullptr) {
    for (const torch::Tensor& g : counted) sum += g.detach().to(torch::kFloat64).pow(2).sum();
  }
  if (comm.size() > 1) {
    std::vector<int> everyone(static_cast<size_t>(comm.size()));
    for (int r = 0; r < comm.size(); ++r) everyone[static_cast<size_t>(r)] = r;
    comm.AllReduceSum(sum, everyone);
  }
  return sum.item<double>();
}

// Drops every gradient of `params` (the optimizer's zero_grad, whichever tensors it updates).
void ZeroGradients(const std::vector<torch::Tensor>& params) {
  for (const torch::Tensor& p : params) {
    torch::Tensor t = p;
    t.mutable_grad().reset();
  }
}

// Sums the loss (last-stage ranks) over the replicas: the sharded optimizer's gradients travel
// apart from it.
double SumLossOverReplicas(Communicator& comm, const std::vector<int>& group, double loss, const torch::Device& device) {
  torch::Tensor total = torch::full({1}, loss, torch::TensorOptions().dtype(torch::kFloat).device(device));
  comm.AllReduceSum(total, group);
  return total.item<double>() / static_cast<double>(group.size());
}

// Sets one gradient element of the first parameter with one to inf, as an fp16 overflow would.
void InjectInf(const std::vector<torch::Tensor>& params) {
  for (const torch::Tensor& p : params) {
    if (!p.grad().defined()) continue;
    p.grad().view({-1})[0].fill_(std::numeric_limits<double>::infinity());
    return;
  }
}

// The mean loss of `batches` evaluation batches: each runs the rank's actions of a step with the
// layers in eval mode (dropout off, batch norm's running statistics), its gradients dropped and no
// update; the last stage's loss averaged over the replicas. Every rank calls it at the same step.
double Evaluate(StageRunner& runner, const std::vector<Action>& actions, const DataSource& data, const Plan& plan,
                int replica, int batches, Communicator& comm, const std::vector<int>& group,
                const std::vector<torch::Tensor>& params, ActionClock& clock, const torch::Device& device) {
  const int64_t replica_batch = plan.global_batch / plan.replicas;
  const auto set_training = [&runner](bool training) {
    for (StageSetup& stage : runner.stages()) {
      for (auto& layer : stage.layers) layer->SetTraining(training);
    }
  };
  set_training(false);
  double sum = 0;
  for (int b = 0; b < batches; ++b) {
    comm.Barrier();
    clock.BeginStep();
    runner.BeginStep(Slice(data.EvalBatch(b, plan.global_batch), replica * replica_batch, replica_batch));
    for (size_t index = 0; index < actions.size(); ++index) runner.Execute(actions, index);
    runner.FinishStep();
    clock.EndStep();
    sum += runner.StepLoss();
    ZeroGradients(params);
  }
  set_training(true);
  double loss = sum / batches;
  if (plan.replicas > 1 && runner.HasLastStage()) {
    torch::Tensor total = torch::full({1}, loss, torch::TensorOptions().dtype(torch::kFloat64).device(device));
    comm.AllReduceSum(total, group);
    loss = total.item<double>() / plan.replicas;
  }
  return loss;
}

}  // namespace

std::string RunFingerprint(const Plan& plan, const ModelSpec& model) {
  std::ostringstream out;
  out << "plan " << ScheduleName(plan.schedule) << " K=" << plan.num_ranks() << " D=" << plan.replicas
      << " M=" << plan.microbatches << " batch=" << plan.global_batch << " " << OptimizerName(plan.optimizer)
      << " " << PlacementName(plan.placement) << (plan.sharded_optimizer ? " zero-1" : "") << " stages";
  for (const StagePlan& s : plan.stages) out << " [" << s.first_layer << "," << s.end_layer << ")@" << s.rank;
  nlohmann::json layers = ModelToJson(model);
  layers.erase("data");
  layers.erase("training");  // a run may resume with other settings or a longer schedule
  out << "; model " << model.name << " #" << std::hex << std::hash<std::string>{}(layers.dump());
  return out.str();
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const Plan& plan, const ModelSpec& model,
                                                       const std::vector<torch::Tensor>& params) {
  std::vector<bool> matrix;
  for (const torch::Tensor& p : params) matrix.push_back(p.dim() >= 2);
  return MakeOptimizer(plan, model, params, matrix);
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const Plan& plan, const ModelSpec& model,
                                                       const std::vector<torch::Tensor>& tensors,
                                                       const std::vector<bool>& matrix) {
  const TrainingSpec& t = model.training;
  // Two groups: the decayed parameters and the one-dimensional ones (biases, norms), decayed only
  // with decay_1d. Their split depends on the parameters alone, so a checkpoint's optimizer state
  // loads whatever the settings.
  std::vector<torch::Tensor> matrices, vectors;
  for (size_t k = 0; k < tensors.size(); ++k) (matrix[k] ? matrices : vectors).push_back(tensors[k]);
  const double vector_decay = t.decay_1d ? t.weight_decay : 0.0;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  const auto add = [&groups](std::vector<torch::Tensor> group, auto options) {
    if (!group.empty()) groups.emplace_back(std::move(group), std::make_unique<decltype(options)>(options));
  };
  const double lr = LearningRateAt(t, 0);
  switch (plan.optimizer) {
    case Optimizer::kSgd:
    case Optimizer::kMomentum: {
      const double momentum = plan.optimizer == Optimizer::kMomentum ? t.momentum : 0.0;
      const auto options = [&](double decay) { return torch::optim::SGDOptions(lr).momentum(momentum).weight_decay(decay); };
      add(std::move(matrices), options(t.weight_decay));
      add(std::move(vectors), options(vector_decay));
      return std::make_unique<torch::optim::SGD>(std::move(groups), options(t.weight_decay));
    }
    case Optimizer::kAdam:
    case Optimizer::kAdamMixed: {
      const auto options = [&](double decay) {
        return torch::optim::AdamWOptions(lr).betas({t.betas[0], t.betas[1]}).eps(t.eps).weight_decay(decay);
      };
      add(std::move(matrices), options(t.weight_decay));
      add(std::move(vectors), options(vector_decay));
      return std::make_unique<torch::optim::AdamW>(std::move(groups), options(t.weight_decay));
    }
  }
  return nullptr;
}

void SetLearningRate(torch::optim::Optimizer& optimizer, double learning_rate) {
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) group.options().set_lr(learning_rate);
}

double ClipGradients(const std::vector<torch::Tensor>& params, double squared_norm, double max_norm) {
  const double norm = std::sqrt(squared_norm);
  if (max_norm <= 0) return norm;
  // As torch.nn.utils.clip_grad_norm_: the coefficient clamped at 1, every gradient multiplied.
  const double coefficient = std::min(1.0, max_norm / (norm + 1e-6));
  for (const torch::Tensor& p : params) {
    if (p.grad().defined()) p.grad().mul_(coefficient);
  }
  return norm;
}

Expected<RankOutcome> TrainRank(const Plan& plan, const ModelSpec& model, const Schedule& lowered,
                                Communicator& comm, const TrainOptions& options) {
  GPIPE_RETURN_IF_ERROR(CheckExecutorRuns(plan, "the plan"));
  const int K = plan.num_ranks(), D = plan.replicas, M = plan.microbatches;
  int replica = -1, prank = -1;
  for (int d = 0; d < D; ++d) {
    for (int r = 0; r < K; ++r) {
      if (plan.DeviceOf(d, r) == comm.rank()) replica = d, prank = r;
    }
  }
  if (prank < 0) {
    return Status::Invalid("process rank " + std::to_string(comm.rank()) + " has no place in the plan (K=" +
                           std::to_string(K) + ", D=" + std::to_string(D) + "); start K x D = " +
                           std::to_string(K * D) + " ranks");
  }
  const std::string who = "rank " + std::to_string(comm.rank());
  // Opened before the meter starts: the data source's own tensors (the text's tokens, the
  // synthetic images' class prototypes) are the input pipeline's, held on the host in a job on
  // GPUs, not the model's memory that the plan predicts.
  Expected<DataSource> data = DataSource::Open(model);
  if (!data.ok()) return data.status().WithContext(who);
  MemoryMeter meter(options.device);

  RankOutcome outcome;
  outcome.memory_measure = meter.Describe();
  outcome.record.rank = comm.rank();
  outcome.record.replica = replica;
  outcome.record.pipeline_rank = prank;
  std::vector<StageSetup> stages;
  for (int s = 0; s < plan.num_stages(); ++s) {
    if (lowered.stage_rank[static_cast<size_t>(s)] != prank) continue;
    const StagePlan& sp = plan.stages[static_cast<size_t>(s)];
    auto layers = BuildLayers(model, sp.first_layer, sp.end_layer, options.device);
    if (!layers.ok()) return layers.status().WithContext(who);
    stages.push_back({s, sp.recomputed_layers(), std::move(*layers)});
    outcome.record.stages.push_back(s);
  }
  // Tied parameters: one tensor on this rank (its stages were built apart), and a sum of the
  // gradients over the ranks of this replica that hold one (as GPipe and Megatron do for a tied
  // embedding and LM head).
  Expected<std::vector<SharedGroup>> shared = SharedGroupsOf(plan, model, lowered, replica, comm.rank(), stages);
  if (!shared.ok()) return shared.status().WithContext(who);
  RunnerConfig config;
  config.model = &model;
  config.num_stages = plan.num_stages();
  config.microbatches = M;
  for (int s = 0; s < plan.num_stages(); ++s) {
    config.stage_process.push_back(plan.DeviceOf(replica, lowered.stage_rank[static_cast<size_t>(s)]));
  }
  config.loss_scale = 1.0 / (static_cast<double>(M) * D);
  config.device = options.device;
  config.split_backward = SplitsBackward(plan.schedule);
  config.compute_type = ComputeType(plan.precision());
  const double loss_scale = config.loss_scale;
  LossScaler scaler = plan.precision() == "fp16" ? LossScaler::ForFp16() : LossScaler();
  ActionClock clock(options.device, options.timeout);
  outcome.clock = clock.name();
  StageRunner runner(config, std::move(stages), RankWireOf(lowered, prank, options.posting), comm, clock);
  if (!options.init_weights.empty() && !options.resume) {
    GPIPE_RETURN_IF_ERROR(LoadWeights(options.init_weights, plan, model, runner.stages()).WithContext(who));
  }
  outcome.record.parameter_bytes = meter.CurrentBytes();  // the layers as built, nothing else yet
  outcome.has_last_stage = runner.HasLastStage();
  const std::vector<torch::Tensor> params = runner.Parameters();
  std::vector<int> group;
  for (int d = 0; d < D; ++d) group.push_back(plan.DeviceOf(d, prank));
  std::sort(group.begin(), group.end());
  // ZeRO-1: the optimizer updates (and keeps state for) this replica's range of the parameters.
  std::optional<OptimizerShard> shard;
  if (plan.sharded_optimizer && D > 1) shard.emplace(params, group, comm.rank());
  std::unique_ptr<torch::optim::Optimizer> optimizer =
      shard ? MakeOptimizer(plan, model, shard->pieces(), shard->matrix()) : MakeOptimizer(plan, model, params);
  // What the optimizer updates, whose gradients clipping and loss scaling scale.
  const std::vector<torch::Tensor>& updated = shard ? shard->pieces() : params;

  int first_step = 0;
  const std::string fingerprint = RunFingerprint(plan, model);
  if (options.resume) {
    Expected<std::optional<CheckpointInfo>> latest = LatestCheckpoint(options.checkpoint_dir);
    if (!latest.ok()) return latest.status().WithContext(who);
    if (!latest->has_value()) {
      return Status::Invalid(who + ": --resume: " + options.checkpoint_dir + " holds no checkpoint yet; run without --resume");
    }
    const CheckpointInfo& info = **latest;
    if (info.fingerprint != fingerprint) {
      return Status::Invalid(who + ": --resume: the checkpoint in " + options.checkpoint_dir +
                             " is of another plan or model:\n  checkpoint: " + info.fingerprint +
                             "\n  this run:   " + fingerprint + "\nresume with the plan and model it was made with, "
                             "or use a fresh --checkpoint-dir");
    }
    GPIPE_RETURN_IF_ERROR(LoadRankState(options.checkpoint_dir, info.step, comm.rank(), runner.stages(), *optimizer)
                              .WithContext(who));
    first_step = info.step;
  }

  const std::vector<Action>& actions = lowered.ranks[static_cast<size_t>(prank)];
  const bool clips = model.training.clip_grad_norm > 0;
  const int64_t replica_batch = plan.global_batch / D;
  for (int step = first_step; step < options.steps; ++step) {
    {
      // Dropout draws from the process-wide generator: reseeding it per step and rank makes a
      // resumed run draw what an uninterrupted one would.
      std::lock_guard<std::mutex> lock(GlobalRngMutex());
      torch::manual_seed(model.seed * 1000003ull + static_cast<uint64_t>(step) * 7919ull + static_cast<uint64_t>(comm.rank()));
    }
    size_t index = 0;
    try {
      comm.Barrier();
      clock.BeginStep();
      // (The sharded optimizer's pieces hold no gradient here: zero_grad would detach the views.)
      optimizer->zero_grad(/*set_to_none=*/true);
      if (shard) shard->BeginStep();
      runner.SetLossScale(loss_scale * scaler.scale());
      meter.ResetPeak();
      outcome.record.step_start_memory_bytes.push_back(meter.CurrentBytes());
      // A temporary: the runner copies what its stages read, and the rest is freed here.
      runner.BeginStep(Slice(data->GlobalBatch(step, plan.global_batch), replica * replica_batch, replica_batch));
      int64_t step_peak = meter.CurrentBytes();
      std::vector<std::pair<ActionMarks, ActionRecord>> timed;  // times are read once the step is over
      for (index = 0; index < actions.size(); ++index) {
        meter.ResetPeak();  // each action's own peak; the step's is their maximum
        const ActionMarks marks = runner.Execute(actions, index);
        step_peak = std::max(step_peak, meter.PeakBytes());
        outcome.record.peak_reserved_bytes = std::max(outcome.record.peak_reserved_bytes, meter.PeakReservedBytes());
        timed.push_back({marks, {step, actions[index], 0, 0, 0, meter.CurrentBytes(), meter.PeakBytes()}});
      }
      meter.ResetPeak();
      runner.FinishStep();
      // Before the sums between tied ranks and replicas, as an overflow in the backward would be.
      if (options.inject_inf && options.inject_inf->first == step && options.inject_inf->second == comm.rank()) {
        InjectInf(params);
      }
      double loss = runner.StepLoss();
      SumSharedGradients(comm, *shared);
      if (shard) {
        shard->ReduceScatterGradients(comm);
        if (runner.HasLastStage()) loss = SumLossOverReplicas(comm, group, loss, options.device);
      } else if (D > 1) {
        loss = SumOverReplicas(comm, group, params, runner.HasLastStage(), loss, options.device);
      }
      const double learning_rate = LearningRateAt(model.training, step);
      std::optional<double> grad_norm;
      const double used_scale = scaler.scale();
      bool skipped = false;
      // Sharded, the norm is summed before the update, whose summed range goes before the gather.
      if (clips || scaler.dynamic() || shard) {
        double squared = GlobalSquaredGradNorm(comm, params, *shared, replica, options.device, shard ? &*shard : nullptr);
        // Every rank has the same sum, so every rank reaches the same verdict and the same scale.
        skipped = !scaler.Update(std::isfinite(squared));
        if (scaler.dynamic() && !skipped) {
          for (const torch::Tensor& p : updated) {
            if (p.grad().defined()) p.grad().div_(used_scale);
          }
          squared /= used_scale * used_scale;
        }
        grad_norm = skipped ? std::sqrt(squared) : ClipGradients(updated, squared, model.training.clip_grad_norm);
      }
      if (!skipped) {
        SetLearningRate(*optimizer, learning_rate);
        optimizer->step();
      }
      if (shard) {
        shard->ReleaseShardGradient();
        shard->AllGatherWeights(comm);
      }
      const double time_ms = clock.EndStep();
      // Without clipping the step does not need the norm: it is summed after the step's clock
      // stops, from the gradients the update used.
      if (!grad_norm) grad_norm = std::sqrt(GlobalSquaredGradNorm(comm, params, *shared, replica, options.device));
      for (auto& [marks, action] : timed) {
        action.start_ms = clock.At(marks.start);
        action.end_ms = clock.At(marks.end);
        if (marks.recompute_start >= 0) action.recompute_ms = clock.At(marks.recompute_end) - clock.At(marks.recompute_start);
        outcome.record.actions.push_back(action);
      }
      outcome.steps.push_back({step, loss, time_ms, learning_rate, grad_norm, std::nullopt,
                               scaler.dynamic() ? std::optional<double>(used_scale) : std::nullopt, skipped});
      step_peak = std::max(step_peak, meter.PeakBytes());
      outcome.record.peak_reserved_bytes = std::max(outcome.record.peak_reserved_bytes, meter.PeakReservedBytes());
      outcome.record.step_peak_memory_bytes.push_back(step_peak);
      outcome.record.peak_memory_bytes = std::max(outcome.record.peak_memory_bytes, step_peak);
      // After the step's times and memory are read: evaluation is neither.
      if (options.eval_every > 0 && ((step + 1) % options.eval_every == 0 || step + 1 == options.steps)) {
        outcome.steps.back().eval_loss = Evaluate(runner, actions, *data, plan, replica, options.eval_batches, comm, group,
                                                  params, clock, options.device);
      }
      if (options.on_step) options.on_step(outcome.steps.back(), options.steps);
    } catch (const std::exception& e) {
      // Noted here, before this rank's teardown closes its connections: a peer that only loses
      // its connection to this rank notes its own failure later.
      RecordRankFailure(comm.rank());
      std::string where = "model " + model.name + ", " + who + " (stages " + StageList(outcome.record.stages) + "), step " + std::to_string(step);
      if (index < actions.size()) {
        where += ", action " + ActionToText(actions[index]) + " (" + std::to_string(index + 1) + " of " +
                 std::to_string(actions.size()) + ")";
      }
      return Status::Invalid(where + ": " + ExceptionText(e));
    }
    const bool last = step + 1 == options.steps;
    if (!options.checkpoint_dir.empty() && options.checkpoint_every > 0 &&
        ((step + 1) % options.checkpoint_every == 0 || last)) {
      GPIPE_RETURN_IF_ERROR(SaveRankState(options.checkpoint_dir, step + 1, comm.rank(), runner.stages(), *optimizer)
                                .WithContext(who));
      try {
        GPIPE_RETURN_IF_ERROR(SaveWeights(CheckpointWeightsPath(options.checkpoint_dir, step + 1), plan, model, replica,
                                          comm, runner.stages())
                                  .WithContext(who));
        comm.Barrier();
        if (comm.rank() == 0) {
          GPIPE_RETURN_IF_ERROR(CommitCheckpoint(options.checkpoint_dir, {step + 1, fingerprint, comm.size()}));
        }
        comm.Barrier();
      } catch (const std::exception& e) {
        return Status::Invalid(who + ": while committing the checkpoint after step " + std::to_string(step + 1) +
                               ": " + e.what());
      }
    }
  }
  if (!options.save_weights.empty()) {
    try {
      GPIPE_RETURN_IF_ERROR(SaveWeights(options.save_weights, plan, model, replica, comm, runner.stages()).WithContext(who));
    } catch (const std::exception& e) {
      return Status::Invalid(who + ": while writing --save-weights " + options.save_weights + ": " + e.what());
    }
  }
  for (const torch::Tensor& p : params) outcome.parameters.push_back(p.detach().cpu());
  return outcome;
}

RunRecord MergeOutcomes(const Plan& plan, const ModelSpec& model, std::vector<RankOutcome> outcomes) {
  std::sort(outcomes.begin(), outcomes.end(),
            [](const RankOutcome& a, const RankOutcome& b) { return a.record.rank < b.record.rank; });
  RunRecord record;
  record.model = model.name;
  record.schedule = ScheduleName(plan.schedule);
  record.global_batch = plan.global_batch;
  record.microbatches = plan.microbatches;
  record.num_ranks = plan.num_ranks();
  record.replicas = plan.replicas;
  record.precision = plan.precision();
  if (!outcomes.empty()) {
    record.memory_measure = outcomes.front().memory_measure;
    record.clock = outcomes.front().clock;
  }
  const RankOutcome* loss_rank = nullptr;
  for (const RankOutcome& o : outcomes) {
    if (o.has_last_stage && o.record.replica == 0) loss_rank = &o;
  }
  size_t steps = outcomes.empty() ? 0 : outcomes.front().steps.size();
  for (const RankOutcome& o : outcomes) steps = std::min(steps, o.steps.size());
  for (size_t i = 0; i < steps; ++i) {
    StepRecord s = outcomes.front().steps[i];
    for (const RankOutcome& o : outcomes) s.time_ms = std::max(s.time_ms, o.steps[i].time_ms);
    s.loss = loss_rank != nullptr ? loss_rank->steps[i].loss : 0.0;
    s.eval_loss = loss_rank != nullptr ? loss_rank->steps[i].eval_loss : std::nullopt;
    record.steps.push_back(s);
  }
  record.throughput_samples_per_s = ThroughputOf(record.steps, plan.global_batch);
  for (RankOutcome& o : outcomes) record.ranks.push_back(std::move(o.record));
  return record;
}

}  // namespace gpipe::executor
