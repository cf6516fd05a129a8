#include "executor/shape_header.h"

namespace gpipe::executor {
namespace {

// Layout: [magic, dtype, dims, size 0, size 1, ...]; the magic catches a buffer that received a
// data message where a header was due.
constexpr int64_t kMagic = 0x67706970;  // "gpip"
constexpr int kFixed = 3;

}  // namespace

torch::Tensor ShapeHeader::EmptyOn(const torch::Device& device) const {
  return torch::empty(sizes, torch::TensorOptions().dtype(dtype).device(device));
}

Expected<torch::Tensor> EncodeShapeHeader(const torch::Tensor& tensor) {
  if (tensor.dim() > kShapeHeaderSize - kFixed) {
    return Status::Invalid("a tensor between stages has " + std::to_string(tensor.dim()) + " dimensions; at most " +
                           std::to_string(kShapeHeaderSize - kFixed) + " travel");
  }
  std::vector<int64_t> fields(kShapeHeaderSize, 0);
  fields[0] = kMagic;
  fields[1] = static_cast<int64_t>(tensor.scalar_type());
  fields[2] = tensor.dim();
  for (int64_t d = 0; d < tensor.dim(); ++d) fields[static_cast<size_t>(kFixed + d)] = tensor.size(d);
  return torch::tensor(fields, torch::kLong).to(tensor.device());
}

torch::Tensor ShapeHeaderBuffer(const torch::Device& device) {
  return torch::zeros({kShapeHeaderSize}, torch::TensorOptions().dtype(torch::kLong).device(device));
}

Expected<ShapeHeader> DecodeShapeHeader(const torch::Tensor& header) {
  if (header.scalar_type() != torch::kLong || header.numel() != kShapeHeaderSize) {
    return Status::Invalid("a shape header must be " + std::to_string(kShapeHeaderSize) + " int64 values");
  }
  const torch::Tensor host = header.cpu().contiguous();
  const int64_t* f = host.data_ptr<int64_t>();
  if (f[0] != kMagic) return Status::Invalid("a shape header was due but another message came (the wire is out of order)");
  const int64_t dims = f[2];
  if (dims < 0 || dims > kShapeHeaderSize - kFixed) {
    return Status::Invalid("a shape header names " + std::to_string(dims) + " dimensions");
  }
  if (f[1] < 0 || f[1] >= static_cast<int64_t>(c10::ScalarType::NumOptions)) {
    return Status::Invalid("a shape header names an unknown dtype " + std::to_string(f[1]));
  }
  ShapeHeader h;
  h.dtype = static_cast<c10::ScalarType>(f[1]);
  for (int64_t d = 0; d < dims; ++d) {
    if (f[kFixed + d] < 0) return Status::Invalid("a shape header names a negative size");
    h.sizes.push_back(f[kFixed + d]);
  }
  return h;
}

}  // namespace gpipe::executor
