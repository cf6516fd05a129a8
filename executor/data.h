// Training data: the global batch of step t is a pure function of the model's data spec, its seed
// and t, so every rank that needs it (the first stage its inputs, the last stage its targets) makes
// the same batch without sending it, each replica and micro-batch takes its own slice of it, and a
// resumed run sees the batches an uninterrupted one would.
//   text, tokens-file, megatron: windows of seq_len + 1 tokens at random offsets (text through the
//     CharToken vocabulary; the files memory-mapped, core/data_files.h, read a window at a time);
//   npy-images: random samples of uint8 [N, H, W, C] images (scaled to [0, 1], as [B, C, H, W]) and
//     their int64 labels, memory-mapped;
//   random-tokens: uniform token ids; synthetic-images: one fixed random pattern per class plus
//   noise, labelled with the class.
// Evaluation batch i is drawn the same way from the validation data (the held-out end of the
// data, or its own files), from a stream of its own: every evaluation sees the same batches.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "core/data_files.h"
#include "core/model.h"
#include "core/status.h"

namespace gpipe::executor {

struct Batch {
  torch::Tensor input;   // [B, seq] int64 tokens, or [B, C, H, W] float images
  torch::Tensor target;  // [B, seq] or [B] int64
};

class DataSource {
 public:
  /// Opens (maps) the model's data and its validation data; errors name the file and what is
  /// wrong (truncated, too short for one sequence, images of another shape than the input's).
  static Expected<DataSource> Open(const ModelSpec& model);

  /// The global batch of step `step`, on CPU. A token id outside the vocabulary or a label
  /// outside the classes throws std::runtime_error naming the file and the byte offset.
  Batch GlobalBatch(int64_t step, int64_t global_batch) const;
  /// Evaluation batch `index`, on CPU; the same at every evaluation.
  Batch EvalBatch(int64_t index, int64_t global_batch) const;
  /// Whether the data has somewhere to evaluate on (validation files or fraction, or data made
  /// from the seed).
  bool has_validation() const { return validation_.has_value(); }

  /// One split of the data: a text's tokens, a token file's range, a range of images, or made
  /// from the seed.
  struct Split {
    torch::Tensor text;                // kText: int64 [N]
    std::optional<TokenFile> tokens;   // kTokenFile, kMegatron
    std::optional<NpyArray> images, labels;
    int64_t begin = 0, end = 0;        // tokens or samples used: [begin, end)
  };

 private:
  Batch Draw(const Split& split, uint64_t seed, int64_t global_batch) const;

  ModelSpec model_;
  Split train_;
  std::optional<Split> validation_;
  torch::Tensor prototypes_;  // synthetic images, [classes, C, H, W]
};

/// Samples [begin, begin + size) of `batch`.
Batch Slice(const Batch& batch, int64_t begin, int64_t size);

}  // namespace gpipe::executor
