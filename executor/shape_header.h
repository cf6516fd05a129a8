// The shape header that precedes the first message of each stage boundary and direction in a
// run (core/schedule/wire.h): the dtype and sizes of each tensor the message carries, so that the
// receiver can post later receives straight into buffers of the right shape. A boundary of one
// tensor travels as that tensor; one of several travels packed into one byte buffer (each tensor
// at an aligned offset), so that the wire still has one message per action. One encode, one
// decode, one pack, one unpack.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "core/status.h"
#include "executor/values.h"

namespace gpipe::executor {

struct TensorShape {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> sizes;
  friend bool operator==(const TensorShape&, const TensorShape&) = default;
};

struct ShapeHeader {
  std::vector<TensorShape> tensors;

  /// An empty message buffer of this shape on `device`, to receive into.
  torch::Tensor EmptyOn(const torch::Device& device) const;
  /// The tensors a received message carries (views into it).
  Values Unpack(const torch::Tensor& message) const;
  friend bool operator==(const ShapeHeader&, const ShapeHeader&) = default;
};

/// The message that carries `values` (the tensor itself, contiguous, when there is one) and its
/// header.
std::pair<torch::Tensor, ShapeHeader> Pack(const Values& values);

/// `header` as an int64 tensor of kShapeHeaderSize on `device`. Errors when the tensors have more
/// dimensions, all told, than a header holds.
Expected<torch::Tensor> EncodeShapeHeader(const ShapeHeader& header, const torch::Device& device);
/// An int64 tensor to receive a header into, on `device`.
torch::Tensor ShapeHeaderBuffer(const torch::Device& device);
/// Reads a received header (any device); errors name what is wrong with it.
Expected<ShapeHeader> DecodeShapeHeader(const torch::Tensor& header);

inline constexpr int kShapeHeaderSize = 64;

}  // namespace gpipe::executor
