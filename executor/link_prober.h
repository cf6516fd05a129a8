// Measuring the links between ranks over the executor's own wire (c10d Gloo or NCCL): for every
// ordered pair of ranks, one-way message times across message sizes (half a ping-pong round trip,
// median of repeats), fitted as time = latency + bytes / bandwidth through the smallest and the
// largest message (a least-squares fit would let one slow sample of a shared machine skew both). The result
// is a gpipe-cluster/1 with every pair as a link, the median pair as the default link, and the
// device memory filled in (the GPU's total memory, or this machine's memory shared by its ranks).
// Then the gradient all-reduce as the trainer runs it (gradients flattened into one buffer, summed
// over the group, copied back) for groups of ranks 0..n-1, n = 2..N, across sizes up to 64 MiB:
// the cluster's "allreduce", which the simulator prices all-reduces from; and how long issuing a
// send occupies its rank: the smallest message's time, "send_overhead_ms", and the rate per byte
// fitted through the smallest and largest message, "send_issue_bytes_per_s" (medians over ranks).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/status.h"
#include "executor/worker.h"

namespace gpipe::executor {

struct LinkProbeSettings {
  std::vector<int64_t> message_bytes = {1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22};
  std::vector<int64_t> allreduce_bytes = {1 << 12, 1 << 16, 1 << 20, 1 << 22, 1 << 24, 1 << 26};
  int repeats = 20;
  std::string device = "cpu";
  std::chrono::milliseconds timeout{60000};
};

/// One pair's fit and the samples behind it.
struct LinkFit {
  int from = 0, to = 0;
  Link link;
  std::vector<std::pair<int64_t, double>> samples;  // (bytes, one-way ms)
};

/// ms = latency + bytes / bandwidth through the smallest and largest message of `samples`.
Link FitLink(const std::vector<std::pair<int64_t, double>>& samples);

/// Every rank of the job calls this; rank 0 gets the cluster and each pair's fit.
Expected<std::optional<std::pair<Cluster, std::vector<LinkFit>>>> ProbeLinks(const WorkerEnv& env,
                                                                              const LinkProbeSettings& settings);

}  // namespace gpipe::executor
