#include "core/cluster.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <utility>

#include "core/json_reader.h"
#include "core/text.h"

namespace gpipe {
namespace {

const std::set<std::string> kKnownTop = {"format", "name", "devices", "device_memory_bytes",
                                         "link", "nodes", "links", "calibration", "allreduce", "send_overhead_ms",
                                         "send_issue_bytes_per_s", "saturated_wakeup"};

// Below these, a value is in the wrong unit (GB/s or GiB written as bytes), not a real device.
constexpr double kMinBandwidth = 1e5;

// bandwidth_bytes_per_s of the object `r` reads: > 0, and at least 100 KB/s.
double ReadBandwidth(ObjectReader& r) {
  const double bandwidth = r.NumberAbove("bandwidth_bytes_per_s", 0.0);
  if (r.status().ok() && bandwidth < kMinBandwidth) {
    r.Fail("bandwidth_bytes_per_s", "is " + Format("%g", bandwidth) +
                                        " bytes per second, slower than 100 KB/s; the unit is bytes per second: "
                                        "did you mean " + Format("%g", bandwidth) + " GB/s (" +
                                        Format("%.0f", bandwidth * 1e9) + ")?");
  }
  return bandwidth;
}

Link LinkFromJson(ObjectReader& parent, std::string_view key) {
  Link link;
  const nlohmann::json* json = parent.Object(key);
  if (json == nullptr) return link;
  ObjectReader r(*json, parent.Where(key));
  link.bandwidth_bytes_per_s = ReadBandwidth(r);
  link.latency_ms = r.Number("latency_ms", 0.0);
  parent.Fail(r.status());
  return link;
}

nlohmann::json LinkToJson(const Link& link) {
  return {{"bandwidth_bytes_per_s", link.bandwidth_bytes_per_s}, {"latency_ms", link.latency_ms}};
}

}  // namespace

const Link& Cluster::LinkBetween(int from, int to) const {
  for (const LinkOverride& o : links) {
    if (o.from == from && o.to == to) return o.link;
  }
  return NodeOf(from) == NodeOf(to) ? link : inter_node_link;
}

Expected<Cluster> ClusterFromJson(const nlohmann::json& json, const std::string& where) {
  GPIPE_RETURN_IF_ERROR(CheckFormat(json, where, kClusterFormat));
  ObjectReader r(json, where);
  r.SetKnownFields(kKnownTop);
  Cluster cluster;
  cluster.name = r.OptionalString("name", "");
  cluster.devices = static_cast<int>(r.Integer("devices", 1, 1 << 20));
  cluster.device_memory_bytes = r.Bytes("device_memory_bytes");
  if (r.status().ok() && cluster.device_memory_bytes == 0) {
    r.Fail("device_memory_bytes", "is 0; give each device's memory in bytes, e.g. 85899345920 for 80 GiB");
  }
  if (r.status().ok() && cluster.device_memory_bytes < kMinDeviceMemoryBytes) {
    const std::string given = std::to_string(cluster.device_memory_bytes);
    r.Fail("device_memory_bytes", "is " + given + " bytes, less than 64 KiB; the unit is bytes: did you mean " + given +
                                      " GiB (" + std::to_string(cluster.device_memory_bytes << 30) + ")?");
  }
  cluster.link = LinkFromJson(r, "link");
  if (const nlohmann::json* nodes = r.OptionalObject("nodes")) {
    ObjectReader n(*nodes, r.Where("nodes"));
    cluster.devices_per_node = static_cast<int>(n.Integer("devices_per_node", 1, 1 << 20));
    cluster.inter_node_link = LinkFromJson(n, "inter_node_link");
    if (n.status().ok() && cluster.devices % *cluster.devices_per_node != 0) {
      n.Fail("devices_per_node", std::to_string(*cluster.devices_per_node) + " does not divide devices (" +
                                     std::to_string(cluster.devices) + ")");
    }
    r.Fail(n.status());
  }
  if (r.Has("links")) {
    const nlohmann::json* links = r.Array("links");
    std::map<std::pair<int, int>, size_t> pairs;  // (from, to) -> index in links
    for (size_t i = 0; links != nullptr && i < links->size() && r.status().ok(); ++i) {
      ObjectReader l((*links)[i], r.Where("links") + "[" + std::to_string(i) + "]");
      LinkOverride o;
      o.from = static_cast<int>(l.Integer("from", 0, cluster.devices - 1));
      o.to = static_cast<int>(l.Integer("to", 0, cluster.devices - 1));
      o.link.bandwidth_bytes_per_s = ReadBandwidth(l);
      o.link.latency_ms = l.Number("latency_ms", 0.0);
      if (l.Has("kind")) {
        o.kind = l.String("kind");
        if (l.status().ok() && std::find(std::begin(kLinkKinds), std::end(kLinkKinds), *o.kind) == std::end(kLinkKinds)) {
          l.Fail("kind", "is \"" + *o.kind + "\"; expected \"nvlink\", \"pcie\" or \"same-device\", or no \"kind\" when not known");
        }
      }
      if (l.status().ok() && o.from == o.to) {
        l.Fail("to", "is " + std::to_string(o.to) + ", the same device as from; a link joins two devices");
      }
      if (l.status().ok()) {
        const auto [at, added] = pairs.emplace(std::make_pair(o.from, o.to), i);
        if (!added) {
          l.Fail("from", "the pair " + std::to_string(o.from) + " -> " + std::to_string(o.to) + " is in links[" +
                             std::to_string(at->second) + "] already; give each directed pair once");
        }
      }
      r.Fail(l.status());
      cluster.links.push_back(o);
    }
  }
  if (r.Has("allreduce")) {
    const nlohmann::json* samples = r.Array("allreduce");
    for (size_t i = 0; samples != nullptr && i < samples->size() && r.status().ok(); ++i) {
      ObjectReader a((*samples)[i], r.Where("allreduce") + "[" + std::to_string(i) + "]");
      AllReduceSample sample;
      sample.ranks = static_cast<int>(a.Integer("ranks", 2, 1 << 20));
      sample.bytes = a.Bytes("bytes");
      sample.ms = a.Number("ms", 0.0);
      sample.spread_ms = a.OptionalNumber("spread_ms", 0.0).value_or(0.0);
      r.Fail(a.status());
      cluster.allreduce.push_back(sample);
    }
  }
  cluster.send_overhead_ms = r.OptionalNumber("send_overhead_ms", 0.0);
  cluster.send_issue_bytes_per_s = r.OptionalNumber("send_issue_bytes_per_s", 1.0);
  if (const nlohmann::json* wakeup = r.OptionalObject("saturated_wakeup")) {
    ObjectReader w(*wakeup, r.Where("saturated_wakeup"));
    SaturatedWakeup measured;
    measured.mean_ms = w.Number("mean_ms", 0.0);
    measured.median_ms = w.OptionalNumber("median_ms", 0.0).value_or(0.0);
    measured.spread_ms = w.OptionalNumber("spread_ms", 0.0).value_or(0.0);
    measured.p90_ms = w.OptionalNumber("p90_ms", 0.0).value_or(0.0);
    measured.samples = static_cast<int>(w.OptionalInteger("samples", 1, 1 << 30, 0));
    r.Fail(w.status());
    cluster.saturated_wakeup = measured;
  }
  if (const nlohmann::json* calibration = r.OptionalObject("calibration")) {
    Expected<Calibration> c = CalibrationFromJson(*calibration, r.Where("calibration"));
    if (c.ok()) cluster.calibration = *c; else r.Fail(c.status());
  }
  if (!r.status().ok()) return r.status();
  cluster.extra = UnknownFields(json, kKnownTop);
  return cluster;
}

Expected<Cluster> LoadCluster(const std::string& path) { return LoadJsonAs(path, ClusterFromJson); }

nlohmann::json ClusterToJson(const Cluster& cluster) {
  nlohmann::json json = cluster.extra;
  json["format"] = kClusterFormat;
  if (!cluster.name.empty()) json["name"] = cluster.name;
  json["devices"] = cluster.devices;
  json["device_memory_bytes"] = cluster.device_memory_bytes;
  json["link"] = LinkToJson(cluster.link);
  if (cluster.devices_per_node) {
    json["nodes"] = {{"devices_per_node", *cluster.devices_per_node},
                     {"inter_node_link", LinkToJson(cluster.inter_node_link)}};
  }
  if (!cluster.links.empty()) {
    nlohmann::json links = nlohmann::json::array();
    for (const LinkOverride& o : cluster.links) {
      nlohmann::json l = LinkToJson(o.link);
      l["from"] = o.from;
      l["to"] = o.to;
      if (o.kind) l["kind"] = *o.kind;
      links.push_back(std::move(l));
    }
    json["links"] = std::move(links);
  }
  if (cluster.calibration) json["calibration"] = CalibrationToJson(*cluster.calibration);
  if (cluster.send_overhead_ms) json["send_overhead_ms"] = *cluster.send_overhead_ms;
  if (cluster.send_issue_bytes_per_s) json["send_issue_bytes_per_s"] = *cluster.send_issue_bytes_per_s;
  if (const std::optional<SaturatedWakeup>& w = cluster.saturated_wakeup) {
    json["saturated_wakeup"] = {{"mean_ms", w->mean_ms}, {"median_ms", w->median_ms}, {"spread_ms", w->spread_ms},
                                {"p90_ms", w->p90_ms}, {"samples", w->samples}};
  }
  if (!cluster.allreduce.empty()) {
    nlohmann::json samples = nlohmann::json::array();
    for (const AllReduceSample& a : cluster.allreduce) {
      samples.push_back({{"ranks", a.ranks}, {"bytes", a.bytes}, {"ms", a.ms}, {"spread_ms", a.spread_ms}});
    }
    json["allreduce"] = std::move(samples);
  }
  return json;
}

}  // namespace gpipe
