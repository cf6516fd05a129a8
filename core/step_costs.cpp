#include "core/step_costs.h"

#include <algorithm>
#include <cmath>

#include "core/json_reader.h"

namespace gpipe {
namespace {

// {"median": x, "spread": y} with x >= `min` (or above 0 when `positive`) and y >= 0.
Measured ReadMeasured(const nlohmann::json& json, const std::string& where, Status* status, bool positive) {
  Measured m;
  if (!status->ok()) return m;
  if (!json.is_object()) {
    *status = Status::Invalid(where + ": expected {\"median\": number, \"spread\": number}, got " + Describe(json));
    return m;
  }
  ObjectReader r(json, where);
  m.median = positive ? r.NumberAbove("median", 0.0) : r.Number("median", 0.0);
  m.spread = r.OptionalNumber("spread", 0.0).value_or(0.0);
  if (!r.status().ok()) *status = r.status();
  return m;
}

nlohmann::json MeasuredToJson(const Measured& m) { return {{"median", m.median}, {"spread", m.spread}}; }

}  // namespace

Calibration StepCosts::AsCalibration(const std::string& optimizer) const {
  Calibration c;
  for (const Measured& scale : compute_scale) c.compute_scale.push_back(scale.median);
  c.step_overhead_ms = step_overhead_ms.median;
  // One entry per ranks-per-node count the gap was measured for; one for all without it.
  for (size_t n = 0; n < std::max<size_t>(1, action_gap_ms.size()); ++n) {
    const double gap = action_gap_ms.empty() ? 0.0 : action_gap_ms[n].median;
    c.forward_overhead_ms.push_back(forward_overhead_ms.median + gap);
    c.backward_overhead_ms.push_back(backward_overhead_ms.median + gap);
  }
  auto it = optimizer_ms_per_gib.find(optimizer == "adam-mixed" ? "adam" : optimizer);
  if (it != optimizer_ms_per_gib.end()) c.optimizer_ms_per_gib = it->second.median;
  c.sends_held = sends_held;
  c.source = "measured by the profiler (the profile's step_costs)";
  return c;
}

Expected<StepCosts> StepCostsFromJson(const nlohmann::json& json, const std::string& where) {
  if (!json.is_object()) return Status::Invalid(where + ": must be an object, not " + Describe(json));
  ObjectReader r(json, where);
  StepCosts costs;
  Status status = Status::Ok();
  if (const nlohmann::json* optimizers = r.OptionalObject("optimizer_ms_per_gib")) {
    for (const auto& [name, value] : optimizers->items()) {
      costs.optimizer_ms_per_gib[name] = ReadMeasured(value, r.Where("optimizer_ms_per_gib") + "." + name, &status, false);
    }
  }
  if (r.Has("step_overhead_ms")) {
    costs.step_overhead_ms = ReadMeasured(json.at("step_overhead_ms"), r.Where("step_overhead_ms"), &status, false);
  }
  for (const char* key : {"forward_overhead_ms", "backward_overhead_ms"}) {
    if (!r.Has(key)) continue;
    Measured& m = std::string(key) == "forward_overhead_ms" ? costs.forward_overhead_ms : costs.backward_overhead_ms;
    m = ReadMeasured(json.at(key), r.Where(key), &status, false);
  }
  if (r.Has("compute_scale")) {
    const nlohmann::json* scales = r.Array("compute_scale");
    for (size_t i = 0; scales != nullptr && i < scales->size(); ++i) {
      costs.compute_scale.push_back(
          ReadMeasured((*scales)[i], r.Where("compute_scale") + "[" + std::to_string(i) + "]", &status, true));
    }
  }
  if (r.Has("action_gap_ms")) {
    const nlohmann::json* gaps = r.Array("action_gap_ms");
    for (size_t i = 0; gaps != nullptr && i < gaps->size(); ++i) {
      costs.action_gap_ms.push_back(
          ReadMeasured((*gaps)[i], r.Where("action_gap_ms") + "[" + std::to_string(i) + "]", &status, false));
    }
  }
  if (r.Has("send_ms")) {
    const nlohmann::json* sends = r.Array("send_ms");
    for (size_t i = 0; sends != nullptr && i < sends->size(); ++i) {
      costs.send_ms.push_back(ReadMeasured((*sends)[i], r.Where("send_ms") + "[" + std::to_string(i) + "]", &status, false));
    }
  }
  costs.concurrent_ranks = static_cast<int>(r.OptionalInteger("concurrent_ranks", 1, 1 << 20, 0));
  costs.sends_held = r.OptionalBool("sends_held", false);
  costs.source = r.OptionalString("source", "");
  if (!r.status().ok()) return r.status();
  if (!status.ok()) return status;
  return costs;
}

nlohmann::json StepCostsToJson(const StepCosts& costs) {
  nlohmann::json optimizers = nlohmann::json::object();
  for (const auto& [name, m] : costs.optimizer_ms_per_gib) optimizers[name] = MeasuredToJson(m);
  nlohmann::json scales = nlohmann::json::array();
  for (const Measured& m : costs.compute_scale) scales.push_back(MeasuredToJson(m));
  nlohmann::json json = {{"optimizer_ms_per_gib", optimizers},
                         {"step_overhead_ms", MeasuredToJson(costs.step_overhead_ms)},
                         {"forward_overhead_ms", MeasuredToJson(costs.forward_overhead_ms)},
                         {"backward_overhead_ms", MeasuredToJson(costs.backward_overhead_ms)},
                         {"compute_scale", scales},
                         {"sends_held", costs.sends_held}};
  if (!costs.action_gap_ms.empty()) {
    nlohmann::json gaps = nlohmann::json::array();
    for (const Measured& m : costs.action_gap_ms) gaps.push_back(MeasuredToJson(m));
    json["action_gap_ms"] = gaps;
  }
  if (!costs.send_ms.empty()) {
    nlohmann::json sends = nlohmann::json::array();
    for (const Measured& m : costs.send_ms) sends.push_back(MeasuredToJson(m));
    json["send_ms"] = sends;
  }
  if (costs.concurrent_ranks > 0) json["concurrent_ranks"] = costs.concurrent_ranks;
  if (!costs.source.empty()) json["source"] = costs.source;
  return json;
}

}  // namespace gpipe
