// The profiler: measures each layer of a model on the device it will train on, the way the
// executor will run it, and writes a gpipe-profile/1. Per layer and micro-batch size: forward time
// (with autograd recording, as in training; the last layer includes the loss), the whole backward,
// and the same backward split into its input-gradient and weight-gradient passes as the executor
// runs them for zero-bubble schedules, each the median of `repeats` runs after `warmup` runs, with the spread (half the
// interquartile range); parameter bytes; activation bytes: what the forward leaves allocated while
// its graph is alive (what autograd keeps for backward, the output included), read from the
// executor's allocator meter; and output bytes. Inputs to layer i are the real outputs of layers
// 0..i-1 on a batch of the model's data, measured in place: each round runs the layers in order
// as a pipeline of one-layer stages would, so every layer sees the caches it sees in training. CPU times use a steady clock with the thread count a
// rank will have; GPU times use CUDA events.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/model.h"
#include "core/profile.h"
#include "core/step_costs.h"
#include "core/status.h"

namespace gpipe::executor {

struct ProfileSettings {
  std::vector<int64_t> microbatch_sizes = {8};
  int warmup = 3;
  int repeats = 10;
  int threads = 1;
  torch::Device device = torch::kCPU;
  std::string device_name = "cpu";
  /// What the layers compute in, as `run` will execute a plan of this precision: "fp32", or
  /// "bf16" and "fp16" under autocast (executor/precision.h). Parameter bytes are counted in it
  /// (2 bytes a parameter in 16 bits), as the memory model prices them (core/plan.h).
  std::string precision = "fp32";
  /// Called after each measured layer: (done, total, what).
  std::function<void(int, int, const std::string&)> progress;
};

/// One number measured several times.
struct Timing {
  double median_ms = 0;
  double spread_ms = 0;  // half the interquartile range
};

struct LayerMeasurement {
  std::string name;
  /// The whole backward, and the same split into the input-gradient pass I and the weight-gradient
  /// pass W as zero-bubble schedules run them.
  Timing forward, backward, backward_input, backward_weight;
  /// The forward under no_grad, as a remat stage's forward runs the layers it recomputes.
  Timing forward_no_grad;
  int64_t param_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t output_bytes = 0;
  int output_tensors = 1;
  /// Peak during the forward above what it leaves; peak during the backward above its start,
  /// with the gradient of the output held throughout (a stage's last layer: the received
  /// gradient) and with it handed to autograd, which frees it once used (a layer inside a stage).
  int64_t forward_workspace_bytes = 0;
  int64_t backward_workspace_bytes = 0;
  int64_t inner_backward_workspace_bytes = 0;
  /// I's peak above its start as inside a stage, the gradient of the output handed to autograd
  /// (split_backward.input_peak: held throughout).
  int64_t inner_backward_input_peak_bytes = 0;
  /// What the input-gradient pass I leaves for W (WeightPass::HeldBytes).
  int64_t weight_pass_bytes = 0;
  /// The split backward's memory as a zero-bubble stage runs it (core/profile.h).
  SplitBackwardBytes split_backward;
};

struct SizeMeasurement {
  int64_t microbatch_size = 0;
  int64_t input_bytes = 0;
  std::vector<LayerMeasurement> layers;
  /// Forward and backward of the whole model on one micro-batch, as one rank would run it.
  Timing whole_model;
};

/// Bytes of `params` (fp32, as the executor holds them) as a profile of `precision` counts them:
/// 4 a parameter in fp32, 2 in bf16 and fp16 (core/plan.h, BytesPerParameter).
int64_t CountedParameterBytes(const std::vector<torch::Tensor>& params, const std::string& precision);

Expected<std::vector<SizeMeasurement>> MeasureModel(const ModelSpec& model, const ProfileSettings& settings);

/// The profile file: the first micro-batch size's layers; every size, with spreads and the
/// whole-model check, under "measurements" (kept by loaders that do not read it).
Profile ProfileFromMeasurements(const ModelSpec& model, const ProfileSettings& settings,
                                const std::vector<SizeMeasurement>& sizes);

/// One rank's compute against the profile's layer times: per size, the whole model run as one
/// graph (whole_model) over the sum of its layers' forward and backward run one by one; the median
/// over the sizes with half their interquartile range. Both are measured in the same rounds, so the
/// ratio holds where the machine's speed drifts between minutes. 1 when nothing was measured.
Measured OneGraphScale(const std::vector<SizeMeasurement>& sizes);

/// How long `body` takes on `device`: CUDA events on its stream on a GPU (NCCL's work returns to
/// the host before it finishes), a steady clock on the CPU. With a `deadline`, the GPU's end event
/// is polled and a stream still busy after it is an error (a peer that stopped answering).
double DeviceTimeMs(const torch::Device& device, const std::function<void()>& body,
                    std::chrono::milliseconds deadline = std::chrono::milliseconds(0));

/// The median and half the interquartile range of `samples` (REQUIRES: not empty).
Timing Summarize(std::vector<double> samples);

}  // namespace gpipe::executor
