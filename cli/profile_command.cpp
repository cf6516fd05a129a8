// gpipe-plan profile --model MODEL -o PROFILE.json: measure every layer of a model on this device.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "core/files.h"
#include "core/model.h"
#include "core/profile.h"
#include "core/text.h"
#include "core/units.h"
#ifdef GPIPE_WITH_TORCH
#include "core/json_reader.h"
#include "executor/launcher.h"
#include "executor/profiler.h"
#include "executor/step_cost_prober.h"
#endif

namespace gpipe::cli {
namespace {

class ProfileCommand : public Command {
 public:
  explicit ProfileCommand(CLI::App& app) {
    app.add_option("--model", model_path_, "A gpipe-model/1 file (see models/)")->required();
    app.add_option("-o,--output", output_path_, "Write the gpipe-profile/1 file here")->required();
    app.add_option("--microbatch-size", sizes_, "Samples per micro-batch; several: 4,8,16 (the first is the profile's)")
        ->delimiter(',')
        ->check(CLI::Range(1, 1 << 24));
    app.add_option("--device", device_, "cpu, or cuda (GPU 0)")->check(CLI::IsMember({"cpu", "cuda"}));
    app.add_option("--threads", threads_, "Intra-op threads, as each rank will have (run --threads-per-rank)")
        ->check(CLI::Range(1, 1024));
    app.add_option("--warmup", warmup_, "Unmeasured runs before measuring")->check(CLI::Range(0, 1000));
    app.add_option("--repeats", repeats_, "Measured runs per layer; the median is kept")->check(CLI::Range(1, 100000));
    app.add_option("--ranks-per-node", ranks_per_node_,
                   "Measure compute with 1..N ranks computing at once on this node (the plan's ranks per node "
                   "picks one); default: this machine's cores, at least 4 and at most 8")
        ->check(CLI::Range(1, 64));
    // Internal: one of the co-located processes `profile` starts to measure --ranks-per-node.
    app.add_option("--colocated-worker", colocated_worker_, "")->group("");
    app.footer(
        "Examples:\n"
        "  gpipe-plan profile --model models/tiny-gpt.json --microbatch-size 8 -o tiny-gpt-profile.json\n"
        "  gpipe-plan profile --model models/tiny-gpt.json --microbatch-size 4,8,16 --repeats 20 -o p.json\n"
        "  gpipe-plan plan --profile tiny-gpt-profile.json --cluster profiles/clusters/cpu-2.json --global-batch 64 -o plan.json\n"
        "Per layer: forward, backward and its weight-gradient part (median of --repeats, spread = half the\n"
        "interquartile range), parameter, activation (what autograd keeps, measured) and output bytes.\n"
        "Per step (step_costs): the optimizer step per GiB of parameters for sgd, momentum and adam, the\n"
        "fixed cost of a step, and the slowdown of compute while 1..N ranks share the node.");
  }

  int Run(std::ostream& out, std::ostream& err) override {
    Expected<ModelSpec> model = LoadModel(model_path_);
    if (!model.ok()) return Fail(err, "profile", model.status());
#ifndef GPIPE_WITH_TORCH
    (void)out;
    return Fail(err, "profile", Status::Invalid(kNoExecutor));
#else
    executor::ProfileSettings settings;
    settings.microbatch_sizes = sizes_;
    settings.warmup = warmup_;
    settings.repeats = repeats_;
    settings.threads = threads_;
    settings.device_name = device_;
    if (device_ == "cuda") {
      if (!torch::cuda::is_available()) return Fail(err, "profile", Status::Invalid("--device cuda: no usable GPU here; use --device cpu"));
      settings.device = torch::Device(torch::kCUDA, 0);
    }
    if (!colocated_worker_.empty()) return ColocatedWorker(*model, settings, err);
    settings.progress = [&err](int done, int total, const std::string& what) {
      const int width = 30, filled = width * done / total;
      err << "\r[" << std::string(static_cast<size_t>(filled), '#') << std::string(static_cast<size_t>(width - filled), '.')
          << "] " << done << "/" << total << " " << what << std::string(20, ' ') << (done == total ? "\n" : "")
          << std::flush;
    };
    Expected<std::vector<executor::SizeMeasurement>> sizes = executor::MeasureModel(*model, settings);
    if (!sizes.ok()) return Fail(err, "profile", sizes.status());
    Profile profile = executor::ProfileFromMeasurements(*model, settings, *sizes);
    const int ranks_per_node =
        ranks_per_node_ > 0 ? ranks_per_node_ : std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 4, 8);
    err << "measuring the optimizer, the step's fixed cost and 1.." << ranks_per_node << " ranks per node\n";
    Expected<StepCosts> step_costs =
        executor::MeasureStepCosts(*model, settings, ranks_per_node, [&](int n) { return Colocated(n, err); });
    if (!step_costs.ok()) return Fail(err, "profile", step_costs.status());
    profile.step_costs = *step_costs;
    const Status written = WriteFileAtomically(output_path_, ProfileToJson(profile).dump(1) + "\n");
    if (!written.ok()) return Fail(err, "profile", written);
    for (const executor::SizeMeasurement& size : *sizes) Summary(size, out);
    StepSummary(*profile.step_costs, out);
    out << "profile written to " << output_path_ << "\n";
    return kExitOk;
#endif
  }

 private:
#ifdef GPIPE_WITH_TORCH
  // This process is rank RANK of Colocated's job: its whole-model rounds, [start_ms, ms] each, go
  // to PREFIX.RANK. With others, it measures long enough to overlap them by seconds.
  int ColocatedWorker(const ModelSpec& model, const executor::ProfileSettings& settings, std::ostream& err) {
    const char* world = std::getenv("WORLD_SIZE");
    const double min_seconds = world != nullptr && std::atoi(world) > 1 ? kColocatedSeconds : 0.0;
    Expected<std::vector<executor::TimedRound>> rounds = executor::WholeModelTimes(model, settings, min_seconds);
    if (!rounds.ok()) return Fail(err, "profile", rounds.status());
    nlohmann::json json = nlohmann::json::array();
    for (const executor::TimedRound& r : *rounds) json.push_back({r.start_ms, r.ms});
    const char* rank = std::getenv("RANK");
    const Status written = WriteFileAtomically(colocated_worker_ + "." + (rank != nullptr ? rank : "0"), json.dump());
    return written.ok() ? kExitOk : Fail(err, "profile", written);
  }

  // Starts n processes of this program that each measure the whole model at once (as n ranks
  // on this node would compute), and reads back their times.
  Expected<std::vector<std::vector<executor::TimedRound>>> Colocated(int n, std::ostream& err) const {
    const std::string prefix = output_path_ + ".colocated";
    executor::LaunchOptions launch;
    launch.world_size = n;
    launch.master_port = executor::FreeLoopbackPort();
    launch.argv = {executor::SelfExecutable(), "profile", "--model", model_path_, "-o", output_path_,
                   "--microbatch-size", std::to_string(sizes_.front()), "--threads", std::to_string(threads_),
                   "--warmup", std::to_string(warmup_), "--repeats", std::to_string(repeats_), "--colocated-worker", prefix};
    if (executor::LaunchRanks(launch, err) != 0) return Status::Invalid("a co-located profiling process failed");
    std::vector<std::vector<executor::TimedRound>> runs;
    for (int r = 0; r < n; ++r) {
      const std::string path = prefix + "." + std::to_string(r);
      Expected<nlohmann::json> rounds = LoadJsonFile(path);
      std::filesystem::remove(path);
      if (!rounds.ok()) return rounds.status();
      runs.emplace_back();
      for (const nlohmann::json& round : *rounds) runs.back().push_back({round.at(0).get<double>(), round.at(1).get<double>()});
    }
    return runs;
  }

  static void StepSummary(const StepCosts& costs, std::ostream& out) {
    out << "\nper step:";
    for (const auto& [name, m] : costs.optimizer_ms_per_gib) out << Sprintf(" %s %.1f ±%.1f ms/GiB;", name.c_str(), m.median, m.spread);
    out << Sprintf(" fixed %.3f ±%.3f ms\ncompute with n ranks on the node, relative to one:", costs.step_overhead_ms.median,
                   costs.step_overhead_ms.spread);
    for (size_t n = 0; n < costs.compute_scale.size(); ++n) {
      out << Sprintf(" %zu: %.3f ±%.3f", n + 1, costs.compute_scale[n].median, costs.compute_scale[n].spread);
    }
    out << "\n";
  }

  static void Summary(const executor::SizeMeasurement& size, std::ostream& out) {
    std::vector<const executor::LayerMeasurement*> layers;
    double sum = 0;
    for (const auto& m : size.layers) {
      layers.push_back(&m);
      sum += m.forward.median_ms + m.backward.median_ms;
    }
    out << "\nmicro-batch " << size.microbatch_size << ": " << size.layers.size() << " layers\n";
    out << Pad("layer", 14) << Pad("forward", 18) << Pad("backward", 18) << Pad("weight grad", 12)
        << Pad("params", 11) << Pad("activations", 12) << "output\n";
    for (const auto& m : size.layers) {
      out << Pad(m.name, 14) << Pad(Sprintf("%.3f ±%.3f ms", m.forward.median_ms, m.forward.spread_ms), 18)
          << Pad(Sprintf("%.3f ±%.3f ms", m.backward.median_ms, m.backward.spread_ms), 18)
          << Pad(Sprintf("%.3f ms", m.backward_weight.median_ms), 12) << Pad(FormatBytes(static_cast<double>(m.param_bytes)), 11)
          << Pad(FormatBytes(static_cast<double>(m.activation_bytes)), 12) << FormatBytes(static_cast<double>(m.output_bytes))
          << "\n";
    }
    std::sort(layers.begin(), layers.end(), [](const auto* a, const auto* b) {
      return a->forward.median_ms + a->backward.median_ms > b->forward.median_ms + b->backward.median_ms;
    });
    out << "slowest:";
    for (size_t i = 0; i < std::min<size_t>(3, layers.size()); ++i) {
      out << Sprintf(" %s %.1f%%", layers[i]->name.c_str(),
                     100 * (layers[i]->forward.median_ms + layers[i]->backward.median_ms) / sum);
    }
    std::sort(layers.begin(), layers.end(),
              [](const auto* a, const auto* b) { return a->activation_bytes > b->activation_bytes; });
    out << "\nbiggest activations:";
    for (size_t i = 0; i < std::min<size_t>(3, layers.size()); ++i) {
      out << " " << layers[i]->name << " " << FormatBytes(static_cast<double>(layers[i]->activation_bytes));
    }
    out << Sprintf("\nsum of layers (forward + backward) %.3f ms; whole model measured %.3f ±%.3f ms (%+.1f%%)\n", sum,
                   size.whole_model.median_ms, size.whole_model.spread_ms,
                   100 * (sum - size.whole_model.median_ms) / size.whole_model.median_ms);
  }
#endif

  // How long each co-located process measures (after its warm-up), so that n processes started
  // up to a second apart still compute together for over a second.
  static constexpr double kColocatedSeconds = 2.0;

  std::string model_path_, output_path_, device_ = "cpu";
  std::vector<int64_t> sizes_ = {8};
  int threads_ = 1, warmup_ = 3, repeats_ = 10, ranks_per_node_ = 0;
  std::string colocated_worker_;
};

}  // namespace

std::unique_ptr<Command> MakeProfileCommand(CLI::App& app) { return std::make_unique<ProfileCommand>(app); }

}  // namespace gpipe::cli
