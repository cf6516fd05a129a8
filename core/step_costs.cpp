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

// The array `key` of r's object, each entry read as a Measured; empty when absent.
std::vector<Measured> ReadMeasuredList(ObjectReader& r, const char* key, Status* status, bool positive) {
  std::vector<Measured> list;
  if (!r.Has(key)) return list;
  const nlohmann::json* items = r.Array(key);
  for (size_t i = 0; items != nullptr && i < items->size(); ++i) {
    list.push_back(ReadMeasured((*items)[i], r.Where(key) + "[" + std::to_string(i) + "]", status, positive));
  }
  return list;
}

nlohmann::json MeasuredListToJson(const std::vector<Measured>& list) {
  nlohmann::json json = nlohmann::json::array();
  for (const Measured& m : list) json.push_back(MeasuredToJson(m));
  return json;
}

// The probe's figures per size, ascending and distinct, each list as long as the first entry's.
std::vector<ColocatedAtSize> ReadBySize(ObjectReader& r, Status* status) {
  std::vector<ColocatedAtSize> sizes;
  if (!r.Has("by_microbatch_size")) return sizes;
  const nlohmann::json* items = r.Array("by_microbatch_size");
  for (size_t i = 0; items != nullptr && i < items->size() && status->ok(); ++i) {
    const std::string where = r.Where("by_microbatch_size") + "[" + std::to_string(i) + "]";
    const nlohmann::json& item = (*items)[i];
    if (!item.is_object()) {
      *status = Status::Invalid(where + ": expected {\"microbatch_size\": n, \"compute_scale\": [...], ...}, got " +
                                Describe(item));
      break;
    }
    ObjectReader e(item, where);
    ColocatedAtSize at;
    at.microbatch_size = e.Integer("microbatch_size", 1);
    at.compute_scale = ReadMeasuredList(e, "compute_scale", status, true);
    at.action_gap_ms = ReadMeasuredList(e, "action_gap_ms", status, false);
    at.send_ms = ReadMeasuredList(e, "send_ms", status, false);
    if (!e.status().ok()) {
      *status = e.status();
      break;
    }
    if (!sizes.empty() && at.microbatch_size <= sizes.back().microbatch_size) {
      *status = Status::Invalid(where + ".microbatch_size: " + std::to_string(at.microbatch_size) +
                                " after " + std::to_string(sizes.back().microbatch_size) +
                                "; the sizes must be ascending, each once");
      break;
    }
    if (!sizes.empty() && (at.compute_scale.size() != sizes[0].compute_scale.size() ||
                           at.action_gap_ms.size() != sizes[0].action_gap_ms.size() ||
                           at.send_ms.size() != sizes[0].send_ms.size())) {
      *status = Status::Invalid(where + ": measured " + std::to_string(at.compute_scale.size()) +
                                " counts of ranks, by_microbatch_size[0] " + std::to_string(sizes[0].compute_scale.size()) +
                                " (every size of one probe measures the same counts, with and without sends alike)");
      break;
    }
    sizes.push_back(std::move(at));
  }
  return sizes;
}

// a + (b - a) t, entry by entry (both lists are as long: ReadBySize).
std::vector<Measured> MixLists(const std::vector<Measured>& a, const std::vector<Measured>& b, double t) {
  std::vector<Measured> out(a.size());
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    out[i] = {a[i].median + (b[i].median - a[i].median) * t, a[i].spread + (b[i].spread - a[i].spread) * t};
  }
  return out;
}

void Take(StepCosts& costs, const ColocatedAtSize& at) {
  costs.compute_scale = at.compute_scale;
  costs.action_gap_ms = at.action_gap_ms;
  costs.send_ms = at.send_ms;
}

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

StepCosts StepCosts::AtMicrobatch(int64_t microbatch_size, std::string* note) const {
  if (note != nullptr) note->clear();
  StepCosts out = *this;
  if (by_microbatch_size.empty()) return out;
  const auto hi = std::find_if(by_microbatch_size.begin(), by_microbatch_size.end(),
                               [&](const ColocatedAtSize& at) { return at.microbatch_size >= microbatch_size; });
  const std::string size = std::to_string(microbatch_size);
  if (hi != by_microbatch_size.end() && hi->microbatch_size == microbatch_size) {
    Take(out, *hi);
  } else if (hi == by_microbatch_size.begin() || hi == by_microbatch_size.end()) {
    const ColocatedAtSize& nearest = hi == by_microbatch_size.begin() ? by_microbatch_size.front() : by_microbatch_size.back();
    Take(out, nearest);
    if (note != nullptr) {
      *note = "co-located ranks were probed at micro-batches of " + std::to_string(by_microbatch_size.front().microbatch_size) +
              ".." + std::to_string(by_microbatch_size.back().microbatch_size) + "; " + size + " takes " +
              std::to_string(nearest.microbatch_size) + "'s figures";
    }
  } else {
    const ColocatedAtSize& a = *std::prev(hi);
    const ColocatedAtSize& b = *hi;
    const double t = std::log(static_cast<double>(microbatch_size) / static_cast<double>(a.microbatch_size)) /
                     std::log(static_cast<double>(b.microbatch_size) / static_cast<double>(a.microbatch_size));
    out.compute_scale = MixLists(a.compute_scale, b.compute_scale, t);
    out.action_gap_ms = MixLists(a.action_gap_ms, b.action_gap_ms, t);
    out.send_ms = MixLists(a.send_ms, b.send_ms, t);
    if (note != nullptr) {
      *note = "co-located ranks at micro-batches of " + size + ": interpolated between the probe's " +
              std::to_string(a.microbatch_size) + " and " + std::to_string(b.microbatch_size) + " (in log size)";
    }
  }
  return out;
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
  costs.compute_scale = ReadMeasuredList(r, "compute_scale", &status, true);
  costs.action_gap_ms = ReadMeasuredList(r, "action_gap_ms", &status, false);
  costs.send_ms = ReadMeasuredList(r, "send_ms", &status, false);
  costs.by_microbatch_size = ReadBySize(r, &status);
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
  nlohmann::json json = {{"optimizer_ms_per_gib", optimizers},
                         {"step_overhead_ms", MeasuredToJson(costs.step_overhead_ms)},
                         {"forward_overhead_ms", MeasuredToJson(costs.forward_overhead_ms)},
                         {"backward_overhead_ms", MeasuredToJson(costs.backward_overhead_ms)},
                         {"compute_scale", MeasuredListToJson(costs.compute_scale)},
                         {"sends_held", costs.sends_held}};
  if (!costs.action_gap_ms.empty()) json["action_gap_ms"] = MeasuredListToJson(costs.action_gap_ms);
  if (!costs.send_ms.empty()) json["send_ms"] = MeasuredListToJson(costs.send_ms);
  if (!costs.by_microbatch_size.empty()) {
    nlohmann::json sizes = nlohmann::json::array();
    for (const ColocatedAtSize& at : costs.by_microbatch_size) {
      nlohmann::json entry = {{"microbatch_size", at.microbatch_size}, {"compute_scale", MeasuredListToJson(at.compute_scale)}};
      if (!at.action_gap_ms.empty()) entry["action_gap_ms"] = MeasuredListToJson(at.action_gap_ms);
      if (!at.send_ms.empty()) entry["send_ms"] = MeasuredListToJson(at.send_ms);
      sizes.push_back(std::move(entry));
    }
    json["by_microbatch_size"] = std::move(sizes);
  }
  if (costs.concurrent_ranks > 0) json["concurrent_ranks"] = costs.concurrent_ranks;
  if (!costs.source.empty()) json["source"] = costs.source;
  return json;
}

}  // namespace gpipe
