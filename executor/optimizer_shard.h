// ZeRO-1 (Megatron-LM's distributed optimizer) over the D replicas of one pipeline rank: the
// rank's gradients accumulate into one flat buffer (each parameter's gradient a view of its place
// in it, in parameter order, padded to a multiple of D), which is reduce-scattered so that replica
// i holds the sum of the i-th D-th; its optimizer updates only the parameters' elements in that
// range (its state is that range's: 1/D of the unsharded optimizer's), and the updated ranges are
// all-gathered back into every replica's weights, a few pieces at a time. The optimizer is
// element-wise (SGD, momentum, AdamW), so each element moves as it would unsharded. Beyond the
// weights, their gradients and the state, a replica holds the summed range (1/D of the gradients)
// from the reduce-scatter to the update, and a gather's pieces (a quarter of the weights, and
// 1/D of that) while they travel.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "executor/communicator.h"

namespace gpipe::executor {

class OptimizerShard {
 public:
  /// `params`: the rank's parameters (what the unsharded optimizer would update), the same on
  /// every replica, contiguous; `group`: the replicas' process ranks, sorted, this one among them.
  OptimizerShard(std::vector<torch::Tensor> params, std::vector<int> group, int rank);

  /// The slices of the parameters this replica updates, each a view of its parameter's data,
  /// with `matrix[k]` telling whether slice k's parameter has two dimensions or more (the
  /// optimizer decays those apart).
  const std::vector<torch::Tensor>& pieces() const { return pieces_; }
  const std::vector<bool>& matrix() const { return matrix_; }
  /// The parameter piece k is a slice of.
  const torch::Tensor& owner(size_t k) const { return params_[owners_[k]]; }

  /// A step's start: the flat buffer zeroed, each parameter's gradient its view of it (the
  /// backward accumulates there in place), the pieces without gradients.
  void BeginStep();
  /// Sums the gradients over the replicas into this replica's range and hands each piece its part
  /// as its gradient. A gradient the backward put elsewhere (not the view) is copied in first.
  void ReduceScatterGradients(Communicator& comm);
  /// Lets go of the summed range (after the update).
  void ReleaseShardGradient();
  /// Every replica's updated range into every replica's parameters.
  void AllGatherWeights(Communicator& comm);

 private:
  // Copies between elements [offset, offset + out.numel()) of the flattened parameters and `out`.
  void CopyFromParameters(int64_t offset, torch::Tensor out) const;
  void CopyIntoParameters(int64_t offset, const torch::Tensor& in);

  std::vector<torch::Tensor> params_;
  std::vector<int64_t> starts_;  // each parameter's first element in the flattened order
  std::vector<int> group_;
  int64_t total_ = 0;
  int64_t chunk_ = 0;  // elements per replica (the padded total over D)
  int64_t first_ = 0;  // this replica's range [first_, first_ + chunk_) of the flattened parameters
  std::vector<torch::Tensor> pieces_;
  std::vector<bool> matrix_;
  std::vector<size_t> owners_;
  std::vector<int64_t> piece_offsets_;  // each piece's start inside the range
  torch::Tensor gradients_;             // the flat buffer the parameters' gradients view
  torch::Tensor shard_gradient_;
};

}  // namespace gpipe::executor
