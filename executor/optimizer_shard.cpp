#include "executor/optimizer_shard.h"

#include <algorithm>
#include <stdexcept>

namespace gpipe::executor {
namespace {

// The all-gather travels in this many rounds, so that its buffers hold a fraction of the weights.
constexpr int64_t kGatherRounds = 4;

}  // namespace

OptimizerShard::OptimizerShard(std::vector<torch::Tensor> params, std::vector<int> group, int rank)
    : params_(std::move(params)), group_(std::move(group)) {
  const auto me = std::find(group_.begin(), group_.end(), rank);
  if (me == group_.end()) throw std::runtime_error("the sharded optimizer's group does not hold rank " + std::to_string(rank));
  const int64_t replicas = static_cast<int64_t>(group_.size());
  for (const torch::Tensor& p : params_) {
    if (!p.is_contiguous()) throw std::runtime_error("the sharded optimizer needs contiguous parameters");
    starts_.push_back(total_);
    total_ += p.numel();
  }
  chunk_ = (total_ + replicas - 1) / replicas;
  first_ = (me - group_.begin()) * chunk_;
  const int64_t end = first_ + chunk_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    const int64_t a = std::max(starts_[i], first_), b = std::min(starts_[i] + p.numel(), end);
    if (a < b) {
      pieces_.push_back(p.detach().view({-1}).narrow(0, a - starts_[i], b - a));
      matrix_.push_back(p.dim() >= 2);
      owners_.push_back(i);
      piece_offsets_.push_back(a - first_);
    }
  }
}

void OptimizerShard::BeginStep() {
  ReleaseShardGradient();
  for (torch::Tensor& piece : pieces_) piece.mutable_grad().reset();
  const int64_t padded = chunk_ * static_cast<int64_t>(group_.size());
  if (!gradients_.defined()) {
    const torch::TensorOptions options =
        params_.empty() ? torch::TensorOptions().dtype(torch::kFloat) : params_.front().options();
    gradients_ = torch::zeros({padded}, options);
  } else {
    gradients_.zero_();
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].mutable_grad() = gradients_.narrow(0, starts_[i], params_[i].numel()).view_as(params_[i]);
  }
}

void OptimizerShard::ReduceScatterGradients(Communicator& comm) {
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    torch::Tensor slot = gradients_.narrow(0, starts_[i], p.numel());
    if (p.grad().defined() && p.grad().data_ptr() != slot.data_ptr()) {
      slot.copy_(p.grad().reshape({-1}));
      p.mutable_grad() = slot.view_as(p);
    } else if (!p.grad().defined()) {
      p.mutable_grad() = slot.view_as(p);  // a parameter the step did not reach: zeros
    }
  }
  shard_gradient_ = torch::empty({chunk_}, gradients_.options());
  comm.ReduceScatterSum(gradients_, shard_gradient_, group_);
  for (size_t k = 0; k < pieces_.size(); ++k) {
    pieces_[k].mutable_grad() = shard_gradient_.narrow(0, piece_offsets_[k], pieces_[k].numel());
  }
}

void OptimizerShard::ReleaseShardGradient() {
  for (torch::Tensor& piece : pieces_) piece.mutable_grad().reset();
  shard_gradient_ = torch::Tensor();
}

void OptimizerShard::CopyFromParameters(int64_t offset, torch::Tensor out) const {
  const int64_t end = offset + out.numel();
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t a = std::max(offset, starts_[i]), b = std::min(end, starts_[i] + params_[i].numel());
    if (a < b) out.narrow(0, a - offset, b - a).copy_(params_[i].detach().view({-1}).narrow(0, a - starts_[i], b - a));
  }
}

void OptimizerShard::CopyIntoParameters(int64_t offset, const torch::Tensor& in) {
  const int64_t end = offset + in.numel();
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t a = std::max(offset, starts_[i]), b = std::min(end, starts_[i] + params_[i].numel());
    if (a < b) params_[i].detach().view({-1}).narrow(0, a - starts_[i], b - a).copy_(in.narrow(0, a - offset, b - a));
  }
}

void OptimizerShard::AllGatherWeights(Communicator& comm) {
  torch::NoGradGuard no_grad;
  const int64_t replicas = static_cast<int64_t>(group_.size());
  const int64_t round = (chunk_ + kGatherRounds - 1) / kGatherRounds;
  const torch::TensorOptions options = gradients_.options();
  for (int64_t at = 0; at < chunk_; at += round) {
    const int64_t n = std::min(round, chunk_ - at);
    torch::Tensor mine = torch::zeros({n}, options);
    CopyFromParameters(first_ + at, mine.narrow(0, 0, std::max<int64_t>(0, std::min(n, total_ - first_ - at))));
    torch::Tensor all = torch::empty({n * replicas}, options);
    comm.AllGather(mine, all, group_);
    for (int64_t j = 0; j < replicas; ++j) {
      const int64_t offset = j * chunk_ + at;
      const int64_t valid = std::min(n, total_ - offset);
      if (valid > 0) CopyIntoParameters(offset, all.narrow(0, j * n, valid));
    }
  }
}

}  // namespace gpipe::executor
