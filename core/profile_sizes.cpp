#include "core/profile_sizes.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace gpipe {
namespace {

constexpr const char* kDerivedNote = "microbatch_size_note";

// The layers measured at one size, read from profile.extra["measurements"]; the profile's own
// layers at its own size. Entries that do not match the profile's layers are ignored.
std::map<int64_t, std::pair<int64_t, std::vector<LayerProfile>>> Points(const Profile& profile) {
  std::map<int64_t, std::pair<int64_t, std::vector<LayerProfile>>> points;
  points[profile.microbatch_size] = {profile.input_bytes, profile.layers};
  const auto it = profile.extra.find("measurements");
  if (it == profile.extra.end() || !it->is_array()) return points;
  for (const nlohmann::json& m : *it) {
    try {
      const int64_t size = m.at("microbatch_size").get<int64_t>();
      const nlohmann::json& layers = m.at("layers");
      if (size < 1 || size == profile.microbatch_size || layers.size() != profile.layers.size()) continue;
      std::vector<LayerProfile> read;
      for (size_t i = 0; i < layers.size(); ++i) {
        const nlohmann::json& l = layers[i];
        LayerProfile layer = profile.layers[i];
        layer.forward_ms = l.at("forward").at("median_ms").get<double>();
        layer.backward_ms = l.at("backward").at("median_ms").get<double>();
        if (l.contains("backward_weight")) layer.backward_weight_ms = l.at("backward_weight").at("median_ms").get<double>();
        if (l.contains("backward_input")) layer.backward_input_ms = l.at("backward_input").at("median_ms").get<double>();
        layer.forward_no_grad_ms.reset();
        if (l.contains("forward_no_grad")) layer.forward_no_grad_ms = l.at("forward_no_grad").at("median_ms").get<double>();
        layer.activation_bytes = l.at("activation_bytes").get<int64_t>();
        layer.output_bytes = l.at("output_bytes").get<int64_t>();
        layer.forward_workspace_bytes = l.value("forward_workspace_bytes", int64_t{0});
        layer.backward_workspace_bytes = l.value("backward_workspace_bytes", int64_t{0});
        layer.weight_pass_bytes = l.value("weight_pass_bytes", int64_t{0});
        for (const auto& [field, member] : kInnerFields) {
          layer.*member = l.contains(field) ? std::optional<int64_t>(l.at(field).get<int64_t>()) : std::nullopt;
        }
        layer.split_backward.reset();
        if (l.contains(kSplitBackwardFields[0])) {
          SplitBackwardBytes split;
          for (int k = 0; k < 4; ++k) split.*kSplitBackwardMembers[k] = l.at(kSplitBackwardFields[k]).get<int64_t>();
          layer.split_backward = split;
        }
        read.push_back(layer);
      }
      points[size] = {m.value("input_bytes", profile.input_bytes), std::move(read)};
    } catch (const nlohmann::json::exception&) {
      continue;
    }
  }
  return points;
}

double Mix(double a, double b, double t) { return a + (b - a) * t; }
int64_t MixBytes(int64_t a, int64_t b, double t) {
  return std::max<int64_t>(0, std::llround(Mix(static_cast<double>(a), static_cast<double>(b), t)));
}

}  // namespace

std::vector<int64_t> MeasuredMicrobatchSizes(const Profile& profile) {
  std::vector<int64_t> sizes;
  for (const auto& [size, point] : Points(profile)) sizes.push_back(size);
  return sizes;
}

Profile ProfileAtMicrobatch(const Profile& profile, int64_t microbatch_size, std::string* note) {
  const auto points = Points(profile);
  Profile out = profile;
  out.microbatch_size = microbatch_size;
  // Co-located ranks' figures too, where the profiler probed them per size.
  if (out.step_costs) out.step_costs = out.step_costs->AtMicrobatch(microbatch_size);
  if (note != nullptr) note->clear();
  if (auto exact = points.find(microbatch_size); exact != points.end()) {
    out.input_bytes = exact->second.first;
    out.layers = exact->second.second;
    // A profile this function made (a planner's plan embeds one) says how its numbers were got.
    const auto derived = profile.extra.find(kDerivedNote);
    if (microbatch_size == profile.microbatch_size && derived != profile.extra.end() && derived->is_string()) {
      if (note != nullptr) *note = derived->get<std::string>();
    } else {
      out.extra.erase(kDerivedNote);
    }
    return out;
  }
  std::string sizes;
  for (const auto& [size, point] : points) sizes += (sizes.empty() ? "" : ", ") + std::to_string(size);
  if (points.size() == 1) {
    const double scale = static_cast<double>(microbatch_size) / static_cast<double>(profile.microbatch_size);
    for (LayerProfile& l : out.layers) {
      l.forward_ms *= scale;
      l.backward_ms *= scale;
      if (l.backward_weight_ms) *l.backward_weight_ms *= scale;
      if (l.backward_input_ms) *l.backward_input_ms *= scale;
      if (l.forward_no_grad_ms) *l.forward_no_grad_ms *= scale;
      l.activation_bytes = std::llround(static_cast<double>(l.activation_bytes) * scale);
      l.output_bytes = std::llround(static_cast<double>(l.output_bytes) * scale);
      l.forward_workspace_bytes = std::llround(static_cast<double>(l.forward_workspace_bytes) * scale);
      l.backward_workspace_bytes = std::llround(static_cast<double>(l.backward_workspace_bytes) * scale);
      l.weight_pass_bytes = std::llround(static_cast<double>(l.weight_pass_bytes) * scale);
      for (const auto& [field, member] : kInnerFields) {
        if (l.*member) *(l.*member) = std::llround(static_cast<double>(*(l.*member)) * scale);
      }
      if (l.split_backward) {
        for (int64_t SplitBackwardBytes::*field : kSplitBackwardMembers) {
          int64_t& bytes = (*l.split_backward).*field;
          bytes = std::llround(static_cast<double>(bytes) * scale);
        }
      }
    }
    out.input_bytes = std::llround(static_cast<double>(out.input_bytes) * scale);
    const std::string how = "the profile measured micro-batches of " + sizes + " only; times and activations for " +
                            std::to_string(microbatch_size) + " are scaled linearly from it";
    out.extra[kDerivedNote] = how;
    if (note != nullptr) *note = how;
    return out;
  }
  // The two measured sizes around `microbatch_size`, or the nearest two outside the range.
  auto hi = points.upper_bound(microbatch_size);
  if (hi == points.end()) --hi;
  if (hi == points.begin()) ++hi;
  auto lo = std::prev(hi);
  const bool outside = microbatch_size < points.begin()->first || microbatch_size > points.rbegin()->first;
  const double t = static_cast<double>(microbatch_size - lo->first) / static_cast<double>(hi->first - lo->first);
  const std::vector<LayerProfile>& a = lo->second.second;
  const std::vector<LayerProfile>& b = hi->second.second;
  for (size_t i = 0; i < out.layers.size(); ++i) {
    LayerProfile& l = out.layers[i];
    l.forward_ms = std::max(0.0, Mix(a[i].forward_ms, b[i].forward_ms, t));
    l.backward_ms = std::max(0.0, Mix(a[i].backward_ms, b[i].backward_ms, t));
    if (a[i].backward_weight_ms && b[i].backward_weight_ms) {
      l.backward_weight_ms = std::clamp(Mix(*a[i].backward_weight_ms, *b[i].backward_weight_ms, t), 0.0, l.backward_ms);
    }
    if (a[i].backward_input_ms && b[i].backward_input_ms) {
      l.backward_input_ms = std::max(0.0, Mix(*a[i].backward_input_ms, *b[i].backward_input_ms, t));
    }
    l.forward_no_grad_ms.reset();
    if (a[i].forward_no_grad_ms && b[i].forward_no_grad_ms) {
      l.forward_no_grad_ms = std::max(0.0, Mix(*a[i].forward_no_grad_ms, *b[i].forward_no_grad_ms, t));
    }
    l.activation_bytes = MixBytes(a[i].activation_bytes, b[i].activation_bytes, t);
    l.output_bytes = MixBytes(a[i].output_bytes, b[i].output_bytes, t);
    l.forward_workspace_bytes = MixBytes(a[i].forward_workspace_bytes, b[i].forward_workspace_bytes, t);
    l.backward_workspace_bytes = MixBytes(a[i].backward_workspace_bytes, b[i].backward_workspace_bytes, t);
    l.weight_pass_bytes = MixBytes(a[i].weight_pass_bytes, b[i].weight_pass_bytes, t);
    for (const auto& [field, member] : kInnerFields) {
      const std::optional<int64_t>&from = a[i].*member, &to = b[i].*member;
      l.*member = from && to ? std::optional<int64_t>(MixBytes(*from, *to, t)) : std::nullopt;
    }
    l.split_backward.reset();
    if (a[i].split_backward && b[i].split_backward) {
      SplitBackwardBytes split;
      for (int64_t SplitBackwardBytes::*field : kSplitBackwardMembers) {
        split.*field = MixBytes((*a[i].split_backward).*field, (*b[i].split_backward).*field, t);
      }
      l.split_backward = split;
    }
  }
  out.input_bytes = MixBytes(lo->second.first, hi->second.first, t);
  const std::string how = std::string(outside ? "extrapolated" : "interpolated") + " linearly to micro-batches of " +
                          std::to_string(microbatch_size) + " from the sizes the profile measured (" + sizes + ")" +
                          (outside ? "; measure this size for a firmer figure (gpipe-plan profile --microbatch-size)" : "");
  out.extra[kDerivedNote] = how;
  if (note != nullptr) *note = how;
  return out;
}

}  // namespace gpipe
