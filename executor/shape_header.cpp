#include "executor/shape_header.h"

namespace gpipe::executor {
namespace {

// Layout: [magic, count, then per tensor: dtype, dims, size 0, size 1, ...]; the magic catches a
// buffer that received a data message where a header was due.
constexpr int64_t kMagic = 0x67706970;  // "gpip"
constexpr int64_t kAlign = 16;          // bytes: every dtype's alignment in a packed message

int64_t Padded(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

int64_t NumBytes(const TensorShape& shape) {
  int64_t n = static_cast<int64_t>(c10::elementSize(shape.dtype));
  for (int64_t s : shape.sizes) n *= s;
  return n;
}

}  // namespace

torch::Tensor ShapeHeader::EmptyOn(const torch::Device& device) const {
  if (tensors.size() == 1) return torch::empty(tensors[0].sizes, torch::TensorOptions().dtype(tensors[0].dtype).device(device));
  int64_t bytes = 0;
  for (const TensorShape& t : tensors) bytes += Padded(NumBytes(t));
  return torch::empty({std::max<int64_t>(bytes, kAlign)}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
}

Values ShapeHeader::Unpack(const torch::Tensor& message) const {
  if (tensors.size() == 1) return {message};
  Values values;
  int64_t offset = 0;
  for (const TensorShape& t : tensors) {
    const int64_t bytes = NumBytes(t);
    values.push_back(message.narrow(0, offset, bytes).view(t.dtype).view(t.sizes));
    offset += Padded(bytes);
  }
  return values;
}

std::pair<torch::Tensor, ShapeHeader> Pack(const Values& values) {
  ShapeHeader header;
  for (const torch::Tensor& t : values) header.tensors.push_back({t.scalar_type(), t.sizes().vec()});
  if (values.size() == 1) return {values[0].contiguous(), header};
  const torch::Device device = values.empty() ? torch::Device(torch::kCPU) : values[0].device();
  torch::Tensor message = header.EmptyOn(device);
  int64_t offset = 0;
  for (const torch::Tensor& t : values) {
    const int64_t bytes = static_cast<int64_t>(t.nbytes());
    if (bytes > 0) message.narrow(0, offset, bytes).copy_(t.detach().contiguous().view(-1).view(torch::kUInt8));
    offset += Padded(bytes);
  }
  if (values.empty()) message.zero_();
  return {message, header};
}

Expected<torch::Tensor> EncodeShapeHeader(const ShapeHeader& header, const torch::Device& device) {
  std::vector<int64_t> fields(kShapeHeaderSize, 0);
  fields[0] = kMagic;
  fields[1] = static_cast<int64_t>(header.tensors.size());
  size_t at = 2;
  for (const TensorShape& t : header.tensors) {
    if (at + 2 + t.sizes.size() > static_cast<size_t>(kShapeHeaderSize)) {
      return Status::Invalid("a stage boundary carries " + std::to_string(header.tensors.size()) +
                             " tensors whose dtypes and sizes need more than the " + std::to_string(kShapeHeaderSize) +
                             " numbers of a shape header; pass fewer tensors or fewer dimensions between layers");
    }
    fields[at++] = static_cast<int64_t>(t.dtype);
    fields[at++] = static_cast<int64_t>(t.sizes.size());
    for (int64_t s : t.sizes) fields[at++] = s;
  }
  return torch::tensor(fields, torch::kLong).to(device);
}

torch::Tensor ShapeHeaderBuffer(const torch::Device& device) {
  return torch::zeros({kShapeHeaderSize}, torch::TensorOptions().dtype(torch::kLong).device(device));
}

Expected<ShapeHeader> DecodeShapeHeader(const torch::Tensor& buffer) {
  if (buffer.scalar_type() != torch::kLong || buffer.numel() != kShapeHeaderSize) {
    return Status::Invalid("a shape header must be " + std::to_string(kShapeHeaderSize) + " int64 values");
  }
  const torch::Tensor host = buffer.cpu().contiguous();
  const int64_t* f = host.data_ptr<int64_t>();
  if (f[0] != kMagic) return Status::Invalid("a shape header was due but another message came (the wire is out of order)");
  const int64_t count = f[1];
  if (count < 0 || count > kShapeHeaderSize / 2) return Status::Invalid("a shape header names " + std::to_string(count) + " tensors");
  ShapeHeader header;
  int64_t at = 2;
  for (int64_t k = 0; k < count; ++k) {
    if (at + 2 > kShapeHeaderSize) return Status::Invalid("a shape header ends inside tensor " + std::to_string(k));
    const int64_t dtype = f[at], dims = f[at + 1];
    at += 2;
    if (dtype < 0 || dtype >= static_cast<int64_t>(c10::ScalarType::NumOptions)) {
      return Status::Invalid("a shape header names an unknown dtype " + std::to_string(dtype));
    }
    if (dims < 0 || at + dims > kShapeHeaderSize) {
      return Status::Invalid("a shape header names " + std::to_string(dims) + " dimensions for tensor " + std::to_string(k));
    }
    TensorShape t;
    t.dtype = static_cast<c10::ScalarType>(dtype);
    for (int64_t d = 0; d < dims; ++d, ++at) {
      if (f[at] < 0) return Status::Invalid("a shape header names a negative size");
      t.sizes.push_back(f[at]);
    }
    header.tensors.push_back(std::move(t));
  }
  return header;
}

}  // namespace gpipe::executor
