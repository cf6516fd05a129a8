#include "executor/step_cost_prober.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/plan.h"
#include "core/schedule/generators.h"
#include "executor/data.h"
#include "executor/host_memory.h"
#include "executor/layers.h"
#include "executor/local_communicator.h"
#include "executor/precision.h"
#include "executor/profiler.h"
#include "executor/stage_runner.h"
#include "executor/trainer.h"

namespace gpipe::executor {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// `body` run settings.warmup times unmeasured, then settings.repeats times: those times.
std::vector<double> Sample(const ProfileSettings& settings, const std::function<void()>& body) {
  for (int i = 0; i < settings.warmup; ++i) body();
  std::vector<double> samples;
  for (int i = 0; i < settings.repeats; ++i) samples.push_back(DeviceTimeMs(settings.device, body));
  return samples;
}

Measured Scaled(std::vector<double> samples, double factor) {
  const Timing t = Summarize(std::move(samples));
  return {t.median_ms * factor, t.spread_ms * factor};
}

// What the executor adds to each forward and each backward action: a one-stage runner (no peers)
// runs GPipe over four micro-batches of `one`'s size, round after round, interleaved
// with the same forwards and backwards run directly on the layers; per round, the mean action time
// of each kind minus the mean direct time.
std::pair<Measured, Measured> ActionOverheads(const ModelSpec& model, const ProfileSettings& settings,
                                              std::vector<std::unique_ptr<Layer>> layers, const Batch& one) {
  constexpr int kMicrobatches = 4;
  Batch batch{one.input.repeat_interleave(kMicrobatches, 0), one.target.repeat_interleave(kMicrobatches, 0)};
  RunnerConfig config;
  config.model = &model;
  config.num_stages = 1;
  config.microbatches = kMicrobatches;
  config.stage_process = {0};
  config.loss_scale = 1.0 / kMicrobatches;
  config.device = settings.device;
  config.compute_type = ComputeType(settings.precision);
  std::shared_ptr<LocalHub> hub = std::make_shared<LocalHub>(1, std::chrono::milliseconds(60000));
  std::unique_ptr<Communicator> comm = MakeLocalCommunicator(hub, 0);
  std::vector<StageSetup> stages(1);
  stages[0].layers = std::move(layers);
  const Schedule schedule = GenerateGpipe(1, kMicrobatches);
  ActionClock clock(settings.device);
  StageRunner runner(config, std::move(stages), RankWireOf(schedule, 0), *comm, clock);
  const std::vector<Action>& actions = schedule.ranks[0];
  std::vector<double> forward, backward;
  for (int round = 0; round < settings.warmup + settings.repeats; ++round) {
    double run_f = 0, run_b = 0, direct_f = 0, direct_b = 0;
    clock.BeginStep();
    runner.BeginStep(batch);
    std::vector<ActionMarks> marks;
    for (size_t i = 0; i < actions.size(); ++i) marks.push_back(runner.Execute(actions, i));
    runner.FinishStep();
    clock.EndStep();
    for (size_t i = 0; i < actions.size(); ++i) {
      (actions[i].op == Op::kForward ? run_f : run_b) += clock.At(marks[i].end) - clock.At(marks[i].start);
    }
    std::vector<torch::Tensor> losses;
    for (int m = 0; m < kMicrobatches; ++m) {
      direct_f += DeviceTimeMs(settings.device, [&] {
        auto& stage_layers = runner.stages()[0].layers;
        Values h = {stage_layers.front()->MayWriteInput() ? one.input.clone() : one.input};
        for (auto& layer : stage_layers) h = layer->Apply(h);
        losses.push_back(LossOf(model, h.at(0), one.target) * config.loss_scale);
      });
    }
    for (int m = kMicrobatches - 1; m >= 0; --m) direct_b += DeviceTimeMs(settings.device, [&] { losses[m].backward(); });
    for (const torch::Tensor& p : runner.Parameters()) p.mutable_grad() = torch::Tensor();
    if (round < settings.warmup) continue;
    forward.push_back((run_f - direct_f) / kMicrobatches);
    backward.push_back((run_b - direct_b) / kMicrobatches);
  }
  // Below the noise an overhead reads negative: none.
  Measured f = Scaled(forward, 1.0), b = Scaled(backward, 1.0);
  f.median = std::max(0.0, f.median);
  b.median = std::max(0.0, b.median);
  return {f, b};
}

}  // namespace

Expected<StepCosts> MeasureStepCosts(const ModelSpec& model, const ProfileSettings& settings) {
  at::set_num_threads(settings.threads);
  KeepFreedHostMemory();
  // CountLayers, not model.num_layers(): a TorchScript model's layers are its file's children.
  Expected<int> count = CountLayers(model);
  if (!count.ok()) return count.status();
  auto built = BuildLayers(model, 0, *count, settings.device);
  if (!built.ok()) return built.status();
  std::vector<std::unique_ptr<Layer>>& layers = *built;
  Expected<DataSource> data = DataSource::Open(model);
  if (!data.ok()) return data.status();
  const int64_t b = settings.microbatch_sizes.front();
  const Batch host = data->GlobalBatch(0, b);
  const Batch batch{host.input.to(settings.device), host.target.to(settings.device)};

  StepCosts costs;
  const std::vector<torch::Tensor> params = ParametersOf(layers);
  // Per GiB of parameters as the profile counts them (2 bytes a parameter in 16 bits), which is
  // what the step's cost is priced from; the update itself runs over the fp32 weights.
  const double param_bytes = static_cast<double>(CountedParameterBytes(params, settings.precision));
  for (const Optimizer o : {Optimizer::kSgd, Optimizer::kMomentum, Optimizer::kAdam}) {
    Plan plan;
    plan.optimizer = o;
    std::unique_ptr<torch::optim::Optimizer> optimizer = MakeOptimizer(plan, model, params);
    for (const torch::Tensor& p : params) p.mutable_grad() = torch::randn_like(p) * 1e-3;
    if (param_bytes > 0) {
      costs.optimizer_ms_per_gib[OptimizerName(o)] = Scaled(Sample(settings, [&] { optimizer->step(); }), kGiB / param_bytes);
    }
  }
  // As the trainer starts each step: gradients set to none, the step's batch taken and moved.
  int64_t step = 0;
  costs.step_overhead_ms = Scaled(Sample(settings, [&] {
                                    for (const torch::Tensor& p : params) p.mutable_grad() = torch::Tensor();
                                    const Batch next = data->GlobalBatch(++step, b);
                                    (void)next.input.to(settings.device);
                                    (void)next.target.to(settings.device);
                                  }),
                                  1.0);

  if (settings.device.is_cuda()) {
    // Ranks on one node have a GPU each: they do not share compute.
    costs.compute_scale = {{1.0, 0.0}};
    costs.source = "optimizer and step overhead timed with CUDA events; ranks on a node are taken not to slow "
                   "each other (a GPU each)";
  } else {
    auto copy = BuildLayers(model, 0, *count, settings.device);
    if (!copy.ok()) return copy.status();
    // At the smallest profiled size: an overhead is the difference of two compute times, and the
    // smaller they are the less their noise hides it (the tiny GPT's forward overhead read
    // 0.22 +- 0.13 ms at micro-batches of 8 in one profile, 0.00 +- 0.03 and 0.04 +- 0.07 at 1).
    const int64_t smallest = *std::min_element(settings.microbatch_sizes.begin(), settings.microbatch_sizes.end());
    const Batch small_host = data->GlobalBatch(0, smallest);
    const Batch small{small_host.input.to(settings.device), small_host.target.to(settings.device)};
    std::tie(costs.forward_overhead_ms, costs.backward_overhead_ms) =
        ActionOverheads(model, settings, std::move(*copy), small);
    // Gloo's sends complete only when waited on, at the step's end (docs/executor.md).
    costs.sends_held = true;
    costs.source = "steady clock, " + std::to_string(settings.threads) + " intra-op thread(s); the optimizer over all " +
                   std::to_string(params.size()) + " parameter tensors, per GiB; action overheads: a one-stage runner's "
                   "forward and backward actions over the same run directly on the layers, at micro-batches of " +
                   std::to_string(smallest) + " (the smallest profiled); medians of " +
                   std::to_string(settings.repeats) + " after " + std::to_string(settings.warmup) + " warm-up runs";
  }
  return costs;
}

}  // namespace gpipe::executor
