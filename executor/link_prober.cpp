#include "executor/link_prober.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>

#ifdef GPIPE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "executor/c10d_communicator.h"
#include "executor/profiler.h"

namespace gpipe::executor {
namespace {

int64_t DeviceMemoryBytes(const std::string& device, int ranks_here) {
#ifdef GPIPE_WITH_CUDA
  if (device == "cuda") {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) return static_cast<int64_t>(total_bytes);
  }
#endif
  (void)device;
  const int64_t pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages * page / std::max(1, ranks_here);
}

// This rank's GPU as the other ranks see it, to name each measured pair's link ("nvlink", "pcie" or
// "same-device"): the host, the GPU's PCI bus id, and for every GPU visible here, by bus id, what
// joins this GPU to it. NVML-free: peer access plus native atomics over the peer link, which NVLink
// offers and PCIe peer-to-peer does not, means NVLink; any other pair of GPUs is PCIe (peer-to-peer
// or through the host). Empty on the CPU.
nlohmann::json DeviceTopology(const torch::Device& device) {
  nlohmann::json topology = nlohmann::json::object();
#ifdef GPIPE_WITH_CUDA
  if (!device.is_cuda()) return topology;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const auto bus_id = [](int index) {
    char id[64] = {};
    return cudaDeviceGetPCIBusId(id, sizeof(id), index) == cudaSuccess ? std::string(id) : std::string();
  };
  const int mine = device.index();
  topology["host"] = std::string(host);
  topology["bus_id"] = bus_id(mine);
  nlohmann::json kinds = nlohmann::json::object();
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  for (int other = 0; other < count; ++other) {
    const std::string id = bus_id(other);
    if (id.empty()) continue;
    if (other == mine) {
      kinds[id] = "same-device";
      continue;
    }
    int access = 0, atomics = 0;
    if (cudaDeviceCanAccessPeer(&access, mine, other) != cudaSuccess) access = 0;
    if (access && cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, mine, other) != cudaSuccess) {
      atomics = 0;
    }
    kinds[id] = access && atomics ? "nvlink" : "pcie";
  }
  (void)cudaGetLastError();  // a refused query above must not surface in a later, unrelated CUDA call
  topology["kinds"] = std::move(kinds);
#else
  (void)device;
#endif
  return topology;
}

// The kind of the link from rank `from` to rank `to`, from their topologies; none across hosts or
// when either is unknown (the CPU).
std::optional<std::string> LinkKind(const nlohmann::json& from, const nlohmann::json& to) {
  if (!from.contains("kinds") || !to.contains("bus_id") || from.value("host", "") != to.value("host", "")) {
    return std::nullopt;
  }
  const std::string id = to.at("bus_id").get<std::string>();
  if (id.empty()) return std::nullopt;
  if (id == from.value("bus_id", "")) return "same-device";
  const nlohmann::json& kinds = from.at("kinds");
  if (!kinds.contains(id)) return std::nullopt;
  return kinds.at(id).get<std::string>();
}

// The gradient all-reduce of `bytes` over ranks 0..n-1 as SumOverReplicas runs it (executor/trainer.cpp):
// two gradients flattened into one buffer, summed over the group, copied back; rank 0's median.
std::vector<AllReduceSample> ProbeAllReduce(Communicator& comm, const torch::Device& device,
                                            const LinkProbeSettings& settings) {
  std::vector<AllReduceSample> samples;
  for (int n = 2; n <= comm.size(); ++n) {
    std::vector<int> group;
    for (int r = 0; r < n; ++r) group.push_back(r);
    for (const int64_t bytes : settings.allreduce_bytes) {
      if (comm.rank() < n) {
        const int64_t floats = std::max<int64_t>(2, bytes / 4);
        std::vector<torch::Tensor> grads = {torch::ones({floats / 2}, device), torch::ones({floats - floats / 2}, device)};
        const int repeats = bytes >= (int64_t{1} << 24) ? std::max(3, settings.repeats / 4) : settings.repeats;
        std::vector<double> times;
        for (int rep = 0; rep < repeats + 1; ++rep) {
          const double ms = DeviceTimeMs(device, [&] {
            std::vector<torch::Tensor> pieces;
            for (const torch::Tensor& g : grads) pieces.push_back(g.reshape({-1}));
            torch::Tensor flat = torch::cat(pieces);
            comm.AllReduceSum(flat, group);
            int64_t offset = 0;
            for (torch::Tensor& g : grads) {
              g.copy_(flat.narrow(0, offset, g.numel()).view_as(g));
              offset += g.numel();
            }
          }, settings.timeout);
          if (rep > 0) times.push_back(ms);  // the first also sets up the group
        }
        if (comm.rank() == 0) {
          const Timing t = Summarize(times);
          samples.push_back({n, floats * 4, t.median_ms, t.spread_ms});
        }
      }
      comm.Barrier();
    }
  }
  return samples;
}

}  // namespace

Link FitLink(const std::vector<std::pair<int64_t, double>>& samples) {
  Link link{1e15, 0};
  if (samples.empty()) return link;
  auto sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  const auto& [small_bytes, small_ms] = sorted.front();
  const auto& [large_bytes, large_ms] = sorted.back();
  link.latency_ms = std::max(0.0, small_ms);
  if (large_bytes > small_bytes && large_ms > small_ms) {
    link.bandwidth_bytes_per_s = static_cast<double>(large_bytes - small_bytes) / (large_ms - small_ms) * 1e3;
  }
  return link;
}

Expected<std::optional<std::pair<Cluster, std::vector<LinkFit>>>> ProbeLinks(const WorkerEnv& env,
                                                                              const LinkProbeSettings& settings) {
  // On a GPU, this rank's device is bound as `run` binds it: the current device for the whole
  // probe, so the events time its current stream, which is also the stream NCCL's waits hold back.
  torch::Device device(torch::kCPU);
  if (settings.device == "cuda") {
    Expected<int> bound = BindCudaRank(env, settings.timeout);
    if (!bound.ok()) return bound.status().WithContext("rank " + std::to_string(env.rank));
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(*bound));
  }
  RendezvousOptions rendezvous = RendezvousFor(env.rank, env.world_size, env.master_addr, env.master_port,
                                               settings.timeout, settings.device == "cuda");
  rendezvous.device_index = device.is_cuda() ? device.index() : 0;
  Expected<std::unique_ptr<Communicator>> comm = ConnectC10d(rendezvous);
  if (!comm.ok()) return comm.status();
  std::vector<LinkFit> fits;
  std::map<int64_t, std::vector<double>> issue;  // this rank's send-issue times, by message size
  try {
    // Pairs in a fixed order, every rank walking the same list: one pair at a time on the wire.
    for (int from = 0; from < env.world_size; ++from) {
      for (int to = 0; to < env.world_size; ++to) {
        if (from == to) continue;
        LinkFit fit{from, to, {}, {}};
        for (const int64_t bytes : settings.message_bytes) {
          torch::Tensor buffer = torch::zeros({bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
          std::vector<double> one_way;
          for (int rep = 0; rep < settings.repeats + 1; ++rep) {
            if (env.rank != from && env.rank != to) continue;
            // The round trip: the host clock on the CPU, events on the current stream on a GPU.
            // Issuing a send is the host's time either way: how long the call holds the rank.
            const double ms = DeviceTimeMs(device, [&] {
              const auto start = std::chrono::steady_clock::now();
              if (env.rank == from) {
                std::unique_ptr<PendingWork> sent = (*comm)->Send(buffer, to, 1);
                const double issue_ms =
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
                if (rep > 0) issue[bytes].push_back(issue_ms);
                sent->Wait();
                (*comm)->Recv(buffer, to, 2)->Wait();
              } else {
                (*comm)->Recv(buffer, from, 1)->Wait();
                (*comm)->Send(buffer, from, 2)->Wait();
              }
            }, settings.timeout);
            if (rep > 0) one_way.push_back(ms / 2);  // the first exchange warms up
          }
          if (env.rank == from) fit.samples.emplace_back(bytes, Summarize(one_way).median_ms);
        }
        (*comm)->Barrier();
        if (env.rank == from) {
          fit.link = FitLink(fit.samples);
          fits.push_back(fit);
        }
      }
    }
  } catch (const std::exception& e) {
    return Status::Invalid("rank " + std::to_string(env.rank) + ": probing links: " + e.what());
  }
  std::vector<AllReduceSample> allreduce;
  try {
    allreduce = ProbeAllReduce(**comm, device, settings);
  } catch (const std::exception& e) {
    return Status::Invalid("rank " + std::to_string(env.rank) + ": timing the gradient all-reduce: " + e.what());
  }
  // This rank's send issue: the median per message size, fitted as overhead + bytes / rate.
  std::vector<std::pair<int64_t, double>> issue_medians;
  for (auto& [bytes, times] : issue) issue_medians.emplace_back(bytes, Summarize(times).median_ms);
  const Link issue_fit = FitLink(issue_medians);
  nlohmann::json mine = nlohmann::json::array();
  for (const LinkFit& f : fits) {
    nlohmann::json samples = nlohmann::json::array();
    for (const auto& [bytes, ms] : f.samples) samples.push_back({bytes, ms});
    mine.push_back({{"from", f.from}, {"to", f.to}, {"latency_ms", f.link.latency_ms},
                    {"bandwidth_bytes_per_s", f.link.bandwidth_bytes_per_s}, {"samples", samples},
                    {"issue_ms", issue_medians.empty() ? 0.0 : issue_medians.front().second},
                    {"issue_bytes_per_s", issue_fit.bandwidth_bytes_per_s}});
  }
  const nlohmann::json report = {{"fits", std::move(mine)}, {"topology", DeviceTopology(device)}};
  std::vector<std::string> all;
  try {
    all = (*comm)->GatherToRankZero(report.dump());
  } catch (const std::exception& e) {
    return Status::Invalid(std::string("collecting the link measurements: ") + e.what());
  }
  if (env.rank != 0) return std::optional<std::pair<Cluster, std::vector<LinkFit>>>();
  std::vector<LinkFit> every;
  std::vector<double> issue_small, issue_rates;
  std::vector<nlohmann::json> topologies;  // by rank
  for (const std::string& text : all) {
    const nlohmann::json report_of_rank = nlohmann::json::parse(text);
    topologies.push_back(report_of_rank.at("topology"));
    for (const nlohmann::json& j : report_of_rank.at("fits")) {
      issue_small.push_back(j["issue_ms"].get<double>());
      issue_rates.push_back(j["issue_bytes_per_s"].get<double>());
      LinkFit f;
      f.from = j["from"];
      f.to = j["to"];
      f.link.latency_ms = j["latency_ms"];
      f.link.bandwidth_bytes_per_s = j["bandwidth_bytes_per_s"];
      for (const nlohmann::json& s : j["samples"]) f.samples.emplace_back(s[0].get<int64_t>(), s[1].get<double>());
      every.push_back(f);
    }
  }
  Cluster cluster;
  cluster.name = "measured-" + settings.device + "-" + std::to_string(env.world_size);
  cluster.devices = env.world_size;
  const char* local_size = std::getenv("LOCAL_WORLD_SIZE");
  cluster.device_memory_bytes = DeviceMemoryBytes(settings.device, local_size ? std::atoi(local_size) : env.world_size);
  std::vector<LinkFit> by_bandwidth = every;
  std::sort(by_bandwidth.begin(), by_bandwidth.end(), [](const LinkFit& a, const LinkFit& b) {
    return a.link.bandwidth_bytes_per_s < b.link.bandwidth_bytes_per_s;
  });
  cluster.link = by_bandwidth.empty() ? Link{1e9, 0} : by_bandwidth[by_bandwidth.size() / 2].link;
  for (const LinkFit& f : every) {
    LinkOverride o{f.from, f.to, f.link};
    if (f.from < static_cast<int>(topologies.size()) && f.to < static_cast<int>(topologies.size())) {
      o.kind = LinkKind(topologies[static_cast<size_t>(f.from)], topologies[static_cast<size_t>(f.to)]);
    }
    cluster.links.push_back(o);
  }
  cluster.allreduce = std::move(allreduce);
  if (!issue_small.empty()) {
    cluster.send_overhead_ms = Summarize(issue_small).median_ms;
    std::nth_element(issue_rates.begin(), issue_rates.begin() + static_cast<std::ptrdiff_t>(issue_rates.size() / 2),
                     issue_rates.end());
    cluster.send_issue_bytes_per_s = issue_rates[issue_rates.size() / 2];
  }
  return std::optional<std::pair<Cluster, std::vector<LinkFit>>>(std::make_pair(cluster, every));
}

}  // namespace gpipe::executor
