#include "core/calibration.h"

#include <algorithm>
#include <cmath>

#include "core/json_reader.h"

namespace gpipe {

double Calibration::ComputeScale(int ranks_per_node) const {
  if (compute_scale.empty()) return 1.0;
  const size_t i = static_cast<size_t>(std::max(ranks_per_node, 1)) - 1;
  return compute_scale[std::min(i, compute_scale.size() - 1)];
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
  c.forward_overhead_ms = r.OptionalNumber("forward_overhead_ms", 0.0).value_or(0.0);
  c.backward_overhead_ms = r.OptionalNumber("backward_overhead_ms", 0.0).value_or(0.0);
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
