// The model format, gpipe-model/1: a sequential model the executor builds from LibTorch layers,
// with its input, its training data and its loss. Layer i of the model is layer i of the profile
// and of the plan's layer ranges, so the layers are the unit a pipeline cuts between.
//
//   {"format": "gpipe-model/1", "name": "tiny-gpt",
//    "input": {"kind": "tokens", "vocab": 96, "seq_len": 64},
//    "data": {"kind": "text", "path": "text/public-domain.txt"},
//    "loss": "cross-entropy", "seed": 1234,
//    "training": {"learning_rate": 0.001, "weight_decay": 0.1, "clip_grad_norm": 1.0, ...},
//    "layers": [{"type": "embedding", "vocab": 96, "dim": 64, "max_seq": 64}, ...]}
//
// A model written in PyTorch comes as "torchscript": "model.pt" (a scripted nn.Sequential) or as
// "python": "model.py:build" (a function returning an nn.Sequential of eager modules) in place of
// "layers": its children become the layers. Paths are relative to the model file. The fields of
// each layer type are listed in LayerTypes() and docs/formats.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/training.h"

namespace gpipe {

inline constexpr const char* kModelFormat = "gpipe-model/1";

enum class LayerType {
  kEmbedding,         // token embedding + learned positions: vocab, dim, max_seq
  kLinear,            // in, out (bias: true)
  kActivation,        // function: relu | gelu | tanh
  kLayerNorm,         // dim
  kDropout,           // p
  kTransformerBlock,  // pre-norm attention + MLP: dim, heads, mlp_ratio (4), dropout (0), causal
  kLmHead,            // layer norm then linear (no bias) to the vocabulary: dim, vocab
  kConv2d,            // in, out, kernel, stride (1), padding (0)
  kConvBlock,         // conv2d + batch-norm + relu: in, out, kernel, stride (1), padding (0)
  kBatchNorm2d,       // channels
  kMaxPool2d,         // kernel, stride (= kernel)
  kAvgPool2d,         // kernel, stride (= kernel)
  kGlobalAvgPool,     // [b, c, h, w] -> [b, c]
  kFlatten,           // [b, ...] -> [b, n]
};
const char* LayerTypeName(LayerType type);

struct LayerSpec {
  LayerType type = LayerType::kLinear;
  std::string name;
  int64_t vocab = 0, dim = 0, max_seq = 0;
  int64_t in = 0, out = 0;
  int64_t heads = 0, mlp_ratio = 4;
  int64_t kernel = 0, stride = 0, padding = 0;
  int64_t channels = 0;
  bool bias = true;
  bool causal = true;
  double dropout = 0;  // p for kDropout, the attention/MLP dropout for kTransformerBlock
  std::string function = "relu";
};

enum class InputKind { kTokens, kImages };
struct ModelInput {
  InputKind kind = InputKind::kTokens;
  int64_t vocab = 0, seq_len = 0;                          // tokens
  int64_t channels = 0, height = 0, width = 0, classes = 0;  // images
};

/// kText: characters of a text file (CharToken); kTokenFile: a flat file of uint16/uint32 token
/// ids (nanoGPT's train.bin); kMegatron: Megatron-LM's indexed dataset (PREFIX.bin/.idx);
/// kNpyImages: uint8 images [N, H, W, C] and int64 labels [N] as .npy files; kSyntheticImages and
/// kRandomTokens are made from the seed. Files are memory-mapped (core/data_files.h).
enum class DataKind { kText, kSyntheticImages, kRandomTokens, kTokenFile, kMegatron, kNpyImages };
struct DataSpec {
  DataKind kind = DataKind::kText;
  /// The file (kText, kTokenFile), the dataset's prefix (kMegatron) or the images (kNpyImages),
  /// resolved against the model file's folder.
  std::string path;
  /// kNpyImages: the labels.
  std::string labels_path;
  /// kTokenFile: "uint16" or "uint32".
  std::string dtype = "uint16";
  /// Evaluation data: the last validation_fraction of the data (the training samples come from
  /// the rest), or other files of the same kind (`validation`); neither: none. Data made from the
  /// seed (random tokens, synthetic images) validates on samples drawn from another stream.
  double validation_fraction = 0;
  std::shared_ptr<const DataSpec> validation;
};

struct ModelSpec {
  std::string name;
  ModelInput input;
  DataSpec data;
  /// "cross-entropy": over the last dimension of the last layer's output.
  std::string loss = "cross-entropy";
  uint64_t seed = 1234;
  /// The optimizer's settings, the learning-rate schedule and clipping (core/training.h); an
  /// older file's top-level "learning_rate" is training.learning_rate.
  TrainingSpec training;
  /// Either layers, or a TorchScript file whose children are the layers, or a Python function
  /// returning an nn.Sequential ("python": "file.py:function"), which the executor exports to a
  /// TorchScript file (executor/python_export.h) and then sets torchscript_path.
  std::vector<LayerSpec> layers;
  std::string torchscript_path;
  std::string python_path;
  std::string python_function;
  nlohmann::json extra = nlohmann::json::object();

  int num_layers() const { return static_cast<int>(layers.size()); }
};

/// `where` names the origin in errors; relative paths are resolved against `base_dir`.
Expected<ModelSpec> ModelFromJson(const nlohmann::json& json, const std::string& where,
                                  const std::string& base_dir);
Expected<ModelSpec> LoadModel(const std::string& path);
nlohmann::json ModelToJson(const ModelSpec& model);

/// Maps a text byte to the tiny GPT's 96-symbol vocabulary: '\n' -> 0, printable ASCII 32..126 ->
/// 1..95, anything else -> 1 (space).
int64_t CharToken(unsigned char c);

}  // namespace gpipe
