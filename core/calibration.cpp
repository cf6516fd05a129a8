#include "core/calibration.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/json_reader.h"

namespace gpipe {

namespace {

// Entry ranks_per_node - 1 of a per-ranks-per-node list; past the end the last; empty: `none`.
double PerNodeCount(const std::vector<double>& values, int ranks_per_node, double none) {
  if (values.empty()) return none;
  const size_t i = static_cast<size_t>(std::max(ranks_per_node, 1)) - 1;
  return values[std::min(i, values.size() - 1)];
}

// A list per ranks-per-node count of numbers >= 0 (`meaning`: what each entry is), or one number
// for every count.
std::vector<double> ReadPerNodeCount(ObjectReader& r, const nlohmann::json& object, const char* key,
                                     const char* meaning) {
  std::vector<double> values;
  if (!r.Has(key)) return values;
  if (object.at(key).is_number()) {
    const std::optional<double> one = r.OptionalNumber(key, 0.0);
    if (one) values.push_back(*one);
    return values;
  }
  if (!object.at(key).is_array()) {
    r.Fail(key, "expected a number, or an array of numbers with one per count of ranks on a node, got " +
                    Describe(object.at(key)));
    return values;
  }
  const nlohmann::json* list = r.Array(key);
  for (size_t i = 0; list != nullptr && i < list->size(); ++i) {
    const nlohmann::json& v = (*list)[i];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
      r.Fail(key, "[" + std::to_string(i) + "] is " + Describe(v) + "; each entry is " + meaning);
      break;
    }
    values.push_back(v.get<double>());
  }
  return values;
}

}  // namespace

double Calibration::ComputeScale(int ranks_per_node) const { return PerNodeCount(compute_scale, ranks_per_node, 1.0); }
double Calibration::ForwardOverheadMs(int ranks_per_node) const {
  return PerNodeCount(forward_overhead_ms, ranks_per_node, 0.0);
}
double Calibration::BackwardOverheadMs(int ranks_per_node) const {
  return PerNodeCount(backward_overhead_ms, ranks_per_node, 0.0);
}

double Calibration::TailMs(double param_bytes) const {
  return step_overhead_ms + optimizer_ms_per_gib * param_bytes / (1024.0 * 1024.0 * 1024.0);
}

Expected<Calibration> CalibrationFromJson(const nlohmann::json& json, const std::string& where) {
  if (!json.is_object()) return Status::Invalid(where + ": must be an object, not " + Describe(json));
  ObjectReader r(json, where);
  Calibration c;
  if (r.Has("compute_scale")) {
    const nlohmann::json* scales = r.Array("compute_scale");
    for (size_t i = 0; scales != nullptr && i < scales->size(); ++i) {
      const nlohmann::json& s = (*scales)[i];
      if (!s.is_number() || !(s.get<double>() > 0) || !std::isfinite(s.get<double>())) {
        r.Fail("compute_scale", "[" + std::to_string(i) + "] is " + Describe(s) +
                                    "; each entry is the factor on compute times with that many ranks on a node, "
                                    "a number above 0 (1 = as profiled)");
        break;
      }
      c.compute_scale.push_back(s.get<double>());
    }
  }
  const char* overhead = "the milliseconds each action pays with that many ranks on a node, a number at least 0";
  c.forward_overhead_ms = ReadPerNodeCount(r, json, "forward_overhead_ms", overhead);
  c.backward_overhead_ms = ReadPerNodeCount(r, json, "backward_overhead_ms", overhead);
  c.send_overhead_ms = r.OptionalNumber("send_overhead_ms", 0.0).value_or(0.0);
  c.step_overhead_ms = r.OptionalNumber("step_overhead_ms", 0.0).value_or(0.0);
  c.optimizer_ms_per_gib = r.OptionalNumber("optimizer_ms_per_gib", 0.0).value_or(0.0);
  c.sends_held = r.OptionalBool("sends_held", false);
  c.source = r.OptionalString("source", "");
  if (!r.status().ok()) return r.status();
  return c;
}

nlohmann::json CalibrationToJson(const Calibration& c) {
  nlohmann::json json = {{"compute_scale", c.compute_scale},
                         {"forward_overhead_ms", c.forward_overhead_ms},
                         {"backward_overhead_ms", c.backward_overhead_ms},
                         {"send_overhead_ms", c.send_overhead_ms},
                         {"step_overhead_ms", c.step_overhead_ms},
                         {"optimizer_ms_per_gib", c.optimizer_ms_per_gib},
                         {"sends_held", c.sends_held}};
  if (!c.source.empty()) json["source"] = c.source;
  return json;
}

}  // namespace gpipe
