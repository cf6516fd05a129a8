#include "executor/data.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
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
// Evaluation batches come from a stream of their own.
constexpr uint64_t kEvalStream = 0x5DEECE66Dull;

Expected<torch::Tensor> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Invalid(path + ": cannot read the training text");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = CharToken(static_cast<unsigned char>(text[i]));
  return torch::tensor(ids, torch::kLong);
}

// The images and labels of `spec`, checked against the model's input.
Status OpenImages(const DataSpec& spec, const ModelInput& in, DataSource::Split& split) {
  Expected<NpyArray> images = OpenNpy(spec.path);
  if (!images.ok()) return images.status();
  Expected<NpyArray> labels = OpenNpy(spec.labels_path);
  if (!labels.ok()) return labels.status();
  const std::vector<int64_t> want = {images->shape.empty() ? 0 : images->shape[0], in.height, in.width, in.channels};
  if (images->descr != "|u1" || images->shape != want) {
    return Status::Invalid(spec.path + ": images are " + images->descr + " " + c10::str(c10::IntArrayRef(images->shape)) +
                           "; the model's input needs uint8 (|u1) [N, " + std::to_string(in.height) + ", " +
                           std::to_string(in.width) + ", " + std::to_string(in.channels) + "] (N, height, width, channels)");
  }
  if (labels->descr != "<i8" || labels->shape != std::vector<int64_t>{want[0]}) {
    return Status::Invalid(spec.labels_path + ": labels are " + labels->descr + " " + c10::str(c10::IntArrayRef(labels->shape)) +
                           "; give int64 (<i8) [" + std::to_string(want[0]) + "], one per image of " + spec.path);
  }
  split.images = std::move(*images);
  split.labels = std::move(*labels);
  split.end = want[0];
  return Status::Ok();
}

// The training or validation files of `spec`, as a split over all of them.
Status OpenSplit(const DataSpec& spec, const ModelInput& in, DataSource::Split& split) {
  switch (spec.kind) {
    case DataKind::kText: {
      Expected<torch::Tensor> text = ReadText(spec.path);
      if (!text.ok()) return text.status();
      split.text = *text;
      split.end = split.text.size(0);
      return Status::Ok();
    }
    case DataKind::kTokenFile:
    case DataKind::kMegatron: {
      Expected<TokenFile> tokens = spec.kind == DataKind::kMegatron ? OpenMegatronDataset(spec.path)
                                                                     : OpenTokenFile(spec.path, spec.dtype);
      if (!tokens.ok()) return tokens.status();
      split.end = tokens->count;
      split.tokens = std::move(*tokens);
      return Status::Ok();
    }
    case DataKind::kNpyImages: return OpenImages(spec, in, split);
    case DataKind::kSyntheticImages:
    case DataKind::kRandomTokens: return Status::Ok();
  }
  return Status::Ok();
}

// A split of tokens must hold one window of seq_len + 1 tokens.
Status CheckLength(const DataSource::Split& split, const ModelInput& in, const std::string& path, const char* what) {
  const int64_t length = split.end - split.begin;
  if (in.kind == InputKind::kTokens && length < in.seq_len + 2) {
    return Status::Invalid(path + ": its " + what + " holds " + std::to_string(length) +
                           " tokens; the model needs at least seq_len + 2 = " + std::to_string(in.seq_len + 2));
  }
  if (in.kind == InputKind::kImages && length < 1) {
    return Status::Invalid(path + ": its " + what + " holds no images");
  }
  return Status::Ok();
}

// Windows of seq_len + 1 tokens at `offsets` of a token file; a token outside the vocabulary
// throws, naming the file and the byte offset.
torch::Tensor FileWindows(const TokenFile& tokens, const torch::Tensor& offsets, int64_t length, int64_t vocab) {
  torch::Tensor out = torch::empty({offsets.size(0), length}, torch::kLong);
  int64_t* o = out.data_ptr<int64_t>();
  const int64_t* starts = offsets.data_ptr<int64_t>();
  for (int64_t b = 0; b < offsets.size(0); ++b) {
    for (int64_t j = 0; j < length; ++j) {
      const int64_t index = starts[b] + j;
      const int64_t id = tokens.At(index);
      if (id < 0 || id >= vocab) {
        throw std::runtime_error(tokens.file->path() + ": token id " + std::to_string(id) + " at byte offset " +
                                 std::to_string(tokens.offset + index * tokens.item_size) + " (token " +
                                 std::to_string(index) + ") is outside the model's vocabulary of " +
                                 std::to_string(vocab) + "; is the file's dtype " + tokens.dtype +
                                 " and its tokenizer the model's?");
      }
      o[b * length + j] = id;
    }
  }
  return out;
}

// Images `indices` of a split, as [B, C, H, W] floats in [0, 1], and their labels.
Batch ImageSamples(const DataSource::Split& split, const torch::Tensor& indices, int64_t classes) {
  const NpyArray& images = *split.images;
  const NpyArray& labels = *split.labels;
  const int64_t h = images.shape[1], w = images.shape[2], c = images.shape[3], n = indices.size(0);
  torch::Tensor pixels = torch::empty({n, h, w, c}, torch::kByte);
  torch::Tensor target = torch::empty({n}, torch::kLong);
  int64_t* targets = target.data_ptr<int64_t>();
  const int64_t* at = indices.data_ptr<int64_t>();
  for (int64_t b = 0; b < n; ++b) {
    const int64_t i = at[b];
    std::memcpy(pixels.data_ptr<uint8_t>() + b * h * w * c, images.file->data() + images.data_offset + i * h * w * c,
                static_cast<size_t>(h * w * c));
    int64_t label = 0;
    std::memcpy(&label, labels.file->data() + labels.data_offset + i * 8, 8);
    if (label < 0 || label >= classes) {
      throw std::runtime_error(labels.file->path() + ": label " + std::to_string(label) + " of image " +
                               std::to_string(i) + " (byte offset " + std::to_string(labels.data_offset + i * 8) +
                               ") is outside the model's " + std::to_string(classes) + " classes");
    }
    targets[b] = label;
  }
  return {pixels.permute({0, 3, 1, 2}).to(torch::kFloat).div_(255.0).contiguous(), target};
}

}  // namespace

Expected<DataSource> DataSource::Open(const ModelSpec& model) {
  DataSource source;
  source.model_ = model;
  const DataSpec& data = model.data;
  const ModelInput& in = model.input;
  GPIPE_RETURN_IF_ERROR(OpenSplit(data, in, source.train_));
  const bool made_from_seed = data.kind == DataKind::kSyntheticImages || data.kind == DataKind::kRandomTokens;
  if (data.kind == DataKind::kSyntheticImages) {
    torch::Generator gen = GeneratorFor(model.seed ^ 0xC1A55E5ull);
    source.prototypes_ = torch::randn({in.classes, in.channels, in.height, in.width}, gen);
  }
  if (data.validation) {
    Split validation;
    GPIPE_RETURN_IF_ERROR(OpenSplit(*data.validation, in, validation));
    GPIPE_RETURN_IF_ERROR(CheckLength(validation, in, data.validation->path, "validation data"));
    source.validation_ = std::move(validation);
  } else if (data.validation_fraction > 0) {
    Split validation = source.train_;
    const int64_t held = static_cast<int64_t>(static_cast<double>(source.train_.end) * data.validation_fraction);
    validation.begin = source.train_.end - held;
    source.train_.end = validation.begin;
    GPIPE_RETURN_IF_ERROR(CheckLength(validation, in, data.path, "validation fraction"));
    source.validation_ = std::move(validation);
  } else if (made_from_seed) {
    source.validation_ = source.train_;
  }
  if (!made_from_seed) GPIPE_RETURN_IF_ERROR(CheckLength(source.train_, in, data.path, "training data"));
  return source;
}

Batch DataSource::Draw(const Split& split, uint64_t seed, int64_t global_batch) const {
  torch::Generator gen = GeneratorFor(seed);
  const ModelInput& in = model_.input;
  Batch batch;
  switch (model_.data.kind) {
    case DataKind::kText:
    case DataKind::kTokenFile:
    case DataKind::kMegatron: {
      const int64_t windows = split.end - split.begin - in.seq_len - 1;
      torch::Tensor offsets = torch::randint(0, windows + 1, {global_batch, 1}, gen, torch::kLong) + split.begin;
      torch::Tensor tokens;
      if (split.tokens) {
        tokens = FileWindows(*split.tokens, offsets.reshape({-1}).contiguous(), in.seq_len + 1, in.vocab);
      } else {
        tokens = split.text.index({offsets + torch::arange(in.seq_len + 1, torch::kLong).unsqueeze(0)});
      }
      batch.input = tokens.narrow(1, 0, in.seq_len);
      batch.target = tokens.narrow(1, 1, in.seq_len);
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
    case DataKind::kNpyImages: {
      torch::Tensor indices = torch::randint(split.begin, split.end, {global_batch}, gen, torch::kLong);
      batch = ImageSamples(split, indices, in.classes);
      break;
    }
  }
  return batch;
}

Batch DataSource::GlobalBatch(int64_t step, int64_t global_batch) const {
  return Draw(train_, StepSeed(model_.seed, step), global_batch);
}

Batch DataSource::EvalBatch(int64_t index, int64_t global_batch) const {
  if (!validation_) throw std::runtime_error("model " + model_.name + ": its data has no validation set");
  return Draw(*validation_, StepSeed(model_.seed ^ kEvalStream, index), global_batch);
}

Batch Slice(const Batch& batch, int64_t begin, int64_t size) {
  return {batch.input.narrow(0, begin, size), batch.target.narrow(0, begin, size)};
}

}  // namespace gpipe::executor
