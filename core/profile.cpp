#include "core/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>

#include "core/json_reader.h"
#include "core/suggest.h"

namespace gpipe {
namespace {

const std::set<std::string> kKnownTop = {"format", "model", "device", "microbatch_size",
                                         "dtype", "input_bytes", "rng_state_bytes", "layers",
                                         "step_costs", "tied_parameters", "tensor_parallel",
                                         "tensor_parallel_measurements"};
const std::set<std::string> kKnownPoint = {"tensor_parallel", "input_bytes", "layers", "tied_parameter_bytes"};
const std::set<std::string> kKnownTie = {"layers", "bytes", "name"};

// The path of field `key` under `where`, as ObjectReader::Where writes it.
std::string FieldPath(const std::string& where, const std::string& key) {
  return where + (where.empty() || where.back() == ' ' ? "" : ".") + key;
}

std::string LayerIndexError(const std::string& value, int num_layers) {
  return "expected a layer index, a whole number in [0, " + std::to_string(num_layers - 1) + "] (the profile has " +
         std::to_string(num_layers) + " layers), got " + value;
}

Expected<TiedParameter> TiedParameterFromJson(const nlohmann::json& json, const std::string& where, int num_layers) {
  ObjectReader r(json, where);
  r.SetKnownFields(kKnownTie);
  TiedParameter tie;
  const nlohmann::json* layers = r.Array("layers");
  tie.bytes = r.Bytes("bytes");
  tie.name = r.OptionalString("name", "");
  if (!r.status().ok()) return r.status();
  for (size_t j = 0; j < layers->size(); ++j) {
    const nlohmann::json& value = (*layers)[j];
    const bool index = value.is_number_integer() && !(value.is_number_unsigned() && value.get<uint64_t>() > INT32_MAX) &&
                       value.get<int64_t>() >= 0 && value.get<int64_t>() < num_layers;
    if (!index) {
      return Status::Invalid(r.Where("layers") + "[" + std::to_string(j) + "]: " + LayerIndexError(Describe(value), num_layers));
    }
    tie.layers.push_back(static_cast<int>(value.get<int64_t>()));
  }
  return tie;
}

// How many of the tied parameter's layers lie in `ranges`.
int CountIn(const TiedParameter& tie, const std::pair<int, int>* ranges, size_t num_ranges) {
  int count = 0;
  for (int l : tie.layers) {
    for (size_t i = 0; i < num_ranges; ++i) {
      if (l >= ranges[i].first && l < ranges[i].second) {
        ++count;
        break;
      }
    }
  }
  return count;
}

int64_t CountedTwice(const Profile& profile, const std::pair<int, int>* ranges, size_t num_ranges) {
  int64_t bytes = 0;
  for (const TiedParameter& tie : profile.tied_parameters) {
    const int n = CountIn(tie, ranges, num_ranges);
    if (n >= 2) bytes += tie.bytes * (n - 1);
  }
  return bytes;
}

int64_t SumParamBytes(const Profile& profile, int first, int end) {
  int64_t bytes = 0;
  for (int l = first; l < end; ++l) bytes += profile.layers[l].param_bytes;
  return bytes;
}

Expected<LayerProfile> LayerFromJson(const nlohmann::json& json, const std::string& where) {
  ObjectReader r(json, where);
  LayerProfile layer;
  layer.name = r.String("name");
  layer.forward_ms = r.Number("forward_ms", 0.0);
  layer.backward_ms = r.Number("backward_ms", 0.0);
  layer.backward_weight_ms = r.OptionalNumber("backward_weight_ms", 0.0);
  layer.backward_input_ms = r.OptionalNumber("backward_input_ms", 0.0);
  layer.forward_no_grad_ms = r.OptionalNumber("forward_no_grad_ms", 0.0);
  layer.param_bytes = r.Bytes("param_bytes");
  layer.activation_bytes = r.Bytes("activation_bytes");
  layer.output_bytes = r.Bytes("output_bytes");
  layer.forward_workspace_bytes = r.OptionalBytes("forward_workspace_bytes", 0);
  layer.backward_workspace_bytes = r.OptionalBytes("backward_workspace_bytes", 0);
  layer.weight_pass_bytes = r.OptionalBytes("weight_pass_bytes", 0);
  layer.output_tensors = static_cast<int>(r.OptionalInteger("output_tensors", 1, 1 << 20, 1));
  for (const auto& [field, member] : kInnerFields) {
    if (r.Has(field)) layer.*member = r.OptionalBytes(field, 0);
  }
  {
    // All four, or none: a profile from before the profiler measured them.
    int present = 0;
    for (const char* field : kSplitBackwardFields) present += r.Has(field) ? 1 : 0;
    if (present == 4) {
      SplitBackwardBytes split;
      for (int k = 0; k < 4; ++k) split.*kSplitBackwardMembers[k] = r.Bytes(kSplitBackwardFields[k]);
      layer.split_backward = split;
    } else if (present > 0) {
      for (const char* field : kSplitBackwardFields) {
        if (!r.Has(field)) {
          r.Fail(field, std::string("is missing; the split backward's memory takes all four of backward_input_peak_bytes, "
                                    "weight_pass_cut_bytes, backward_weight_peak_bytes and backward_weight_freed_bytes, "
                                    "or none (then the full backward's workspace stands in): profile the model again, or "
                                    "remove the others"));
          break;
        }
      }
    }
  }
  if (r.status().ok() && layer.backward_weight_ms && *layer.backward_weight_ms > layer.backward_ms) {
    r.Fail("backward_weight_ms", "is " + std::to_string(*layer.backward_weight_ms) +
                                     ", more than backward_ms (" + std::to_string(layer.backward_ms) +
                                     "); it is the weight-gradient part of backward_ms");
  }
  if (!r.status().ok()) return r.status();
  return layer;
}

nlohmann::json LayerToJson(const LayerProfile& layer) {
  nlohmann::json l = {{"name", layer.name},
                      {"forward_ms", layer.forward_ms},
                      {"backward_ms", layer.backward_ms},
                      {"param_bytes", layer.param_bytes},
                      {"activation_bytes", layer.activation_bytes},
                      {"output_bytes", layer.output_bytes}};
  if (layer.backward_weight_ms) l["backward_weight_ms"] = *layer.backward_weight_ms;
  if (layer.backward_input_ms) l["backward_input_ms"] = *layer.backward_input_ms;
  if (layer.forward_no_grad_ms) l["forward_no_grad_ms"] = *layer.forward_no_grad_ms;
  if (layer.forward_workspace_bytes != 0) l["forward_workspace_bytes"] = layer.forward_workspace_bytes;
  if (layer.backward_workspace_bytes != 0) l["backward_workspace_bytes"] = layer.backward_workspace_bytes;
  if (layer.weight_pass_bytes != 0) l["weight_pass_bytes"] = layer.weight_pass_bytes;
  for (const auto& [field, member] : kInnerFields) {
    if (layer.*member) l[field] = *(layer.*member);
  }
  if (layer.output_tensors != 1) l["output_tensors"] = layer.output_tensors;
  if (layer.split_backward) SplitBackwardToJson(*layer.split_backward, l);
  return l;
}

// One entry of tensor_parallel_measurements[]: its layers match the profile's, by count and name.
Expected<TensorParallelPoint> TensorParallelPointFromJson(const nlohmann::json& json, const std::string& where,
                                                          const Profile& profile) {
  ObjectReader r(json, where);
  r.SetKnownFields(kKnownPoint);
  TensorParallelPoint point;
  point.size = static_cast<int>(r.Integer("tensor_parallel", 2, 1 << 16));
  point.input_bytes = r.OptionalBytes("input_bytes", profile.input_bytes);
  const nlohmann::json* layers = r.Array("layers");
  if (!r.status().ok()) return r.status();
  if (layers->size() != profile.layers.size()) {
    return Status::Invalid(r.Where("layers") + ": has " + std::to_string(layers->size()) + " layers, the profile " +
                           std::to_string(profile.layers.size()) + "; give every layer's figures at this t, in order");
  }
  for (size_t i = 0; i < layers->size(); ++i) {
    const std::string at = r.Where("layers") + "[" + std::to_string(i) + "]";
    Expected<LayerProfile> layer = LayerFromJson((*layers)[i], at);
    if (!layer.ok()) return layer.status();
    if (layer->name != profile.layers[i].name) {
      return Status::Invalid(at + ".name: \"" + layer->name + "\" where the profile's layers[" + std::to_string(i) +
                             "] is \"" + profile.layers[i].name + "\"; list the layers in the profile's order");
    }
    ObjectReader l((*layers)[i], at);
    TensorParallelLayer entry{std::move(*layer), 0.0, 0.0};
    entry.forward_collective_bytes = static_cast<double>(l.Bytes("forward_collective_bytes"));
    entry.backward_collective_bytes = static_cast<double>(l.Bytes("backward_collective_bytes"));
    if (!l.status().ok()) return l.status();
    point.layers.push_back(std::move(entry));
  }
  if (json.contains("tied_parameter_bytes")) {
    const nlohmann::json* tied = r.Array("tied_parameter_bytes");
    if (!r.status().ok()) return r.status();
    if (tied->size() != profile.tied_parameters.size()) {
      return Status::Invalid(r.Where("tied_parameter_bytes") + ": has " + std::to_string(tied->size()) +
                             " entries for the profile's " + std::to_string(profile.tied_parameters.size()) +
                             " tied parameters; give each one's bytes per device, in order");
    }
    for (size_t k = 0; k < tied->size(); ++k) {
      const nlohmann::json& value = (*tied)[k];
      if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
        return Status::Invalid(r.Where("tied_parameter_bytes") + "[" + std::to_string(k) +
                               "]: expected a byte count > 0, got " + Describe(value));
      }
      point.tied_bytes.push_back(value.get<int64_t>());
    }
  }
  if (!r.status().ok()) return r.status();
  return point;
}

}  // namespace

bool Profile::HasWeightTimes() const {
  return std::all_of(layers.begin(), layers.end(), [](const LayerProfile& layer) { return layer.backward_weight_ms.has_value(); });
}

std::vector<int> Profile::TensorParallelSizes() const {
  if (tensor_parallel > 1) return {tensor_parallel};
  std::vector<int> sizes = {1};
  for (const TensorParallelPoint& point : tensor_parallel_points) sizes.push_back(point.size);
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

const std::vector<std::string>& Precisions() {
  static const std::vector<std::string> precisions = {"fp32", "bf16", "fp16"};
  return precisions;
}

int BytesPerParameter(const std::string& dtype) { return dtype == "fp32" ? 4 : 2; }

Expected<Profile> ProfileFromJson(const nlohmann::json& json, const std::string& where) {
  GPIPE_RETURN_IF_ERROR(CheckFormat(json, where, kProfileFormat));
  ObjectReader r(json, where);
  r.SetKnownFields(kKnownTop);
  Profile profile;
  profile.model = r.String("model");
  profile.device = r.String("device");
  profile.microbatch_size = r.Integer("microbatch_size", 1);
  profile.dtype = r.OptionalString("dtype", "fp32");
  const std::vector<std::string>& precisions = Precisions();
  if (r.status().ok() && std::find(precisions.begin(), precisions.end(), profile.dtype) == precisions.end()) {
    r.Fail("dtype", "unknown dtype \"" + profile.dtype + "\"; known: " + ChoicesAndSuggestion(profile.dtype, precisions));
  }
  profile.input_bytes = r.OptionalBytes("input_bytes", 0);
  profile.rng_state_bytes = r.OptionalBytes("rng_state_bytes", 0);
  const nlohmann::json* layers = r.Array("layers");
  if (!r.status().ok()) return r.status();
  if (layers->empty()) {
    return Status::Invalid(r.Where("layers") + ": the profile has no layers; it needs at least one");
  }
  std::set<std::string> names;
  for (size_t i = 0; i < layers->size(); ++i) {
    const std::string layer_where = r.Where("layers") + "[" + std::to_string(i) + "]";
    Expected<LayerProfile> layer = LayerFromJson((*layers)[i], layer_where);
    if (!layer.ok()) return layer.status();
    if (!names.insert(layer->name).second) {
      return Status::Invalid(layer_where + ".name: \"" + layer->name +
                             "\" names an earlier layer too; layer names must be unique");
    }
    profile.layers.push_back(std::move(*layer));
  }
  if (json.contains("step_costs")) {
    Expected<StepCosts> costs = StepCostsFromJson(json.at("step_costs"), r.Where("step_costs"));
    if (!costs.ok()) return costs.status();
    profile.step_costs = std::move(*costs);
  }
  if (json.contains("tied_parameters")) {
    const nlohmann::json* ties = r.Array("tied_parameters");
    if (!r.status().ok()) return r.status();
    for (size_t i = 0; i < ties->size(); ++i) {
      const std::string tie_where = r.Where("tied_parameters") + "[" + std::to_string(i) + "]";
      Expected<TiedParameter> tie = TiedParameterFromJson((*ties)[i], tie_where, profile.num_layers());
      if (!tie.ok()) return tie.status();
      profile.tied_parameters.push_back(std::move(*tie));
    }
    GPIPE_RETURN_IF_ERROR(CheckTiedParameters(profile, where));
    for (TiedParameter& tie : profile.tied_parameters) std::sort(tie.layers.begin(), tie.layers.end());
  }
  profile.tensor_parallel = static_cast<int>(r.OptionalInteger("tensor_parallel", 1, 1 << 16, 1));
  if (json.contains("tensor_parallel_measurements")) {
    const nlohmann::json* points = r.Array("tensor_parallel_measurements");
    if (!r.status().ok()) return r.status();
    if (profile.tensor_parallel > 1 && !points->empty()) {
      return Status::Invalid(r.Where("tensor_parallel_measurements") + ": a profile already at tensor_parallel " +
                             std::to_string(profile.tensor_parallel) +
                             " (one device's share) has no other sizes; remove one of the two");
    }
    std::set<int> sizes;
    for (size_t i = 0; i < points->size(); ++i) {
      const std::string at = r.Where("tensor_parallel_measurements") + "[" + std::to_string(i) + "]";
      Expected<TensorParallelPoint> point = TensorParallelPointFromJson((*points)[i], at, profile);
      if (!point.ok()) return point.status();
      if (!sizes.insert(point->size).second) {
        return Status::Invalid(at + ".tensor_parallel: " + std::to_string(point->size) +
                               " is given twice; give each size once");
      }
      profile.tensor_parallel_points.push_back(std::move(*point));
    }
  }
  if (!r.status().ok()) return r.status();
  profile.extra = UnknownFields(json, kKnownTop);
  return profile;
}

Expected<Profile> LoadProfile(const std::string& path) { return LoadJsonAs(path, ProfileFromJson); }

void SplitBackwardToJson(const SplitBackwardBytes& split, nlohmann::json& layer) {
  for (int k = 0; k < 4; ++k) layer[kSplitBackwardFields[k]] = split.*kSplitBackwardMembers[k];
}

nlohmann::json ProfileToJson(const Profile& profile) {
  nlohmann::json json = profile.extra;
  json["format"] = kProfileFormat;
  json["model"] = profile.model;
  json["device"] = profile.device;
  json["microbatch_size"] = profile.microbatch_size;
  json["dtype"] = profile.dtype;
  json["input_bytes"] = profile.input_bytes;
  if (profile.rng_state_bytes > 0) json["rng_state_bytes"] = profile.rng_state_bytes;
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerProfile& layer : profile.layers) layers.push_back(LayerToJson(layer));
  json["layers"] = std::move(layers);
  if (profile.tensor_parallel > 1) json["tensor_parallel"] = profile.tensor_parallel;
  if (!profile.tensor_parallel_points.empty()) {
    nlohmann::json points = nlohmann::json::array();
    for (const TensorParallelPoint& point : profile.tensor_parallel_points) {
      nlohmann::json entry = {{"tensor_parallel", point.size}, {"input_bytes", point.input_bytes}};
      nlohmann::json point_layers = nlohmann::json::array();
      for (const TensorParallelLayer& layer : point.layers) {
        nlohmann::json l = LayerToJson(layer.layer);
        l["forward_collective_bytes"] = std::llround(layer.forward_collective_bytes);
        l["backward_collective_bytes"] = std::llround(layer.backward_collective_bytes);
        point_layers.push_back(std::move(l));
      }
      entry["layers"] = std::move(point_layers);
      if (!point.tied_bytes.empty()) entry["tied_parameter_bytes"] = point.tied_bytes;
      points.push_back(std::move(entry));
    }
    json["tensor_parallel_measurements"] = std::move(points);
  }
  if (profile.step_costs) json["step_costs"] = StepCostsToJson(*profile.step_costs);
  if (!profile.tied_parameters.empty()) {
    nlohmann::json ties = nlohmann::json::array();
    for (const TiedParameter& tie : profile.tied_parameters) {
      nlohmann::json t = {{"layers", tie.layers}, {"bytes", tie.bytes}};
      if (!tie.name.empty()) t["name"] = tie.name;
      ties.push_back(std::move(t));
    }
    json["tied_parameters"] = std::move(ties);
  }
  return json;
}

int64_t TiedBytesCountedTwice(const Profile& profile, const LayerRanges& ranges) {
  if (profile.tied_parameters.empty()) return 0;
  return CountedTwice(profile, ranges.data(), ranges.size());
}

int64_t TiedBytesCountedTwice(const Profile& profile, int first, int end) {
  if (profile.tied_parameters.empty()) return 0;
  const std::pair<int, int> range(first, end);
  return CountedTwice(profile, &range, 1);
}

int64_t ParamBytesOfLayers(const Profile& profile, const LayerRanges& ranges) {
  int64_t bytes = 0;
  for (const auto& [first, end] : ranges) bytes += SumParamBytes(profile, first, end);
  return bytes - TiedBytesCountedTwice(profile, ranges);
}

int64_t ParamBytesOfLayers(const Profile& profile, int first, int end) {
  return SumParamBytes(profile, first, end) - TiedBytesCountedTwice(profile, first, end);
}

Status CheckTiedParameters(const Profile& profile, const std::string& where) {
  const int num_layers = profile.num_layers();
  std::map<int, int64_t> tied_bytes;  // per layer, over the tied parameters so far
  for (size_t i = 0; i < profile.tied_parameters.size(); ++i) {
    const TiedParameter& tie = profile.tied_parameters[i];
    const std::string tie_where = FieldPath(where, "tied_parameters") + "[" + std::to_string(i) + "]";
    const std::string layers_where = tie_where + ".layers";
    std::set<int> seen;
    for (size_t j = 0; j < tie.layers.size(); ++j) {
      const int l = tie.layers[j];
      const std::string element = layers_where + "[" + std::to_string(j) + "]";
      if (l < 0 || l >= num_layers) return Status::Invalid(element + ": " + LayerIndexError(std::to_string(l), num_layers));
      if (!seen.insert(l).second) {
        return Status::Invalid(element + ": layer " + std::to_string(l) + " is listed twice; list each layer that holds the parameter once");
      }
    }
    if (seen.size() < 2) {
      return Status::Invalid(layers_where + ": lists " + std::to_string(seen.size()) +
                             " layer(s); a tied parameter is shared by at least 2 distinct layers");
    }
    if (tie.bytes <= 0) {
      return Status::Invalid(tie_where + ".bytes: expected a byte count > 0, got " + std::to_string(tie.bytes));
    }
    for (int l : seen) {
      const LayerProfile& layer = profile.layers[l];
      if (tie.bytes > layer.param_bytes) {
        return Status::Invalid(tie_where + ".bytes: " + std::to_string(tie.bytes) + " is more than layers[" +
                               std::to_string(l) + "] (" + Quote(layer.name) + ")'s param_bytes (" +
                               std::to_string(layer.param_bytes) +
                               "); each layer that holds a tied parameter counts it in its param_bytes");
      }
      tied_bytes[l] += tie.bytes;
      if (tied_bytes[l] > layer.param_bytes) {
        return Status::Invalid(tie_where + ".bytes: with the tied parameters before it, layers[" + std::to_string(l) +
                               "] (" + Quote(layer.name) + ") holds " + std::to_string(tied_bytes[l]) +
                               " bytes of tied parameters, more than its param_bytes (" +
                               std::to_string(layer.param_bytes) + ")");
      }
    }
  }
  return Status::Ok();
}

}  // namespace gpipe
