#include "simulator/layer_table.h"

#include <algorithm>
#include <limits>

namespace gpipe {

LayerTable::LayerTable(const Profile& profile, double scale, Optimizer optimizer, const Calibration* calibration,
                       int ranks_per_node, int optimizer_shards)
    : profile_(&profile),
      scale_(scale),
      time_scale_(calibration != nullptr ? scale * calibration->ComputeScale(ranks_per_node) : scale),
      forward_overhead_ms_(calibration != nullptr ? calibration->ForwardOverheadMs(ranks_per_node) : 0.0),
      backward_overhead_ms_(calibration != nullptr ? calibration->BackwardOverheadMs(ranks_per_node) : 0.0),
      sends_held_(calibration != nullptr && calibration->sends_held),
      factor_(StaticBytesPerParamByte(optimizer, profile.dtype, optimizer_shards)) {
  const int layers = profile.num_layers();
  f_.assign(layers + 1, 0.0);
  b_ = w_ = act_ = param_ = no_grad_ = least_ = f_;
  for (int l = 0; l < layers; ++l) {
    const LayerProfile& layer = profile.layers[l];
    f_[l + 1] = f_[l] + layer.forward_ms;
    no_grad_[l + 1] = no_grad_[l] + layer.ForwardNoGradMs();
    least_[l + 1] = least_[l] + std::min(layer.forward_ms, layer.ForwardNoGradMs());
    no_grad_differs_ = no_grad_differs_ || layer.ForwardNoGradMs() != layer.forward_ms;
    b_[l + 1] = b_[l] + layer.backward_ms;
    w_[l + 1] = w_[l] + layer.backward_weight_ms.value_or(0.0);
    act_[l + 1] = act_[l] + static_cast<double>(layer.activation_bytes);
    param_[l + 1] = param_[l] + static_cast<double>(layer.param_bytes);
    workspaces_ = workspaces_ || layer.forward_workspace_bytes != 0 || layer.backward_workspace_bytes != 0;
  }
  if (!profile.tied_parameters.empty()) {
    tied_before_.resize(layers);
    for (const TiedParameter& tie : profile.tied_parameters) {
      std::vector<int> sorted = tie.layers;
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 1; i < sorted.size(); ++i) {
        tied_before_[sorted[i]].emplace_back(sorted[i - 1], static_cast<double>(tie.bytes));
      }
    }
  }
}

double LayerTable::SharedStaticBytes(const LayerRanges& ranges) const {
  if (tied_before_.empty() || ranges.size() < 2) return 0.0;
  int64_t within = 0;
  for (const auto& [first, end] : ranges) within += TiedBytesCountedTwice(*profile_, first, end);
  return factor_ * static_cast<double>(TiedBytesCountedTwice(*profile_, ranges) - within);
}

double LayerTable::OutputBytes(int layer) const {
  return static_cast<double>(profile_->layers[layer].output_bytes) * scale_;
}

double LayerTable::InputBytes(int first) const {
  return (first == 0 ? static_cast<double>(profile_->input_bytes)
                     : static_cast<double>(profile_->layers[first - 1].output_bytes)) *
         scale_;
}

double LayerTable::MinOutputBytes(int first, int end) const {
  double least = std::numeric_limits<double>::infinity();
  for (int l = first; l < end; ++l) least = std::min(least, OutputBytes(l));
  return least;
}

LayerTable::StageBuilder::StageBuilder(const LayerTable& table, int first)
    : table_(&table), first_(first), end_(first) {}

void LayerTable::StageBuilder::Extend() {
  const LayerProfile& layer = table_->profile_->layers[end_];
  const double weight = layer.backward_weight_ms.value_or(0.0);
  forward_ += layer.forward_ms;
  backward_ += layer.backward_ms;
  weight_ += weight;
  input_gradient_ += layer.backward_input_ms.value_or(layer.backward_ms - weight);
  activation_ += static_cast<double>(layer.activation_bytes);
  weight_pass_ += static_cast<double>(layer.weight_pass_bytes);
  params_ += static_cast<double>(layer.param_bytes);
  if (!table_->tied_before_.empty()) {
    // A tied parameter this stage already holds through an earlier layer: held once.
    for (const auto& [before, bytes] : table_->tied_before_[end_]) {
      if (before >= first_) params_ -= bytes;
    }
  }
  forward_workspace_ = std::max(forward_workspace_, static_cast<double>(layer.forward_workspace_bytes));
  forward_beyond_stash_ = std::max(forward_beyond_stash_ - static_cast<double>(layer.activation_bytes),
                                   static_cast<double>(layer.forward_workspace_bytes));
  split_measured_ = split_measured_ && layer.split_backward.has_value();
  if (end_ > first_) {
    const LayerProfile& before = table_->profile_->layers[end_ - 1];
    // The layer before, now inside the stage: autograd hands it the gradient of its output.
    const double inner =
        static_cast<double>(before.InnerBackwardWorkspaceBytes()) + static_cast<double>(before.output_bytes);
    inner_backward_workspace_ = std::max(inner_backward_workspace_, inner);
    // Every layer before this one runs its full backward after this one's activations are freed.
    freed_inner_backward_workspace_ = std::max(freed_inner_backward_workspace_, inner) - static_cast<double>(layer.activation_bytes);
    // Its I, likewise, with the gradient of its output there when I reaches it.
    if (split_measured_) inner_input_ = std::max(inner_input_, last_inner_input_ + static_cast<double>(before.output_bytes));
  }
  last_backward_workspace_ = static_cast<double>(layer.backward_workspace_bytes);
  if (split_measured_) {
    const SplitBackwardBytes& split = *layer.split_backward;
    // weight_pass_ counts this layer's captures, part of its I's peak, and those of the layers
    // below, not made yet when I reaches it.
    last_input_ = static_cast<double>(split.input_peak) - weight_pass_;
    last_inner_input_ = static_cast<double>(layer.InnerBackwardInputPeakBytes()) - weight_pass_;
    weight_peak_ = std::max(weight_peak_ - static_cast<double>(split.weight_freed), static_cast<double>(split.weight_peak));
    if (layer.param_bytes > 0) cut_ = cut_so_far_;
    cut_so_far_ += static_cast<double>(split.weight_cut);
  }
  ++end_;
}

StageCost LayerTable::StageBuilder::CostRecomputing(int layers) const {
  const double time = table_->time_scale_;
  const double forward_overhead = table_->forward_overhead_ms_, backward_overhead = table_->backward_overhead_ms_;
  StageCost c;
  c.remat = layers > 0;
  // F runs the recomputed layers under no_grad and the rest recording; the backward recomputes
  // the first ones recording.
  c.forward_ms = forward_ * time + forward_overhead;
  if (layers > 0) {
    const int boundary = first_ + layers;
    c.partial_remat = boundary < end_;
    c.rng_state_bytes = static_cast<double>(table_->profile_->rng_state_bytes);
    if (table_->no_grad_forward_differs()) {
      c.forward_ms = table_->ForwardNoGradMs(first_, boundary) + table_->ForwardMs(boundary, end_) + forward_overhead;
    }
    c.remat_forward_ms = (c.partial_remat ? table_->ForwardMs(first_, boundary) : forward_ * time) + forward_overhead;
    if (c.partial_remat) {
      c.remat_activation_bytes = table_->ActivationBytes(first_, boundary);
      c.remat_boundary_bytes = table_->OutputBytes(boundary - 1);
    }
  }
  c.backward_ms = backward_ * time + backward_overhead;
  c.backward_weight_ms = weight_ * time + backward_overhead;
  c.backward_input_ms = input_gradient_ * time + backward_overhead;
  c.activation_bytes = activation_ * table_->scale_;
  c.weight_pass_bytes = weight_pass_ * table_->scale_;
  c.input_bytes = table_->InputBytes(first_);
  c.output_bytes = table_->OutputBytes(end_ - 1);
  c.static_bytes = params_ * table_->factor_;
  c.sends_held = table_->sends_held_;
  c.sent_output_in_stash = (layers == 0 || c.partial_remat) && table_->profile_->layers[end_ - 1].output_tensors == 1;
  if (table_->workspaces_) {
    // Priced from the forward's start with the micro-batch's whole stash: a stage that keeps its
    // activations adds what its forward needs beyond them; one that recomputes keeps none of
    // them in the forward, and adds its largest layer's workspace.
    c.forward_workspace_bytes = (layers == 0 ? std::max(0.0, forward_beyond_stash_) : forward_workspace_) * table_->scale_;
    // The stage's output (a stage's root, from which its backward runs) stays through the whole
    // backward, though the walk let go of it with the last layer's activations, which count it;
    // the model's last stage runs from the loss instead, whose node lets go of the output.
    const LayerProfile& last = table_->profile_->layers[end_ - 1];
    const bool root_is_output = end_ < table_->profile_->num_layers();
    const double held_output =
        root_is_output ? static_cast<double>(std::min(last.output_bytes, last.activation_bytes)) : 0.0;
    c.backward_workspace_bytes =
        std::max({0.0, freed_inner_backward_workspace_ + held_output, last_backward_workspace_}) * table_->scale_;
    if (split_measured_) {
      c.backward_input_workspace_bytes = std::max({0.0, inner_input_, last_input_}) * table_->scale_;
      c.backward_weight_workspace_bytes = std::max(0.0, weight_peak_ - cut_) * table_->scale_;
    } else {
      // Not measured: the full backward's workspace for each, which also holds what I captures.
      c.backward_input_workspace_bytes = c.backward_weight_workspace_bytes =
          std::max(inner_backward_workspace_, last_backward_workspace_) * table_->scale_;
    }
    if (c.partial_remat) {
      // The gradient the later layers' backward leaves at their input, held while the recomputed
      // layers' backward runs from it.
      c.backward_workspace_bytes += c.remat_boundary_bytes;
      c.backward_input_workspace_bytes += c.remat_boundary_bytes;
      c.backward_weight_workspace_bytes += c.remat_boundary_bytes;
    }
  }
  return c;
}

namespace {

// Layers [first, end) as one stage, its first `recomputed` recomputing.
StageCost StageRecomputing(const LayerTable& table, int first, int end, int recomputed) {
  LayerTable::StageBuilder builder(table, first);
  while (builder.end() < end) builder.Extend();
  return builder.CostRecomputing(recomputed);
}

}  // namespace

StageCost LayerTable::Stage(const StagePlan& stage) const {
  return StageRecomputing(*this, stage.first_layer, stage.end_layer, stage.recomputed_layers());
}

StageCost LayerTable::Stage(int first, int end, bool remat) const {
  return StageRecomputing(*this, first, end, remat ? end - first : 0);
}

}  // namespace gpipe
