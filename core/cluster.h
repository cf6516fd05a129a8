// The cluster format, gpipe-cluster/1: how many devices, how much memory each has, and what the
// links between them cost. A link delivers a message of n bytes after latency_ms + n / bandwidth.
// Links default to `link`; a cluster of several nodes names `nodes.devices_per_node` and the
// slower `nodes.inter_node_link`; `links` overrides single directed device pairs. Devices are
// numbered 0..devices-1 and node n holds devices [n*devices_per_node, (n+1)*devices_per_node).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/calibration.h"
#include "core/status.h"

namespace gpipe {

inline constexpr const char* kClusterFormat = "gpipe-cluster/1";
/// Less device memory than this is a unit mistake (GiB written as bytes), not a real device.
inline constexpr int64_t kMinDeviceMemoryBytes = int64_t{1} << 16;

struct Link {
  double bandwidth_bytes_per_s = 0;
  double latency_ms = 0;

  /// Time for one message of `bytes` to arrive.
  double TransferMs(double bytes) const { return latency_ms + bytes / bandwidth_bytes_per_s * 1e3; }
};

/// What carries a link, as `profile-links` found it on GPUs: "nvlink", "pcie" or "same-device".
inline constexpr const char* kLinkKinds[] = {"nvlink", "pcie", "same-device"};

/// One directed pair whose link differs from the default.
struct LinkOverride {
  int from = 0;
  int to = 0;
  Link link;
  /// One of kLinkKinds; absent when not known (CPU ranks, ranks on different nodes, hand-written files).
  std::optional<std::string> kind = std::nullopt;
};

/// One measured all-reduce (`gpipe-plan profile-links`): `ranks` ranks summing `bytes` of
/// gradients as the executor does (flattened into one buffer, summed, copied back).
struct AllReduceSample {
  int ranks = 2;
  int64_t bytes = 0;
  double ms = 0;         // median
  double spread_ms = 0;  // half the interquartile range
};

/// Measured by profile-links on a CPU (executor/wakeup_probe.h): how late a rank that sleeps
/// waiting for a message runs again once it arrives, while every core of the node is computing.
struct SaturatedWakeup {
  double mean_ms = 0;    // what the simulator adds
  double median_ms = 0;
  double spread_ms = 0;  // half the interquartile range
  double p90_ms = 0;
  int samples = 0;
};

struct Cluster {
  std::string name;
  int devices = 1;
  int64_t device_memory_bytes = 0;
  Link link;
  /// Devices per node; absent means one node holds every device.
  std::optional<int> devices_per_node;
  Link inter_node_link;
  std::vector<LinkOverride> links;
  /// Fitted by `gpipe-plan calibrate`; absent: the profile and links alone.
  std::optional<Calibration> calibration;
  /// Measured all-reduces; the simulator prices a group of a measured size from these rather than
  /// from the links' ring model.
  std::vector<AllReduceSample> allreduce;
  /// Measured by profile-links: how long issuing a send occupies the sending rank (the wire's call
  /// returning, before the message arrives); used when there is no calibration.
  std::optional<double> send_overhead_ms;
  /// Written by profile-links with send_overhead_ms: the rate at which issuing a send occupies its
  /// rank per byte (Gloo writes what the socket takes at once in the sender's thread), so that a
  /// send of b bytes occupies it send_overhead_ms + b / send_issue_bytes_per_s.
  std::optional<double> send_issue_bytes_per_s;
  /// Written by profile-links on a CPU: what a message that reaches a waiting rank costs it when
  /// the node's cores are all computing (the simulator's core sharing adds the mean; absent: 0).
  std::optional<SaturatedWakeup> saturated_wakeup;
  nlohmann::json extra = nlohmann::json::object();

  /// The link that carries messages from device `from` to device `to`.
  const Link& LinkBetween(int from, int to) const;
  int NodeOf(int device) const { return devices_per_node ? device / *devices_per_node : 0; }
};

Expected<Cluster> ClusterFromJson(const nlohmann::json& json, const std::string& where);
Expected<Cluster> LoadCluster(const std::string& path);
nlohmann::json ClusterToJson(const Cluster& cluster);

}  // namespace gpipe
