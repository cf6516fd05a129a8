#include "executor/data.h"

#include <fstream>
#include <iterator>
#include <string>

namespace gpipe::executor {
namespace {

torch::Generator GeneratorFor(uint64_t seed) {
  torch::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return gen;
}

// A per-step seed far from the model seed's neighbours (layer i is initialised from seed + i).
uint64_t StepSeed(uint64_t seed, int64_t step) {
  return seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull * static_cast<uint64_t>(step + 1);
}

}  // namespace

Expected<DataSource> DataSource::Open(const ModelSpec& model) {
  DataSource source;
  source.model_ = model;
  if (model.data.kind == DataKind::kText) {
    std::ifstream in(model.data.path, std::ios::binary);
    if (!in) return Status::Invalid(model.data.path + ": cannot read the training text");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (static_cast<int64_t>(text.size()) < model.input.seq_len + 2) {
      return Status::Invalid(model.data.path + ": has " + std::to_string(text.size()) +
                             " characters; the model needs at least seq_len + 2 = " +
                             std::to_string(model.input.seq_len + 2));
    }
    std::vector<int64_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = CharToken(static_cast<unsigned char>(text[i]));
    source.tokens_ = torch::tensor(ids, torch::kLong);
  } else if (model.data.kind == DataKind::kSyntheticImages) {
    torch::Generator gen = GeneratorFor(model.seed ^ 0xC1A55E5ull);
    const ModelInput& in = model.input;
    source.prototypes_ = torch::randn({in.classes, in.channels, in.height, in.width}, gen);
  }
  return source;
}

Batch DataSource::GlobalBatch(int64_t step, int64_t global_batch) const {
  torch::Generator gen = GeneratorFor(StepSeed(model_.seed, step));
  const ModelInput& in = model_.input;
  Batch batch;
  switch (model_.data.kind) {
    case DataKind::kText: {
      const int64_t windows = tokens_.size(0) - in.seq_len - 1;
      torch::Tensor offsets = torch::randint(0, windows + 1, {global_batch, 1}, gen, torch::kLong);
      torch::Tensor index = offsets + torch::arange(in.seq_len, torch::kLong).unsqueeze(0);
      batch.input = tokens_.index({index});
      batch.target = tokens_.index({index + 1});
      break;
    }
    case DataKind::kRandomTokens:
      batch.input = torch::randint(0, in.vocab, {global_batch, in.seq_len}, gen, torch::kLong);
      batch.target = torch::randint(0, in.vocab, {global_batch, in.seq_len}, gen, torch::kLong);
      break;
    case DataKind::kSyntheticImages: {
      batch.target = torch::randint(0, in.classes, {global_batch}, gen, torch::kLong);
      torch::Tensor noise = torch::randn({global_batch, in.channels, in.height, in.width}, gen);
      batch.input = prototypes_.index({batch.target}) + 0.5 * noise;
      break;
    }
  }
  return batch;
}

Batch Slice(const Batch& batch, int64_t begin, int64_t size) {
  return {batch.input.narrow(0, begin, size), batch.target.narrow(0, begin, size)};
}

}  // namespace gpipe::executor
