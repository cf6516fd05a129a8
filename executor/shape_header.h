// The shape header that precedes the first message of each stage boundary and direction in a
// run (core/schedule/wire.h): the tensor's dtype and sizes, so that the receiver can post later
// receives straight into buffers of the right shape. One encode, one decode.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/status.h"

namespace gpipe::executor {

struct ShapeHeader {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> sizes;

  /// An empty tensor of this shape on `device`, to receive into.
  torch::Tensor EmptyOn(const torch::Device& device) const;
  friend bool operator==(const ShapeHeader&, const ShapeHeader&) = default;
};

/// The header of `tensor`, as an int64 tensor of kShapeHeaderSize on `tensor`'s device.
/// Errors when the tensor has more dimensions than a header holds.
Expected<torch::Tensor> EncodeShapeHeader(const torch::Tensor& tensor);
/// An int64 tensor to receive a header into, on `device`.
torch::Tensor ShapeHeaderBuffer(const torch::Device& device);
/// Reads a received header (any device); errors name what is wrong with it.
Expected<ShapeHeader> DecodeShapeHeader(const torch::Tensor& header);

inline constexpr int kShapeHeaderSize = 16;

}  // namespace gpipe::executor
