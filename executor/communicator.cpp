#include "executor/communicator.h"

#include <algorithm>
#include <stdexcept>

#include "executor/memory_meter.h"

namespace gpipe::executor {
namespace {

int64_t MemberOf(const std::vector<int>& group, int rank) {
  const auto it = std::find(group.begin(), group.end(), rank);
  if (it == group.end()) throw std::runtime_error("rank " + std::to_string(rank) + " is not in its own group");
  return it - group.begin();
}

}  // namespace

void Communicator::ReduceScatterSum(const torch::Tensor& input, torch::Tensor& output, const std::vector<int>& group) {
  torch::Tensor sum;
  {
    // The whole sum is this emulation's own buffer (a real wire's is in its transport), charged
    // to no rank's memory, as an in-process wire's copies are.
    const UnchargedAllocations wire;
    sum = input.clone();
  }
  AllReduceSum(sum, group);
  const int64_t n = output.numel();
  output.copy_(sum.view({-1}).narrow(0, MemberOf(group, rank()) * n, n).view_as(output));
}

void Communicator::AllGather(const torch::Tensor& input, torch::Tensor& output, const std::vector<int>& group) {
  // Every member's slot is zero but its own: the sum is the concatenation.
  output.zero_();
  const int64_t n = input.numel();
  output.view({-1}).narrow(0, MemberOf(group, rank()) * n, n).copy_(input.view({-1}));
  AllReduceSum(output, group);
}

}  // namespace gpipe::executor
