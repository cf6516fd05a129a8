#include "core/profile.h"

#include <set>

#include "core/json_reader.h"
#include "core/suggest.h"

namespace gpipe {
namespace {

const std::set<std::string> kKnownTop = {"format", "model", "device", "microbatch_size",
                                         "dtype", "input_bytes", "layers", "step_costs"};

Expected<LayerProfile> LayerFromJson(const nlohmann::json& json, const std::string& where) {
  ObjectReader r(json, where);
  LayerProfile layer;
  layer.name = r.String("name");
  layer.forward_ms = r.Number("forward_ms", 0.0);
  layer.backward_ms = r.Number("backward_ms", 0.0);
  layer.backward_weight_ms = r.OptionalNumber("backward_weight_ms", 0.0);
  layer.backward_input_ms = r.OptionalNumber("backward_input_ms", 0.0);
  layer.param_bytes = r.Bytes("param_bytes");
  layer.activation_bytes = r.Bytes("activation_bytes");
  layer.output_bytes = r.Bytes("output_bytes");
  layer.forward_workspace_bytes = r.OptionalBytes("forward_workspace_bytes", 0);
  layer.backward_workspace_bytes = r.OptionalBytes("backward_workspace_bytes", 0);
  layer.weight_pass_bytes = r.OptionalBytes("weight_pass_bytes", 0);
  if (r.status().ok() && layer.backward_weight_ms && *layer.backward_weight_ms > layer.backward_ms) {
    r.Fail("backward_weight_ms", "is " + std::to_string(*layer.backward_weight_ms) +
                                     ", more than backward_ms (" + std::to_string(layer.backward_ms) +
                                     "); it is the weight-gradient part of backward_ms");
  }
  if (!r.status().ok()) return r.status();
  return layer;
}

}  // namespace

Expected<Profile> ProfileFromJson(const nlohmann::json& json, const std::string& where) {
  GPIPE_RETURN_IF_ERROR(CheckFormat(json, where, kProfileFormat));
  ObjectReader r(json, where);
  r.SetKnownFields(kKnownTop);
  Profile profile;
  profile.model = r.String("model");
  profile.device = r.String("device");
  profile.microbatch_size = r.Integer("microbatch_size", 1);
  profile.dtype = r.OptionalString("dtype", "fp32");
  if (r.status().ok() && profile.dtype != "fp32" && profile.dtype != "bf16" &&
      profile.dtype != "fp16") {
    r.Fail("dtype", "unknown dtype \"" + profile.dtype + "\"; known: " +
                        ChoicesAndSuggestion(profile.dtype, {"fp32", "bf16", "fp16"}));
  }
  profile.input_bytes = r.OptionalBytes("input_bytes", 0);
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
  profile.extra = UnknownFields(json, kKnownTop);
  return profile;
}

Expected<Profile> LoadProfile(const std::string& path) { return LoadJsonAs(path, ProfileFromJson); }

nlohmann::json ProfileToJson(const Profile& profile) {
  nlohmann::json json = profile.extra;
  json["format"] = kProfileFormat;
  json["model"] = profile.model;
  json["device"] = profile.device;
  json["microbatch_size"] = profile.microbatch_size;
  json["dtype"] = profile.dtype;
  json["input_bytes"] = profile.input_bytes;
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerProfile& layer : profile.layers) {
    nlohmann::json l = {{"name", layer.name},
                        {"forward_ms", layer.forward_ms},
                        {"backward_ms", layer.backward_ms},
                        {"param_bytes", layer.param_bytes},
                        {"activation_bytes", layer.activation_bytes},
                        {"output_bytes", layer.output_bytes}};
    if (layer.backward_weight_ms) l["backward_weight_ms"] = *layer.backward_weight_ms;
    if (layer.backward_input_ms) l["backward_input_ms"] = *layer.backward_input_ms;
    if (layer.forward_workspace_bytes != 0) l["forward_workspace_bytes"] = layer.forward_workspace_bytes;
    if (layer.backward_workspace_bytes != 0) l["backward_workspace_bytes"] = layer.backward_workspace_bytes;
    if (layer.weight_pass_bytes != 0) l["weight_pass_bytes"] = layer.weight_pass_bytes;
    layers.push_back(std::move(l));
  }
  json["layers"] = std::move(layers);
  if (profile.step_costs) json["step_costs"] = StepCostsToJson(*profile.step_costs);
  return json;
}

}  // namespace gpipe
