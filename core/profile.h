// The profile format, gpipe-profile/1: what each layer of a model costs on one device for one
// micro-batch of `microbatch_size` samples. Written by the profiler or by profiles/generate.py,
// read by the simulator and the planner. The format is documented in docs/formats.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/step_costs.h"

namespace gpipe {

inline constexpr const char* kProfileFormat = "gpipe-profile/1";

/// Memory of a layer's backward split into I and W as a zero-bubble stage runs it: every layer's I,
/// then one W over them all (executor/split_backward.h). Bytes, one micro-batch.
struct SplitBackwardBytes {
  /// I's peak above its start, the gradient of the layer's output held; what I captures for W
  /// (weight_pass_bytes) is part of it.
  int64_t input_peak = 0;
  /// What letting go of the layer's output frees once its W has run: the part of its graph above
  /// its parameters' nodes, and what its W kept alive only because the output was held. W cuts
  /// those nodes from the input path when it starts, and inside a stage, below a layer with
  /// parameters, nothing else holds that part.
  int64_t weight_cut = 0;
  /// W's peak above its start, the layer's output held (as by a stage whose top layer with
  /// parameters it is), and what it lets go of by its end besides what I left for it: the
  /// tensors saved by the nodes it runs.
  int64_t weight_peak = 0;
  int64_t weight_freed = 0;
};

/// The four, and their names in a profile's layers and in its measurements, in the same order:
/// `split.*kSplitBackwardMembers[k]` is the field named kSplitBackwardFields[k].
inline constexpr int64_t SplitBackwardBytes::*kSplitBackwardMembers[4] = {
    &SplitBackwardBytes::input_peak, &SplitBackwardBytes::weight_cut, &SplitBackwardBytes::weight_peak,
    &SplitBackwardBytes::weight_freed};
inline constexpr const char* kSplitBackwardFields[4] = {"backward_input_peak_bytes", "weight_pass_cut_bytes",
                                                        "backward_weight_peak_bytes", "backward_weight_freed_bytes"};

/// Writes the four fields into a layer's JSON object (a profile's layer or a measurement's).
void SplitBackwardToJson(const SplitBackwardBytes& split, nlohmann::json& layer);

/// One layer's costs for one micro-batch.
struct LayerProfile {
  std::string name;
  double forward_ms = 0;
  /// The whole backward pass: input gradient plus weight gradient.
  double backward_ms = 0;
  /// The weight-gradient part of backward_ms, when measured (zero-bubble schedules need it).
  std::optional<double> backward_weight_ms;
  int64_t param_bytes = 0;
  /// Bytes kept for backward, one micro-batch, without rematerialization.
  int64_t activation_bytes = 0;
  /// Bytes of the tensor sent to the next layer, one micro-batch.
  int64_t output_bytes = 0;
  /// Transient bytes, one micro-batch: what the forward allocates beyond what it keeps
  /// (activation_bytes), and what the backward allocates beyond what it starts with (gradients
  /// and temporaries, freed by its end). Optional in the file (0: not measured).
  int64_t forward_workspace_bytes = 0;
  int64_t backward_workspace_bytes = 0;
  /// (Last, so that positional initializers of the fields above stay valid.) The input-gradient pass I of a backward split into I and W, when measured; without it a
  /// zero-bubble schedule's I costs backward_ms - backward_weight_ms. Measured, I + W may exceed
  /// backward_ms (W re-reads what the whole backward had in cache).
  std::optional<double> backward_input_ms = std::nullopt;
  /// Bytes the input-gradient pass I leaves for the weight-gradient pass W, one micro-batch: the
  /// gradients I captures where the parameters' paths meet the input path, held from I until W
  /// (zero-bubble schedules). Optional in the file (0: not measured).
  int64_t weight_pass_bytes = 0;
  /// The backward's workspace as for a layer that is not its stage's last, where the layer after
  /// has run its backward: the gradient of its output handed to autograd, which frees it once its
  /// first node has used it, and the output held only by the layer's own graph (measured from the
  /// start, output and gradient included). backward_workspace_bytes is the same with both held
  /// throughout, as a stage's last layer holds its output and the gradient it received.
  /// Optional in the file (absent: backward_workspace_bytes, an upper bound).
  std::optional<int64_t> inner_backward_workspace_bytes = std::nullopt;
  /// I's peak as for a layer that is not its stage's last (with split_backward): the gradient of
  /// its output handed to autograd, which frees it once its first node has used it (measured above
  /// its start, that gradient included). split_backward's input_peak is the same with the gradient
  /// held throughout, as a stage's last layer holds the one it received.
  /// Optional in the file (absent: input_peak, an upper bound).
  std::optional<int64_t> inner_backward_input_peak_bytes = std::nullopt;
  /// Tensors leaving the layer (Llama's hidden states with its rotary embeddings and position ids:
  /// 3). One travels between stages as itself; several are packed into one message, a copy.
  /// Optional in the file (1).
  int output_tensors = 1;
  /// The split backward's memory, when measured (all four fields in the file, or none); without
  /// it the memory model prices I and W each with the full backward's workspace.
  std::optional<SplitBackwardBytes> split_backward = std::nullopt;
  /// The forward timed under no_grad, as a remat stage runs the layers it recomputes: nothing
  /// saved for backward, no graph recorded. Optional in the file (absent: forward_ms, as timed with
  /// autograd recording).
  std::optional<double> forward_no_grad_ms = std::nullopt;
  /// What a forward of the layer costs when it keeps nothing for backward.
  double ForwardNoGradMs() const { return forward_no_grad_ms.value_or(forward_ms); }
  /// Inner workspace: measured, or else the held one.
  int64_t InnerBackwardWorkspaceBytes() const {
    return inner_backward_workspace_bytes.value_or(backward_workspace_bytes);
  }
  /// Inner I's peak: measured, or else the held one (0 without split_backward).
  int64_t InnerBackwardInputPeakBytes() const {
    return inner_backward_input_peak_bytes.value_or(split_backward ? split_backward->input_peak : 0);
  }
};

/// The figures measured as inside a stage, each optional on its own, and their names in a
/// profile's layers and in its measurements: `layer.*kInnerFields[k].second` is the field named
/// kInnerFields[k].first.
inline constexpr std::pair<const char*, std::optional<int64_t> LayerProfile::*> kInnerFields[2] = {
    {"inner_backward_workspace_bytes", &LayerProfile::inner_backward_workspace_bytes},
    {"inner_backward_input_peak_bytes", &LayerProfile::inner_backward_input_peak_bytes}};

/// A parameter that several layers share (tied weights: GPT-2's LM head uses the token
/// embedding's weight). Each listed layer counts it in its own param_bytes; a stage, and a rank,
/// that holds several of them holds it once (ParamBytesOfLayers), while two ranks holding it
/// each hold a copy, its gradient and its optimizer state.
struct TiedParameter {
  /// The layers that hold it, ascending, at least two (the profile reader sorts them).
  std::vector<int> layers;
  /// Its bytes, as each listed layer counts them in param_bytes; > 0.
  int64_t bytes = 0;
  /// Optional, e.g. "wte.weight" (informational).
  std::string name;
};

/// One layer as each of the t devices of a tensor-parallel group runs it (Megatron-LM's column and
/// row parallel linears, vocabulary-parallel embedding and loss, sequence parallelism): its times,
/// parameters, activations and output per device, and what its collectives over the t devices move.
struct TensorParallelLayer {
  LayerProfile layer;
  /// Bytes whose ring all-reduce over the t devices costs what the layer's collectives cost in its
  /// forward (and again in a recompute) / in its backward (with the input gradient, I): an
  /// all-reduce of n bytes counts n, an all-gather or a reduce-scatter of an n-byte tensor n / 2.
  double forward_collective_bytes = 0;
  double backward_collective_bytes = 0;
};

/// The model's layers under t-way tensor parallelism, at the profile's micro-batch size (a profile's
/// `tensor_parallel_measurements[]`; profiles/generate.py writes them from FLOPs and bytes).
struct TensorParallelPoint {
  int size = 2;  // t
  /// One micro-batch of the model's input, per device.
  int64_t input_bytes = 0;
  std::vector<TensorParallelLayer> layers;
  /// Per tied parameter (in the profile's order), its bytes on each device; empty: bytes / t.
  std::vector<int64_t> tied_bytes;
};

/// The precisions a profile is measured in and a plan computes in: "fp32", "bf16", "fp16".
const std::vector<std::string>& Precisions();
/// Bytes of one parameter as a profile of `dtype` counts it: 4 for fp32, 2 for bf16 and fp16.
int BytesPerParameter(const std::string& dtype);

struct Profile {
  std::string model;
  std::string device;
  int64_t microbatch_size = 1;
  /// Element type of the weights ("fp32", "bf16", "fp16"); picks the optimizer's memory default.
  std::string dtype = "fp32";
  /// Bytes of one micro-batch of the model's input (what the first stage keeps under remat).
  int64_t input_bytes = 0;
  /// What a stage that recomputes keeps per micro-batch beyond its input: the state of the
  /// device's default generator, saved at F so that the recompute draws the same dropout masks,
  /// counted where the device's memory is metered (5,056 bytes on a CPU; a GPU's generator state
  /// is a host tensor, 0). 0 when not recorded.
  int64_t rng_state_bytes = 0;
  std::vector<LayerProfile> layers;
  /// What a step costs beyond the layers (optimizer, co-located ranks, per-step overhead), when
  /// the profiler measured it; without it a prediction leaves those out.
  std::optional<StepCosts> step_costs;
  /// Parameters shared by several layers; empty when none (or not recorded).
  std::vector<TiedParameter> tied_parameters;
  /// t when the layers' figures are those of one device of a t-way tensor-parallel group (a plan's
  /// profile, made by ProfileAtTensorParallel in simulator/tensor_parallel.h); 1 for a whole model.
  int tensor_parallel = 1;
  /// What the layers cost under each t > 1 measured or modelled (empty: the profile plans with t = 1
  /// only). Only a profile with tensor_parallel 1 has them.
  std::vector<TensorParallelPoint> tensor_parallel_points;
  /// Fields this build does not interpret, kept so that a rewritten file loses nothing.
  nlohmann::json extra = nlohmann::json::object();

  /// The tensor-parallel sizes the profile can price, ascending: {tensor_parallel} for a profile
  /// already at a t, else 1 and its points' sizes.
  std::vector<int> TensorParallelSizes() const;
  int num_layers() const { return static_cast<int>(layers.size()); }
  /// Whether every layer has backward_weight_ms: what the schedules that split the backward
  /// into I and W (zb-h1, interleaved-zb, zb-v, dualpipe-v) need.
  bool HasWeightTimes() const;
};

/// Validates and converts a parsed profile; `where` names its origin in errors.
Expected<Profile> ProfileFromJson(const nlohmann::json& json, const std::string& where);
Expected<Profile> LoadProfile(const std::string& path);
nlohmann::json ProfileToJson(const Profile& profile);

/// Layer ranges [first, end), e.g. the stages on one rank.
using LayerRanges = std::vector<std::pair<int, int>>;

/// The parameter bytes of the layers in `ranges`, each tied parameter counted once: the sum of
/// their param_bytes less TiedBytesCountedTwice. What a stage or a rank holding those layers
/// holds (weights; gradients and optimizer state follow them).
/// REQUIRES: the ranges lie in [0, num_layers) and do not overlap.
int64_t ParamBytesOfLayers(const Profile& profile, const LayerRanges& ranges);
int64_t ParamBytesOfLayers(const Profile& profile, int first, int end);

/// What summing param_bytes over the layers of `ranges` counts more than once: for each tied
/// parameter with n >= 2 of its layers in them, bytes x (n - 1). 0 without tied parameters.
/// REQUIRES: as ParamBytesOfLayers.
int64_t TiedBytesCountedTwice(const Profile& profile, const LayerRanges& ranges);
int64_t TiedBytesCountedTwice(const Profile& profile, int first, int end);

/// Checks profile.tied_parameters against the layers: each lists at least two distinct layers in
/// [0, num_layers) (any order), bytes > 0, and no layer's tied bytes (summed over the tied
/// parameters that list it) above its param_bytes. `where` prefixes the field paths in errors,
/// e.g. "profile.json" gives "profile.json.tied_parameters[0].layers[1]: ...". The profile
/// reader calls it; a writer (the profiler) may call it before writing.
Status CheckTiedParameters(const Profile& profile, const std::string& where);

}  // namespace gpipe
