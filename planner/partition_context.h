// What the partition searches and the least-memory dynamic program of one PartitionProblem share:
// the problem's layer table and calibration, the per-rank tables the bounds read (links between
// the ranks of a pipeline, each rank's all-reduce ring, forwards before the first backward, the
// most micro-batches in flight), whole-model totals, and the schedule's shape (its evaluator and
// memory frontiers, from the problem's ShapeCache or one owned here).
//
// Internal to the planner (partition.cpp and the units it calls); one per search, one thread.
#pragma once

#include <limits>
#include <optional>
#include <vector>

#include "core/calibration.h"
#include "core/plan.h"
#include "planner/path_bound.h"
#include "planner/partition.h"
#include "planner/shape_cache.h"
#include "simulator/cost_model.h"
#include "simulator/layer_table.h"
#include "simulator/memory_model.h"
#include "simulator/step_evaluator.h"

namespace gpipe::partition_internal {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

class PartitionContext {
 public:
  /// REQUIRES: the problem passed CheckProblem (partition.cpp).
  explicit PartitionContext(const PartitionProblem& problem);
  PartitionContext(const PartitionContext&) = delete;
  PartitionContext& operator=(const PartitionContext&) = delete;

 protected:
  double Limit() const { return p_.memory_limit_bytes; }
  int Device(int replica, int rank) const {
    return DeviceOf(p_.placement, p_.ranks, p_.replicas, replica, rank, p_.tensor_parallel);
  }
  // Sets shape_ and evaluator_ (bounds need no schedule; the searches and the program do).
  // REQUIRES: the problem's schedule generates.
  void UseShape() {
    shape_ = &(p_.shapes != nullptr ? *p_.shapes : own_shapes_).For(p_.schedule, p_.ranks, p_.chunks, p_.microbatches);
    evaluator_ = &shape_->evaluator();
  }
  // What rank `rank` does after its last action when it holds `param_bytes` of parameters: its
  // all-reduce, then its calibrated tail.
  double AfterLastActionMs(int rank, double param_bytes) const {
    // (With a sharded optimizer each replica updates its shard, as BuildCostModel prices it.)
    const double tail =
        calibration_ ? calibration_->TailMs(param_bytes / (p_.sharded_optimizer ? p_.replicas : 1)) : 0.0;
    return (p_.replicas > 1 ? rings_[rank].AllReduceMs(param_bytes) : 0.0) + tail;
  }
  // A lower bound on any forward F of layers [a, e) as one stage: the recorded forward, or,
  // where the policy lets a stage recompute, each layer's cheaper of its recorded and no-grad
  // forwards (a remat stage's F runs the layers it recomputes under no_grad).
  double BoundForwardMs(int a, int e) const {
    return p_.remat == RematPolicy::kOff ? table_.ForwardMs(a, e) : table_.LeastForwardMs(a, e);
  }
  // The bound of planner/path_bound.h over the schedule's own order of actions (its game too
  // unless the problem asks for a quick bound), with each boundary's message (the output of the
  // layer that ends the stage, over the quicker of the two ranks' links) and each rank's
  // all-reduce after its last action. (With UseShape: the shape's
  // schedule; else it generates one.) `prices`, where given: the best mix's LayerPrices.
  double PathBound(LayerPrices* prices = nullptr) const;
  // Layers [a, e) as one stage: its recorded forward and backward (what the seeds balance).
  double StageWorkMs(int a, int e) const { return table_.ForwardMs(a, e) + table_.BackwardMs(a, e); }
  // The cut of the layers into the stages whose most work (StageWorkMs) on one stage is the
  // least; empty when there is none (fewer layers than stages).
  std::vector<int> EvenCut() const;
  // A rank's peak activations and buffers, `costs` pointing at one per stage on the rank.
  // REQUIRES: UseShape.
  double Peak(int rank, const StageCost* const* costs) const {
    return shape_->Frontier(rank).PeakDynamicBytes(costs);
  }

  const PartitionProblem& p_;
  std::optional<Calibration> calibration_;  // the cluster's, or the profile's measured step costs
  LayerTable table_;
  // The plan with no stages (Leaf rewrites its stages in place; its profile is not copied per leaf).
  Plan skeleton_;
  // Set by UseShape; own_shapes_ serves when the problem brings no ShapeCache.
  ShapeCache own_shapes_;
  ShapeData* shape_ = nullptr;
  const StepEvaluator* evaluator_ = nullptr;
  int layers_;
  int stages_;
  // The rank of each stage (the schedule's layout: one per rank, a loop or a V), and each rank's
  // stages in stage order.
  std::vector<int> stage_rank_;
  std::vector<std::vector<int>> rank_stages_;
  bool split_;  // zero-bubble kinds: backwards split into input and weight gradients
  // One stage per rank only (zero when interleaved): each rank's forwards before its first
  // backward, and the most micro-batches it holds in flight.
  std::vector<int> forwards_first_;
  std::vector<int> in_flight_;
  // Between the ranks of pipeline 0 that hold stages s and s + 1: forward_link_[s] from the first
  // to the second, backward_link_[s] back.
  std::vector<Link> forward_link_, backward_link_;
  std::vector<Ring> rings_;  // each rank's all-reduce ring over the replicas
  // min_output_from_[l]: the smallest message a boundary after layer l or later can carry.
  std::vector<double> min_output_from_;
  double total_forward_ = 0;  // BoundForwardMs over all layers
  double total_backward_ = 0;
  double total_input_gradient_ = 0;
};

}  // namespace gpipe::partition_internal
