// Plans and models for the executor tests: a small GPT on random tokens, cut evenly into stages.
#pragma once

#include <string>

#include "core/model.h"
#include "core/plan.h"
#include "core/schedule/placement.h"

namespace gpipe::executor::testing {

/// A GPT with an embedding, `blocks` transformer blocks (dim 16, 2 heads) and a head: blocks + 2
/// layers, vocabulary 16, sequence 8, random-token data.
inline ModelSpec TinyGpt(int blocks, double learning_rate = 0.1) {
  ModelSpec m;
  m.name = "test-gpt";
  m.input.kind = InputKind::kTokens;
  m.input.vocab = 16;
  m.input.seq_len = 8;
  m.data.kind = DataKind::kRandomTokens;
  m.seed = 7;
  m.training.learning_rate = learning_rate;
  LayerSpec embed;
  embed.type = LayerType::kEmbedding;
  embed.name = "embedding";
  embed.vocab = 16;
  embed.dim = 16;
  embed.max_seq = 8;
  m.layers.push_back(embed);
  for (int i = 0; i < blocks; ++i) {
    LayerSpec block;
    block.type = LayerType::kTransformerBlock;
    block.name = "block" + std::to_string(i);
    block.dim = 16;
    block.heads = 2;
    block.mlp_ratio = 2;
    m.layers.push_back(block);
  }
  LayerSpec head;
  head.type = LayerType::kLmHead;
  head.name = "head";
  head.dim = 16;
  head.vocab = 16;
  m.layers.push_back(head);
  return m;
}

/// A model of images (3 channels, `size` x `size`, `classes` classes, synthetic data) with no
/// layers yet; add them with ImageLayer.
inline ModelSpec ImageModel(int64_t size, int64_t classes, double learning_rate) {
  ModelSpec model;
  model.name = "test-cnn";
  model.input.kind = InputKind::kImages;
  model.input.channels = 3;
  model.input.height = model.input.width = size;
  model.input.classes = classes;
  model.data.kind = DataKind::kSyntheticImages;
  model.training.learning_rate = learning_rate;
  return model;
}

/// A layer of an image model: a 3x3 convolution (stride 1, padding 1), or a pooling of 2x2 with
/// stride 2; `in` and `out` are the channels or features where the type has them.
inline LayerSpec ImageLayer(LayerType type, int64_t in, int64_t out) {
  LayerSpec l;
  l.type = type;
  l.name = std::string(LayerTypeName(type)) + std::to_string(in) + "-" + std::to_string(out);
  l.in = in;
  l.out = out;
  l.kernel = type == LayerType::kConv2d ? 3 : 2;
  l.stride = type == LayerType::kConv2d ? 1 : 2;
  l.padding = type == LayerType::kConv2d ? 1 : 0;
  return l;
}

/// A plan for `layers` layers cut as evenly as possible into the kind's stages (K; K x chunks in a
/// loop; 2K in a V), placed as the kind places them.
inline Plan EvenPlan(int layers, ScheduleKind schedule, int ranks, int chunks, int microbatches, int replicas,
                     int64_t global_batch, bool remat, Optimizer optimizer) {
  Plan plan;
  for (int i = 0; i < layers; ++i) {
    LayerProfile layer;
    layer.name = "layer" + std::to_string(i);
    layer.forward_ms = 1;
    layer.backward_ms = 2;
    layer.backward_weight_ms = 1;
    plan.profile.layers.push_back(layer);
  }
  plan.profile.model = "test-gpt";
  plan.profile.device = "cpu";
  plan.cluster.devices = ranks * replicas;
  plan.cluster.device_memory_bytes = int64_t{1} << 33;
  plan.cluster.link = {1e9, 0.01};
  plan.schedule = schedule;
  plan.microbatches = microbatches;
  plan.global_batch = global_batch;
  plan.replicas = replicas;
  plan.optimizer = optimizer;
  const int stages = StageCount(schedule, ranks, chunks);
  const std::vector<int> placed = PlaceStages(schedule, ranks, stages);
  for (int s = 0; s < stages; ++s) {
    StagePlan stage;
    stage.first_layer = layers * s / stages;
    stage.end_layer = layers * (s + 1) / stages;
    stage.rank = placed[s];
    stage.remat = remat;
    plan.stages.push_back(stage);
  }
  return plan;
}

}  // namespace gpipe::executor::testing
