#include "executor/profiler.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

#ifdef GPIPE_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#endif

#include "core/plan.h"
#include "core/statistics.h"
#include "executor/data.h"
#include "executor/exception_text.h"
#include "executor/host_memory.h"
#include "executor/layers.h"
#include "executor/memory_meter.h"
#include "executor/precision.h"
#include "executor/rng_state.h"
#include "executor/split_backward.h"

namespace gpipe::executor {
namespace {

// A round's passes over the layers: the whole backward (timed; its workspace measured in the first
// round), the backward split into I and W (timed), the whole backward as inside a stage, each
// layer's output gradient handed to autograd and its output let go (the first round only, for its
// workspace), and I likewise with the gradient handed over (the first round only, for its peak).
enum class Pass { kFull, kSplit, kHanded, kHandedSplit };

// The loss of the last layer's outputs: one tensor, the logits.
torch::Tensor LossOfLast(const ModelSpec& model, const Layer& last, const Values& out, const torch::Tensor& target) {
  if (out.size() != 1) {
    throw std::runtime_error("the last layer (" + last.name() + ") returned " + std::to_string(out.size()) +
                             " tensors; the loss takes one (the logits)");
  }
  return LossOf(model, out[0], target);
}

nlohmann::json TimingJson(const Timing& t) { return {{"median_ms", t.median_ms}, {"spread_ms", t.spread_ms}}; }

// W after every layer's I, as a zero-bubble stage runs them (executor/split_backward.h): each
// layer's W from the last layer down, timed. Each layer's output is held while its W runs, as a
// stage holds its output (the layer may be its stage's top one with parameters) and then let go,
// with the leaves the next layer started from, as W's cuts let go of it below a layer with
// parameters (the first layer's input, the batch, stays, as a stage keeps its input). With
// `measured` (the first round) it records each W's peak above its start and what it freed besides
// what I left for it, and what letting go of each layer's output freed.
std::vector<double> RunWeightPasses(const torch::Device& device, MemoryMeter& meter, std::vector<WeightPass>& weights,
                                    std::vector<Values>& ins, std::vector<Values>& outs, SizeMeasurement* measured) {
  const size_t n = weights.size();
  std::vector<double> ms(n, 0.0);
  for (size_t i = n; i-- > 0;) {
    if (!weights[i].empty()) {
      const int64_t before = meter.CurrentBytes();
      meter.ResetPeak();
      ms[i] = DeviceTimeMs(device, [&] { weights[i].Run(); });
      if (measured != nullptr) {
        LayerMeasurement& m = measured->layers[i];
        m.split_backward.weight_peak = std::max<int64_t>(0, meter.PeakBytes() - before);
        m.split_backward.weight_freed = std::max<int64_t>(0, before - meter.CurrentBytes() - m.weight_pass_bytes);
      }
    }
    const int64_t before = meter.CurrentBytes();
    outs[i].clear();
    if (i + 1 < n) ins[i + 1].clear();
    if (measured != nullptr) measured->layers[i].split_backward.weight_cut = std::max<int64_t>(0, before - meter.CurrentBytes());
  }
  return ms;
}

}  // namespace

double DeviceTimeMs(const torch::Device& device, const std::function<void()>& body, std::chrono::milliseconds deadline) {
#ifdef GPIPE_WITH_CUDA
  if (device.is_cuda()) {
    at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
    start.record();
    body();
    end.record();
    if (deadline.count() <= 0) {
      end.synchronize();
    } else {
      // Polled, so that a peer that stopped answering becomes an error instead of a hang.
      const auto until = std::chrono::steady_clock::now() + deadline;
      while (!end.query()) {
        if (std::chrono::steady_clock::now() > until) {
          throw std::runtime_error("the GPU stream did not finish within " + std::to_string(deadline.count()) + " ms");
        }
        std::this_thread::yield();  // spin: a sleeping rank would post its next message late
      }
    }
    return start.elapsed_time(end);
  }
#endif
  (void)device;
  (void)deadline;
  const auto start = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

Timing Summarize(std::vector<double> samples) { return {Median(samples), HalfIqr(samples)}; }

Measured OneGraphScale(const std::vector<SizeMeasurement>& sizes) {
  std::vector<double> ratios;
  for (const SizeMeasurement& size : sizes) {
    double sum = 0;
    for (const LayerMeasurement& m : size.layers) sum += m.forward.median_ms + m.backward.median_ms;
    if (sum > 0 && size.whole_model.median_ms > 0) ratios.push_back(size.whole_model.median_ms / sum);
  }
  if (ratios.empty()) return {1.0, 0.0};
  return {Median(ratios), HalfIqr(ratios)};
}

int64_t CountedParameterBytes(const std::vector<torch::Tensor>& params, const std::string& precision) {
  int64_t bytes = 0;
  for (const torch::Tensor& p : params) {
    bytes += p.scalar_type() == torch::kFloat ? p.numel() * BytesPerParameter(precision) : static_cast<int64_t>(p.nbytes());
  }
  return bytes;
}

Expected<std::vector<SizeMeasurement>> MeasureModel(const ModelSpec& model, const ProfileSettings& settings) {
  at::set_num_threads(settings.threads);
  KeepFreedHostMemory();
  MemoryMeter meter(settings.device);
  Expected<int> count = CountLayers(model);
  if (!count.ok()) return count.status();
  auto built = BuildLayers(model, 0, *count, settings.device);
  if (!built.ok()) return built.status();
  std::vector<std::unique_ptr<Layer>>& layers = *built;
  Expected<DataSource> data = DataSource::Open(model);
  if (!data.ok()) return data.status();
  const std::optional<c10::ScalarType> compute_type = ComputeType(settings.precision);

  // Each round runs the model as a pipeline of one-layer stages would: layer by layer, each layer
  // on the detached output of the one before, timing each forward; then each layer's backward in
  // reverse order (pass A: the whole backward; pass B: split as zero-bubble schedules run it, the
  // input-gradient pass I and then the weight-gradient pass W, each timed: executor/split_backward.h);
  // then the whole model in one piece, to check the sum. Layers see
  // the caches they would see in training, and a slow spell of a shared machine hits every
  // measurement of a round alike.
  const int rounds = settings.warmup + settings.repeats;
  const int total = static_cast<int>(settings.microbatch_sizes.size()) * rounds;
  const int n = *count;
  int done = 0;
  const auto clear_grads = [&layers] {
    for (auto& layer : layers) {
      for (const torch::Tensor& p : layer->Parameters()) p.mutable_grad() = torch::Tensor();
    }
  };
  // Every size is measured in every round, so that a slow spell of a shared machine falls on
  // all sizes alike.
  struct SizeState {
    SizeMeasurement size;
    Batch batch;
    std::vector<std::vector<double>> f, no_grad, bwd, input_grad, weight_grad;
    std::vector<double> whole;
  };
  std::vector<SizeState> states;
  for (const int64_t b : settings.microbatch_sizes) {
    SizeState state;
    state.size.microbatch_size = b;
    const Batch batch = data->GlobalBatch(0, b);
    state.batch = {batch.input.to(settings.device), batch.target.to(settings.device)};
    state.size.input_bytes = static_cast<int64_t>(state.batch.input.nbytes());
    state.f.resize(static_cast<size_t>(n));
    state.no_grad.resize(static_cast<size_t>(n));
    state.bwd.resize(static_cast<size_t>(n));
    state.input_grad.resize(static_cast<size_t>(n));
    state.weight_grad.resize(static_cast<size_t>(n));
    state.size.layers.resize(static_cast<size_t>(n));
    states.push_back(std::move(state));
  }
  // What is being measured, for an error: a user's layer may throw (a TorchScript child that takes
  // other arguments, returns nothing, or writes where it may not).
  std::string where;
  try {
  for (int round = 0; round < rounds; ++round) {
    for (SizeState& state : states) {
      const int64_t b = state.size.microbatch_size;
      SizeMeasurement& size = state.size;
      const Batch& batch = state.batch;
      std::vector<std::vector<double>>& f = state.f, &bwd = state.bwd, &input_grad = state.input_grad,
                                        &weight_grad = state.weight_grad;
      std::vector<double>& whole = state.whole;
      const bool keep = round >= settings.warmup;
      const auto whole_pass = [&] {
        Values h = {layers.front()->MayWriteInput() ? batch.input.clone() : batch.input};
        {
          const AutocastScope autocast(compute_type, settings.device);
          for (auto& layer : layers) h = layer->Apply(h);
        }
        LossOfLast(model, *layers.back(), h, batch.target).backward();
      };
      // In 16 bits autocast's copy of each weight is made at the first forward of a step and
      // shared by all its micro-batches (the memory model counts it with the weights): made here
      // first, so that no layer's activations count it.
      if (compute_type && round == 0 && &state == &states.front()) {
        where = "the whole model, making autocast's weight copies";
        whole_pass();
        clear_grads();
      }
      // A round moves from size to size; a run repeats one. The first pass after the largest size
      // ran up to 40% slower (the tiny GPT's forward at 8 samples, after 96: 0.57 ms a sample
      // against 0.37 measured in runs and when 8 came after 6), so one unmeasured pass at this
      // size comes first. Not before the very first measurement, which follows no other size,
      // and where a layer that fails is named by the per-layer passes.
      if (round > 0 || &state != &states.front()) {
        where = "the whole model at this size, unmeasured";
        whole_pass();
        clear_grads();
      }
      // A remat stage's forward: the layers it recomputes run under no_grad, keeping nothing and
      // recording no graph (the last layer with the loss, as a last stage computes it).
      {
        torch::NoGradGuard no_grad;
        Values x = {batch.input};
        for (int i = 0; i < n; ++i) {
          Layer& layer = *layers[static_cast<size_t>(i)];
          where = "layer " + std::to_string(i) + " (" + layer.name() + "), forward under no_grad";
          const Values in = layer.MayWriteInput() ? ClonedOf(x) : x;
          Values out;
          const double ms = DeviceTimeMs(settings.device, [&] {
            {
              const AutocastScope autocast(compute_type, settings.device);
              out = layer.Apply(in);
            }
            if (i + 1 == n) out = {LossOfLast(model, layer, out, batch.target)};
          });
          if (keep) state.no_grad[i].push_back(ms);
          x = std::move(out);
        }
      }
      // The third and fourth passes, in the first round only, measure memory and no time: each
      // layer's backward, and its I, as inside a stage (inner_backward_workspace_bytes,
      // inner_backward_input_peak_bytes).
      for (const Pass pass : {Pass::kFull, Pass::kSplit, Pass::kHanded, Pass::kHandedSplit}) {
        const bool timed = pass == Pass::kFull || pass == Pass::kSplit;
        if (!timed && round != 0) continue;
        const bool input_only = pass == Pass::kSplit || pass == Pass::kHandedSplit;
        std::vector<Values> ins(n), outs(n);
        Values x = {batch.input};
        for (int i = 0; i < n; ++i) {
          Layer& layer = *layers[static_cast<size_t>(i)];
          LayerMeasurement& m = size.layers[static_cast<size_t>(i)];
          where = "layer " + std::to_string(i) + " (" + layer.name() + "), forward";
          // The first layer's input is the batch, as on a first stage: no gradient is asked of it
          // (an image batch's would cost the first layer's backward time and memory the run
          // never spends).
          ins[i] = i == 0 ? x : LeavesOf(x);
          // A layer that may write into its input gets a copy of the leaves whose gradients are measured.
          const Values in = layer.MayWriteInput() ? ClonedOf(ins[i]) : ins[i];
          const int64_t before = meter.CurrentBytes();
          meter.ResetPeak();
          const double ms = DeviceTimeMs(settings.device, [&] {
            {
              const AutocastScope autocast(compute_type, settings.device);
              outs[i] = layer.Apply(in);
            }
            if (i + 1 == n) outs[i] = {LossOfLast(model, layer, outs[i], batch.target)};
          });
          if (round == 0 && pass == Pass::kFull) {
            m.name = layer.name();
            m.param_bytes = CountedParameterBytes(layer.Parameters(), settings.precision);
            m.activation_bytes = meter.CurrentBytes() - before;
            m.forward_workspace_bytes = std::max<int64_t>(0, meter.PeakBytes() - meter.CurrentBytes());
            m.output_bytes = BytesOf(outs[i]);
            m.output_tensors = static_cast<int>(outs[i].size());
          }
          if (keep && pass == Pass::kFull) f[i].push_back(ms);
          x = outs[i];
        }
        // The workspace is measured with every weight's gradient already there, as in training
        // from a step's second micro-batch on: the backward adds into it through a temporary.
        const bool measure_workspace = round == 0;
        if (measure_workspace) {
          for (auto& layer : layers) {
            for (const torch::Tensor& p : layer->Parameters()) p.mutable_grad() = torch::zeros_like(p);
          }
        }
        Values grad;  // of the current layer's outputs, one per floating-point output; none for the loss
        std::vector<WeightPass> weights(static_cast<size_t>(input_only ? n : 0));  // what each I left for W
        for (int i = n - 1; i >= 0; --i) {
          Values next_grad;
          double ms = 0;
          where = "layer " + std::to_string(i) + " (" + layers[static_cast<size_t>(i)]->name() + "), " +
                  (input_only ? "backward split into I and W" : "backward");
          if (!BackwardRoots(outs[i], grad).first.empty()) {
            const int64_t before = meter.CurrentBytes();
            meter.ResetPeak();
            if (input_only) {
              // The first layer's input needs no gradient: I stops at its outputs, as on a first stage.
              const bool input_grads = i > 0 && AnyFloatingPoint(ins[i]);
              const Values anchors = input_grads ? ins[i] : outs[i];
              const std::vector<torch::Tensor> params = layers[static_cast<size_t>(i)]->Parameters();
              Values anchor_grads;
              WeightPass& weight = weights[static_cast<size_t>(i)];
              LayerMeasurement& m = size.layers[static_cast<size_t>(i)];
              if (pass == Pass::kHandedSplit) {
                // Inside a stage, I reaches the layer with the gradient of its output handed to
                // autograd by the layer after, which frees it once its first node has used it.
                auto [roots, seeds] = HandedOver(std::move(outs[i]), std::move(grad));
                weight = BackwardInput(roots, seeds, anchors, params, &anchor_grads);
                m.inner_backward_input_peak_bytes = std::max<int64_t>(0, meter.PeakBytes() - before);
              } else {
                ms = DeviceTimeMs(settings.device, [&] { weight = BackwardInput(outs[i], grad, anchors, params, &anchor_grads); });
                if (round == 0) {
                  m.weight_pass_bytes = weight.HeldBytes(input_grads ? anchor_grads : Values());
                  m.split_backward.input_peak = std::max<int64_t>(0, meter.PeakBytes() - before);
                }
              }
              if (input_grads) next_grad = GradientMessage(ins[i], anchor_grads);
            } else if (pass == Pass::kHanded) {
              // Inside a stage, the layer after has run its backward and let go of this layer's
              // output: only this layer's own graph may still hold it.
              if (i + 1 < n) ins[i + 1].clear();
              if (i + 1 == n) x.clear();
              meter.ResetPeak();
              RunBackwardHandingOver(std::move(outs[i]), std::move(grad));
              next_grad = InputGradients(ins[i]);
              // The next layer down gets the only reference, so that its backward can free it.
              for (const torch::Tensor& t : ins[i]) {
                if (t.requires_grad()) t.mutable_grad() = torch::Tensor();
              }
            } else {
              ms = DeviceTimeMs(settings.device, [&] {
                RunBackward(outs[i], grad);
                next_grad = InputGradients(ins[i]);
              });
            }
            if (measure_workspace && !input_only) {
              LayerMeasurement& m = size.layers[static_cast<size_t>(i)];
              (pass == Pass::kHanded ? m.inner_backward_workspace_bytes : m.backward_workspace_bytes) =
                  std::max<int64_t>(0, meter.PeakBytes() - before);
            }
          }
          if (keep && timed) (input_only ? input_grad : bwd)[i].push_back(ms);
          grad = i > 0 && next_grad.empty() ? GradientMessage(outs[i - 1], {}) : next_grad;
        }
        if (pass == Pass::kSplit) {
          where = "the weight-gradient passes W, after every layer's I";
          x.clear();
          grad.clear();
          const std::vector<double> weight_ms =
              RunWeightPasses(settings.device, meter, weights, ins, outs, round == 0 ? &size : nullptr);
          for (int i = 0; i < n && keep; ++i) weight_grad[i].push_back(weight_ms[static_cast<size_t>(i)]);
        }
        clear_grads();
      }
      where = "the whole model, forward and backward";
      const double whole_ms = DeviceTimeMs(settings.device, whole_pass);
      clear_grads();
      if (keep) whole.push_back(whole_ms);
      if (settings.progress) {
        settings.progress(++done, total, "round " + std::to_string(round + 1) + " of " + std::to_string(rounds) +
                                             " (micro-batch " + std::to_string(b) + ")");
      }
    }
  }
  } catch (const std::exception& e) {
    return Status::Invalid("model " + model.name + ", " + where + ": " + ExceptionText(e));
  }
  std::vector<SizeMeasurement> sizes;
  for (SizeState& state : states) {
    SizeMeasurement& size = state.size;
    const std::vector<std::vector<double>>& f = state.f, &bwd = state.bwd, &input_grad = state.input_grad,
                                            &weight_grad = state.weight_grad;
    for (int i = 0; i < n; ++i) {
      LayerMeasurement& m = size.layers[static_cast<size_t>(i)];
      m.forward = Summarize(f[i]);
      m.forward_no_grad = Summarize(state.no_grad[i]);
      m.backward = Summarize(bwd[i]);
      m.backward_input = Summarize(input_grad[i]);
      // The weight-gradient pass as the executor runs it; never more than the whole backward.
      m.backward_weight = Summarize(weight_grad[i]);
      m.backward_weight.median_ms = std::min(m.backward_weight.median_ms, m.backward.median_ms);
    }
    size.whole_model = Summarize(state.whole);
    sizes.push_back(std::move(size));
  }
  ClearWeightCopies();
  return sizes;
}

Profile ProfileFromMeasurements(const ModelSpec& model, const ProfileSettings& settings,
                                const std::vector<SizeMeasurement>& sizes) {
  Profile profile;
  profile.model = model.name;
  profile.device = settings.device_name + "-" + std::to_string(settings.threads) + "-thread" +
                   (settings.threads == 1 ? "" : "s");
  const SizeMeasurement& first = sizes.front();
  profile.microbatch_size = first.microbatch_size;
  profile.input_bytes = first.input_bytes;
  profile.rng_state_bytes = RngStateBytesOn(settings.device);
  profile.dtype = settings.precision;
  for (const LayerMeasurement& m : first.layers) {
    LayerProfile layer;
    layer.name = m.name;
    layer.forward_ms = m.forward.median_ms;
    layer.forward_no_grad_ms = m.forward_no_grad.median_ms;
    layer.backward_ms = m.backward.median_ms;
    layer.backward_weight_ms = m.backward_weight.median_ms;
    layer.backward_input_ms = m.backward_input.median_ms;
    layer.param_bytes = m.param_bytes;
    layer.activation_bytes = m.activation_bytes;
    layer.output_bytes = m.output_bytes;
    layer.forward_workspace_bytes = m.forward_workspace_bytes;
    layer.backward_workspace_bytes = m.backward_workspace_bytes;
    layer.inner_backward_workspace_bytes = m.inner_backward_workspace_bytes;
    layer.inner_backward_input_peak_bytes = m.inner_backward_input_peak_bytes;
    layer.output_tensors = m.output_tensors;
    layer.split_backward = m.split_backward;
    layer.weight_pass_bytes = m.weight_pass_bytes;
    profile.layers.push_back(layer);
  }
  // A parameter several layers hold (a tied embedding and LM head) counts once per stage and rank.
  // MeasureModel built the layers from the same file, so its notes were read once already.
  if (Expected<std::vector<SharedParameter>> shared = SharedParametersOf(model); shared.ok()) {
    for (const SharedParameter& p : *shared) {
      // Noted in fp32, as the executor holds it; counted in the profile's precision.
      const int64_t bytes = p.bytes / 4 * BytesPerParameter(settings.precision);
      profile.tied_parameters.push_back({p.layers, bytes, p.names.empty() ? std::string() : p.names.front()});
    }
  }
  nlohmann::json measurements = nlohmann::json::array();
  for (const SizeMeasurement& size : sizes) {
    nlohmann::json layers = nlohmann::json::array();
    double sum = 0;
    for (const LayerMeasurement& m : size.layers) {
      sum += m.forward.median_ms + m.backward.median_ms;
      nlohmann::json layer = {{"name", m.name},
                              {"forward", TimingJson(m.forward)},
                              {"forward_no_grad", TimingJson(m.forward_no_grad)},
                              {"backward", TimingJson(m.backward)},
                              {"backward_input", TimingJson(m.backward_input)},
                              {"backward_weight", TimingJson(m.backward_weight)},
                              {"param_bytes", m.param_bytes},
                              {"activation_bytes", m.activation_bytes},
                              {"output_bytes", m.output_bytes},
                              {"forward_workspace_bytes", m.forward_workspace_bytes},
                              {"backward_workspace_bytes", m.backward_workspace_bytes},
                              {"inner_backward_workspace_bytes", m.inner_backward_workspace_bytes},
                              {"inner_backward_input_peak_bytes", m.inner_backward_input_peak_bytes},
                              {"weight_pass_bytes", m.weight_pass_bytes}};
      SplitBackwardToJson(m.split_backward, layer);
      layers.push_back(std::move(layer));
    }
    measurements.push_back({{"microbatch_size", size.microbatch_size},
                            {"input_bytes", size.input_bytes},
                            {"layers", layers},
                            {"sum_of_layers_ms", sum},
                            {"whole_model", TimingJson(size.whole_model)}});
  }
  profile.extra["measurements"] = measurements;
  profile.extra["source"] =
      "Measured by gpipe-plan profile on " + settings.device_name + " with " + std::to_string(settings.threads) +
      " thread(s): per layer the median of " + std::to_string(settings.repeats) + " runs after " +
      std::to_string(settings.warmup) + " warm-up runs (spread: half the interquartile range, under "
      "measurements); each round runs the layers in order as one-layer stages (forward with autograd "
      "recording, the last layer including the loss), then their backwards in reverse, then the whole model; "
      "forward_no_grad_ms is the same forward under no_grad, as a remat stage runs the layers it recomputes (timed "
      "in a pass of its own before those); "
      "backward_weight_ms is the weight-gradient pass W of a backward split as zero-bubble schedules run it (after "
      "its input-gradient pass I, timed as backward_input under measurements); activation_bytes is what the forward leaves allocated "
      "while its graph lives, output included; forward_workspace_bytes is the forward's peak above that, "
      "backward_workspace_bytes the backward's peak above what it starts with (every weight's gradient "
      "already allocated, as from a step's second micro-batch on) with the gradient of its output held, as a stage's last "
      "layer has it, inner_backward_workspace_bytes the same as inside a stage: that gradient handed to autograd, which frees it "
      "once used, and the output held only by the layer's own graph; weight_pass_bytes is what I leaves for W: the storage "
      "of the gradients it captured where the parameters' paths meet the input path, each storage once, less the gradient "
      "it passes on. The split backward runs as a zero-bubble stage runs it, every layer's I and then W from the last layer "
      "down: backward_input_peak_bytes is I's peak above its start, backward_weight_peak_bytes W's peak above its start "
      "with the layer's output held and backward_weight_freed_bytes what W freed besides weight_pass_bytes, "
      "weight_pass_cut_bytes what letting go of the layer's output freed once its W had run; "
      "inner_backward_input_peak_bytes is I's peak as inside a stage, the gradient of the output handed to autograd.";
  return profile;
}

}  // namespace gpipe::executor
