// gpipe-plan profile-links -o CLUSTER.json: measure latency and bandwidth between ranks over the
// executor's own wire and write a cluster file. Like `run`, it launches its ranks unless it is one.
#include <ostream>

#include "cli/commands.h"
#include "core/cluster.h"
#include "core/files.h"
#include "core/text.h"
#include "core/units.h"
#include "executor/launcher.h"
#ifdef GPIPE_WITH_TORCH
#include "executor/link_prober.h"
#include "executor/wakeup_probe.h"
#endif

namespace gpipe::cli {
namespace {

class ProfileLinksCommand : public Command {
 public:
  explicit ProfileLinksCommand(CLI::App& app) {
    app.add_option("-o,--output", output_path_, "Write the gpipe-cluster/1 file here")->required();
    app.add_option("--ranks", ranks_, "Ranks in the job (all on this node unless --nnodes)")->check(CLI::Range(2, 1 << 16));
    app.add_option("--device", device_, "cpu (Gloo) or cuda (NCCL, one GPU per rank)")->check(CLI::IsMember({"cpu", "cuda"}));
    app.add_option("--repeats", repeats_, "Round trips per message size (the median is kept)")->check(CLI::Range(1, 100000));
    app.add_option("--timeout", timeout_s_, "Seconds a rank waits for another before giving up")->check(CLI::Range(1, 86400));
    app.add_option("--nnodes", nnodes_, "Machines in the job (run one launcher on each)")->check(CLI::Range(1, 1 << 16));
    app.add_option("--node-rank", node_rank_, "This machine's index among --nnodes")->check(CLI::Range(0, 1 << 16));
    app.add_option("--master-addr", master_addr_, "Where rank 0 serves the rendezvous (default: loopback)");
    app.add_option("--master-port", master_port_, "Its port")->check(CLI::Range(1, 65535));
    app.footer(
        "Examples:\n"
        "  gpipe-plan profile-links --ranks 2 -o profiles/clusters/measured-cpu-2.json\n"
        "  gpipe-plan plan --profile P.json --cluster profiles/clusters/measured-cpu-2.json --global-batch 64\n"
        "For every ordered pair of ranks: one-way time of messages of 1 KiB to 4 MiB (half a round trip),\n"
        "fitted as latency (smallest message) + bytes / bandwidth (to the largest); every pair becomes a link.\n"
        "Then the gradient all-reduce over 2..N ranks, the cost of issuing a send, and (--device cpu) how late\n"
        "a rank woken by a message runs while every core computes (saturated_wakeup).");
  }

  int Run(std::ostream& out, std::ostream& err) override {
#ifndef GPIPE_WITH_TORCH
    (void)out;
    return Fail(err, "profile-links", Status::Invalid(kNoExecutor));
#else
    Expected<std::optional<executor::WorkerEnv>> worker = executor::WorkerEnvFrom(executor::EnvironmentMap());
    if (!worker.ok()) return Fail(err, "profile-links", worker.status());
    if (!worker->has_value()) return Launch(err);
    executor::LinkProbeSettings settings;
    settings.repeats = repeats_;
    settings.device = device_;
    settings.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000));
    auto result = executor::ProbeLinks(**worker, settings);
    if (!result.ok()) return Fail(err, "profile-links", result.status());
    if (!result->has_value()) return kExitOk;
    auto& [cluster, fits] = **result;
    if (device_ == "cpu") {
      // With every core computing, how late a rank woken by its message runs (the other ranks have exited).
      Expected<SaturatedWakeup> wakeup = executor::ProbeSaturatedWakeup({});
      if (!wakeup.ok()) return Fail(err, "profile-links", wakeup.status());
      cluster.saturated_wakeup = *wakeup;
    }
    nlohmann::json json = ClusterToJson(cluster);
    json["source"] = "Measured by gpipe-plan profile-links over " + std::string(device_ == "cuda" ? "NCCL" : "Gloo") +
                     ": one-way time per message size (half the median round trip of " + std::to_string(repeats_) +
                     "), fitted as latency + bytes / bandwidth per ordered pair; allreduce: the gradient all-reduce as the "
                     "trainer runs it (flatten, sum, copy back) over ranks 0..n-1, rank 0's median; device memory: " +
                     (device_ == "cuda" ? "the GPU's total memory"
                                        : "this machine's memory shared by its ranks; saturated_wakeup: how late a rank "
                                          "sleeping on a message runs once it comes while a thread per core computes "
                                          "(executor/wakeup_probe.h)");
    const Status written = WriteFileAtomically(output_path_, json.dump(1) + "\n");
    if (!written.ok()) return Fail(err, "profile-links", written);
    out << Pad("link", 10) << Pad("latency", 12) << Pad("bandwidth", 14) << "one-way times (bytes: ms)\n";
    for (const auto& f : fits) {
      out << Pad(std::to_string(f.from) + " -> " + std::to_string(f.to), 10) << Pad(Sprintf("%.4f ms", f.link.latency_ms), 12)
          << Pad(FormatBytes(f.link.bandwidth_bytes_per_s) + "/s", 14);
      for (const auto& [bytes, ms] : f.samples) out << " " << FormatBytes(static_cast<double>(bytes)) << ": " << Sprintf("%.4f", ms);
      out << "\n";
    }
    int group = 0;
    for (const AllReduceSample& a : cluster.allreduce) {
      if (a.ranks != group) out << "\nall-reduce over " << (group = a.ranks) << " ranks:";
      out << " " << FormatBytes(static_cast<double>(a.bytes)) << ": " << Sprintf("%.3f ±%.3f ms", a.ms, a.spread_ms) << ";";
    }
    if (group != 0) out << "\n";
    if (const std::optional<SaturatedWakeup>& w = cluster.saturated_wakeup) {
      out << "a rank woken by its message while every core computes: " << Sprintf("%.3f ms", w->mean_ms)
          << " on average (median " << Sprintf("%.3f", w->median_ms) << ", slowest tenth from " << Sprintf("%.3f", w->p90_ms)
          << ", " << w->samples << " wake-ups)\n";
    }
    out << "device memory " << FormatBytes(static_cast<double>(cluster.device_memory_bytes)) << " per rank\n";
    out << "cluster written to " << output_path_ << "\n";
    return kExitOk;
#endif
  }

 private:
#ifdef GPIPE_WITH_TORCH
  int Launch(std::ostream& err) {
    executor::LaunchOptions launch;
    launch.nnodes = nnodes_;
    launch.node_rank = node_rank_;
    launch.world_size = ranks_;
    if (ranks_ % nnodes_ != 0 || node_rank_ >= nnodes_) {
      return Fail(err, "profile-links", Status::Usage("--ranks " + std::to_string(ranks_) + " must split evenly over --nnodes " +
                                       std::to_string(nnodes_) + ", and --node-rank be below it"));
    }
    launch.master_addr = master_addr_;
    launch.master_port = master_port_ > 0 ? master_port_ : executor::FreeLoopbackPort();
    launch.argv = {executor::SelfExecutable(), "profile-links", "-o", output_path_,
                   "--ranks", std::to_string(ranks_), "--device", device_, "--repeats", std::to_string(repeats_),
                   "--timeout", Format("%g", timeout_s_)};
    return executor::LaunchRanks(launch, err) == 0 ? kExitOk : kExitFailure;
  }
#endif

  std::string output_path_, device_ = "cpu", master_addr_ = "127.0.0.1";
  int ranks_ = 2, repeats_ = 20, nnodes_ = 1, node_rank_ = 0, master_port_ = 0;
  double timeout_s_ = 60;
};

}  // namespace

std::unique_ptr<Command> MakeProfileLinksCommand(CLI::App& app) { return std::make_unique<ProfileLinksCommand>(app); }

}  // namespace gpipe::cli
