#include "simulator/tensor_parallel.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/text.h"
#include "simulator/cost_model.h"

namespace gpipe {

Expected<Profile> ProfileAtTensorParallel(const Profile& profile, int tensor_parallel, const Cluster& cluster) {
  GPIPE_RETURN_IF_ERROR(CheckTensorParallel(tensor_parallel, profile, cluster));
  if (tensor_parallel == profile.tensor_parallel) return profile;
  const auto point = std::find_if(profile.tensor_parallel_points.begin(), profile.tensor_parallel_points.end(),
                                  [&](const TensorParallelPoint& p) { return p.size == tensor_parallel; });
  // (CheckTensorParallel found it.)
  std::vector<int> group(static_cast<size_t>(tensor_parallel));
  std::iota(group.begin(), group.end(), 0);
  const Ring ring = RingOf(cluster, group);
  Profile out = profile;
  out.tensor_parallel = tensor_parallel;
  out.tensor_parallel_points.clear();
  out.input_bytes = point->input_bytes;
  double forward_ms = 0, backward_ms = 0;
  for (size_t l = 0; l < out.layers.size(); ++l) {
    const TensorParallelLayer& at = point->layers[l];
    LayerProfile layer = at.layer;
    const double forward = at.forward_collective_bytes > 0 ? ring.AllReduceMs(at.forward_collective_bytes) : 0.0;
    const double backward = at.backward_collective_bytes > 0 ? ring.AllReduceMs(at.backward_collective_bytes) : 0.0;
    layer.forward_ms += forward;
    if (layer.forward_no_grad_ms) *layer.forward_no_grad_ms += forward;
    layer.backward_ms += backward;
    if (layer.backward_input_ms) *layer.backward_input_ms += backward;
    forward_ms += forward;
    backward_ms += backward;
    out.layers[l] = std::move(layer);
  }
  for (size_t k = 0; k < out.tied_parameters.size(); ++k) {
    TiedParameter& tie = out.tied_parameters[k];
    tie.bytes = k < point->tied_bytes.size() ? point->tied_bytes[k] : std::max<int64_t>(1, tie.bytes / tensor_parallel);
  }
  GPIPE_RETURN_IF_ERROR(CheckTiedParameters(out, "the profile's tensor_parallel_measurements for t = " +
                                                     std::to_string(tensor_parallel)));
  std::string note = "t = " + std::to_string(tensor_parallel) +
                     ": each device's share of every layer from the profile's tensor_parallel_measurements; the "
                     "layers' collectives over the group, priced as a ring over " + std::to_string(tensor_parallel) +
                     " devices of a node, add " + Format("%.3g", forward_ms) + " ms to a micro-batch's forward and " +
                     Format("%.3g", backward_ms) + " ms to its backward";
  if (out.extra.contains("measurements")) {
    out.extra.erase("measurements");
    note += "; the micro-batch sizes the profile measured beside its own (" + std::to_string(profile.microbatch_size) +
            ") are not measured at this t: other sizes scale linearly from it";
  }
  out.extra["tensor_parallel_note"] = note;
  return out;
}

}  // namespace gpipe
