// A small random search request the planner's tests check against brute force: uneven layers
// (times, parameters, activations and outputs drawn from `rng`) on four devices, two per node.
#pragma once

#include <random>
#include <string>

#include "planner/search.h"

namespace gpipe {

inline SearchRequest SmallRequest(std::mt19937& rng, int layers) {
  SearchRequest request;
  request.profile.model = "small";
  request.profile.device = "test";
  request.profile.microbatch_size = 1;
  for (int l = 0; l < layers; ++l) {
    LayerProfile layer;
    layer.name = "l" + std::to_string(l);
    layer.forward_ms = 0.5 + (rng() % 100) / 40.0;
    layer.backward_ms = 2 * layer.forward_ms;
    layer.backward_weight_ms = layer.forward_ms * (0.5 + (rng() % 50) / 100.0);
    layer.param_bytes = 1'000'000 * (1 + static_cast<int64_t>(rng() % 8));
    layer.activation_bytes = 4'000'000 * (1 + static_cast<int64_t>(rng() % 8));
    layer.output_bytes = 1'000'000 * (1 + static_cast<int64_t>(rng() % 8));
    request.profile.layers.push_back(layer);
  }
  request.cluster.devices = 4;
  request.cluster.devices_per_node = 2;
  request.cluster.link = Link{10e9, 0.02};
  request.cluster.inter_node_link = Link{1e9, 0.2};
  request.global_batch = 8;
  return request;
}

}  // namespace gpipe
