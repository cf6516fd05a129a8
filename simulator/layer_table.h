// A profile's layers prepared for costing stages, by BuildCostModel and by the planner. Two ways
// to cost a contiguous stage [first, end):
//  - StageBuilder sums the layers in order and scales at the end, exactly as BuildCostModel does
//    (BuildCostModel uses it), so a stage costs the planner the same to the last bit as it costs
//    the simulator; it grows one layer at a time in O(1);
//  - prefix sums give O(1) estimates for bounds (equal up to rounding).
#pragma once

#include <limits>
#include <vector>

#include "core/plan.h"
#include "simulator/cost_model.h"

namespace gpipe {

class LayerTable {
 public:
  /// `scale`: plan micro-batch size / profile micro-batch size. With a calibration, times are
  /// also multiplied by its compute scale for `ranks_per_node` and each action gets its overhead.
  /// `optimizer_shards`: replicas the optimizer's state is sharded over (Plan::optimizer_shards).
  LayerTable(const Profile& profile, double scale, Optimizer optimizer, const Calibration* calibration = nullptr,
             int ranks_per_node = 1, int optimizer_shards = 1);

  int num_layers() const { return static_cast<int>(profile_->layers.size()); }
  double scale() const { return scale_; }

  /// The exact cost of layers [first, end) as one stage. REQUIRES: 0 <= first < end <= L.
  StageCost Stage(int first, int end, bool remat) const;
  /// The exact cost of a plan's stage, its remat (whole or of its first layers) included.
  StageCost Stage(const StagePlan& stage) const;

  /// Accumulates a stage layer by layer: Stage(first, end) == builder after Extend()ing end-first times.
  class StageBuilder {
   public:
    StageBuilder(const LayerTable& table, int first);
    /// Adds the next layer. REQUIRES: end() < L.
    void Extend();
    int first() const { return first_; }
    int end() const { return end_; }
    StageCost Cost(bool remat) const { return CostRecomputing(remat ? end_ - first_ : 0); }
    /// The cost when the stage's first `layers` layers recompute their forward in the backward
    /// (0: none; all of them: plain remat). REQUIRES: 0 <= layers <= end() - first().
    StageCost CostRecomputing(int layers) const;

   private:
    const LayerTable* table_;
    int first_;
    int end_;
    double forward_ = 0, backward_ = 0, weight_ = 0, input_gradient_ = 0, activation_ = 0, params_ = 0;
    // Workspaces: the largest forward one; the largest backward one of the layers before the
    // last, each its inner workspace (the gradient of its output handed to autograd) above that
    // gradient; the last layer's, the gradient it received held throughout. A full
    // backward has freed the activations of the layers after each one by the time it runs
    // (freed_inner_backward_workspace_ takes them off); a split one (I, W) keeps the graph.
    double weight_pass_ = 0;
    double forward_workspace_ = 0, inner_backward_workspace_ = 0, last_backward_workspace_ = 0;
    // A forward that keeps its activations reaches each layer holding only the layers before
    // it: each layer's forward workspace less the activations of the layers after it, the
    // largest of them (the forward's peak above the full stash, which it reaches at its end).
    double forward_beyond_stash_ = -std::numeric_limits<double>::infinity();
    double freed_inner_backward_workspace_ = -std::numeric_limits<double>::infinity();
    // The split backward where every layer measured it (LayerProfile::split_backward), relative to
    // the stash and all that I leaves for W held from I's start:
    // - I reaches each layer holding the gradients captured above it and, below the stage's last
    //   layer, the gradient of the layer's output; what the layers below will capture is not
    //   there yet. The layers before the last give inner_input_ (each its inner I peak, the
    //   gradient of its output handed to autograd, above that gradient: last_inner_input_ until
    //   the next layer makes it inner), the last last_input_ (the gradient it received held).
    // - W starts by cutting the parameters' nodes from the input path, which frees the graph above
    //   them in every layer below the stage's top one with parameters (cut_: the layers above that
    //   one have no cut, and the stage's output holds their graph), then runs the layers from the
    //   last down, each freeing its nodes' saved tensors; the highest point of that walk above
    //   its start, cuts not counted (weight_peak_).
    bool split_measured_ = true;
    double inner_input_ = -std::numeric_limits<double>::infinity(), last_input_ = 0, last_inner_input_ = 0;
    double weight_peak_ = 0, cut_ = 0, cut_so_far_ = 0;
  };

  // Prefix-sum estimates, for bounds.
  // (Without the per-action overheads: lower bounds.)
  /// The forward with autograd recording (a stage that keeps its activations; a recompute).
  double ForwardMs(int first, int end) const { return time_scale_ * (f_[end] - f_[first]); }
  /// The forward under no_grad (a remat stage's F of the layers it recomputes).
  double ForwardNoGradMs(int first, int end) const { return time_scale_ * (no_grad_[end] - no_grad_[first]); }
  /// The least any F of these layers costs, remat or not: each layer's smaller forward. Bounds
  /// use it where a stage may recompute.
  double LeastForwardMs(int first, int end) const { return time_scale_ * (least_[end] - least_[first]); }
  /// Whether some layer's no-grad forward differs from its recorded one (else a remat stage's F
  /// costs what it costs without remat, summed as without).
  bool no_grad_forward_differs() const { return no_grad_differs_; }
  double BackwardMs(int first, int end) const { return time_scale_ * (b_[end] - b_[first]); }
  double WeightMs(int first, int end) const { return time_scale_ * (w_[end] - w_[first]); }
  double ActivationBytes(int first, int end) const { return scale_ * (act_[end] - act_[first]); }
  // (Exact: byte counts are whole numbers; each tied parameter counted once, as ParamBytesOfLayers.)
  double ParamBytes(int first, int end) const { return param_[end] - param_[first] - TiedCountedTwice(first, end); }
  double StaticBytes(int first, int end) const { return factor_ * ParamBytes(first, end); }
  /// Whether the profile has tied parameters (else stages' parameters are plain sums).
  bool has_tied_parameters() const { return !tied_before_.empty(); }
  /// Model state that the stages `ranges` ([first, end), on one rank) each count in their
  /// static_bytes but the rank holds once: a tied parameter held by several of them. 0 without
  /// tied parameters. Their static bytes summed, less this, are the rank's model state.
  double SharedStaticBytes(const LayerRanges& ranges) const;
  /// Bytes of the tensor leaving layer `layer`, scaled.
  double OutputBytes(int layer) const;
  /// The input of a stage that starts at `first`, scaled.
  double InputBytes(int first) const;
  /// The smallest OutputBytes over layers [first, end).
  double MinOutputBytes(int first, int end) const;

 private:
  const Profile* profile_;
  double scale_;
  double time_scale_;  // scale_ x the calibrated compute scale
  double forward_overhead_ms_ = 0;
  double backward_overhead_ms_ = 0;
  bool sends_held_ = false;
  // Whether the profile measured workspaces (some layer's is not 0); without, stages have none.
  bool workspaces_ = false;
  bool no_grad_differs_ = false;
  double factor_;
  std::vector<double> f_, no_grad_, least_, b_, w_, act_, param_;
  // Per layer, for each tied parameter it holds that an earlier layer holds too: that nearest
  // earlier layer and the bytes (a stage reaching back to it counts the bytes once). Empty
  // without tied parameters.
  std::vector<std::vector<std::pair<int, double>>> tied_before_;

  double TiedCountedTwice(int first, int end) const {
    return tied_before_.empty() ? 0.0 : static_cast<double>(TiedBytesCountedTwice(*profile_, first, end));
  }
};

}  // namespace gpipe
