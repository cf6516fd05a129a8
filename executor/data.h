// Training data: the global batch of step t is a pure function of the model's data spec, its seed
// and t, so every rank that needs it (the first stage its inputs, the last stage its targets) makes
// the same batch without sending it, and a resumed run sees the batches an uninterrupted one would.
//   text: windows of seq_len + 1 characters at random offsets (CharToken vocabulary);
//   random-tokens: uniform token ids; synthetic-images: one fixed random pattern per class plus
//   noise, labelled with the class.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "core/model.h"
#include "core/status.h"

namespace gpipe::executor {

struct Batch {
  torch::Tensor input;   // [B, seq] int64 tokens, or [B, C, H, W] float images
  torch::Tensor target;  // [B, seq] or [B] int64
};

class DataSource {
 public:
  /// Reads the text file for text data; errors name the file.
  static Expected<DataSource> Open(const ModelSpec& model);

  /// The global batch of step `step`, on CPU.
  Batch GlobalBatch(int64_t step, int64_t global_batch) const;

 private:
  ModelSpec model_;
  torch::Tensor tokens_;      // text data, int64 [N]
  torch::Tensor prototypes_;  // image data, [classes, C, H, W]
};

/// Samples [begin, begin + size) of `batch`.
Batch Slice(const Batch& batch, int64_t begin, int64_t size);

}  // namespace gpipe::executor
