// gpipe-plan profile --model MODEL -o PROFILE.json: measure every layer of a model on this device.
#include <algorithm>
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
#include "executor/profiler.h"
#include "executor/python_export.h"
#include "executor/step_cost_prober.h"
#include "compare/pipeline_probe.h"
#endif

namespace gpipe::cli {
namespace {

class ProfileCommand : public Command {
 public:
  explicit ProfileCommand(CLI::App& app) {
    app.add_option("--model", model_path_,
                   "A gpipe-model/1 file: built-in layers, a TorchScript file, or \"python\": \"file.py:build\" "
                   "(see models/ and models/examples/)")
        ->required();
    app.add_option("-o,--output", output_path_, "Write the gpipe-profile/1 file here")->required();
    app.add_option("--microbatch-size", sizes_, "Samples per micro-batch; several: 4,8,16 (the first is the profile's)")
        ->delimiter(',')
        ->check(CLI::Range(1, 1 << 24));
    app.add_option("--device", device_, "cpu, or cuda (GPU 0)")->check(CLI::IsMember({"cpu", "cuda"}));
    app.add_option("--precision", precision_,
                   "fp32, or bf16 / fp16: the layers measured under autocast, as `run` executes a plan of that "
                   "precision (weights, gradients and optimizer state fp32); recorded as the profile's dtype")
        ->check(CLI::IsMember(Precisions()));
    app.add_option("--threads", threads_, "Intra-op threads, as each rank will have (run --threads-per-rank)")
        ->check(CLI::Range(1, 1024));
    app.add_option("--warmup", warmup_, "Unmeasured runs before measuring")->check(CLI::Range(0, 1000));
    app.add_option("--repeats", repeats_, "Measured runs per layer; the median is kept")->check(CLI::Range(1, 100000));
    app.add_option("--ranks-per-node", ranks_per_node_,
                   "Measure compute with 1..N ranks on this node, each count run as a pipeline (the plan's ranks "
                   "per node picks one); default: this machine's cores, at least 4 and at most 8")
        ->check(CLI::Range(1, 64));
    app.add_option("--probe-sizes", probe_sizes_,
                   "Micro-batch sizes (of --microbatch-size) to run those pipelines at; between them the "
                   "figures are interpolated. Default: the smallest, the first and the largest")
        ->delimiter(',')
        ->check(CLI::Range(1, 1 << 24));
    app.footer(
        "Examples:\n"
        "  gpipe-plan profile --model models/tiny-gpt.json --microbatch-size 8 -o tiny-gpt-profile.json\n"
        "  gpipe-plan profile --model models/tiny-gpt.json --microbatch-size 4,8,16 --repeats 20 -o p.json\n"
        "  in bf16 mixed precision (plans made from it run under bf16 autocast):\n"
        "    gpipe-plan profile --model models/tiny-gpt.json --precision bf16 -o tiny-gpt-bf16.json\n"
        "  co-located ranks probed at every size, with up to 2 ranks per node:\n"
        "    gpipe-plan profile --model models/tiny-gpt.json --microbatch-size 8,1,2,4 --probe-sizes 1,2,4,8 --ranks-per-node 2 -o p.json\n"
        "  a Hugging Face GPT-2 from a Python build() (traced once, cached in $GPIPE_CACHE_DIR):\n"
        "    gpipe-plan profile --model models/examples/gpt2.json --microbatch-size 4 -o gpt2-profile.json\n"
        "  gpipe-plan plan --profile tiny-gpt-profile.json --cluster profiles/clusters/cpu-2.json --global-batch 64 -o plan.json\n"
        "Per layer: forward, backward and its weight-gradient part (median of --repeats, spread = half the\n"
        "interquartile range), parameter, activation (what autograd keeps, measured) and output bytes.\n"
        "Per step (step_costs): the optimizer step per GiB of parameters for sgd, momentum and adam, the\n"
        "fixed cost of a step, and the slowdown of compute while 1..N ranks share the node, at each of\n"
        "--probe-sizes (short actions slow down more: docs/profiler.md).");
  }

  int Run(std::ostream& out, std::ostream& err) override {
    Expected<ModelSpec> model = LoadModel(model_path_);
    if (!model.ok()) return Fail(err, "profile", model.status());
#ifndef GPIPE_WITH_TORCH
    (void)out;
    return Fail(err, "profile", Status::Invalid(kNoExecutor));
#else
    if (Status exported = executor::ExportPythonModel(&*model); !exported.ok()) return Fail(err, "profile", exported);
    executor::ProfileSettings settings;
    settings.microbatch_sizes = sizes_;
    settings.warmup = warmup_;
    settings.repeats = repeats_;
    settings.threads = threads_;
    settings.device_name = device_;
    settings.precision = precision_;
    if (device_ == "cuda") {
      if (!torch::cuda::is_available()) return Fail(err, "profile", Status::Invalid("--device cuda: no usable GPU here; use --device cpu"));
      settings.device = torch::Device(torch::kCUDA, 0);
    }
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
    err << "measuring the optimizer and the step's fixed cost\n";
    Expected<StepCosts> step_costs = executor::MeasureStepCosts(*model, settings);
    if (!step_costs.ok()) return Fail(err, "profile", step_costs.status());
    if (!settings.device.is_cuda()) {
      Expected<std::vector<int64_t>> probe_sizes = ProbeSizes();
      if (!probe_sizes.ok()) return Fail(err, "profile", probe_sizes.status());
      err << "measuring compute with 1.." << ranks_per_node << " ranks per node, run as pipelines, at micro-batches of "
          << JoinSizes(*probe_sizes) << "\n";
      PipelineProbeRequest probe;
      probe.profile = profile;
      probe.model_path = model_path_;
      probe.max_ranks_per_node = ranks_per_node;
      probe.microbatch_sizes = *probe_sizes;
      probe.concurrent_ranks = ConcurrentRanks(settings.threads);
      probe.forward_overhead_ms = step_costs->forward_overhead_ms.median;
      probe.backward_overhead_ms = step_costs->backward_overhead_ms.median;
      probe.one_rank_scale = executor::OneGraphScale(*sizes);
      probe.dir = output_path_ + ".pipeline-probe";
      Expected<PipelineProbeResult> probed = MeasurePipelineComputeScale(probe, err);
      if (!probed.ok()) return Fail(err, "profile", probed.status());
      step_costs->by_microbatch_size = *probed;
      // The top-level figures are the profile's own size's (it is always probed: ProbeSizes).
      *step_costs = step_costs->AtMicrobatch(profile.microbatch_size);
      step_costs->concurrent_ranks = probe.concurrent_ranks;
      step_costs->source += "; compute_scale: one rank is the whole model's pass over its layers' sum (median over "
                            "the sizes); n ranks, that times the model run as a pipeline of n ranks (1F1B, K x D = n, 2K "
                            "micro-batches, " + std::to_string(probe.steps) + " steps) over one rank run in the same "
                            "round, its forward and backward actions less their overheads against the profile's times, the "
                            "median of " + std::to_string(probe.rounds) + " rounds (compare/pipeline_probe.h), at micro-batches of " +
                            JoinSizes(*probe_sizes) + " (by_microbatch_size; the top level is " +
                            std::to_string(profile.microbatch_size) + "'s); "
                            "action_gap_ms and send_ms: the same runs' time between actions per forward or backward action, and "
                            "per send";
    }
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
  static void StepSummary(const StepCosts& costs, std::ostream& out) {
    out << "\nper step:";
    for (const auto& [name, m] : costs.optimizer_ms_per_gib) out << Sprintf(" %s %.1f ±%.1f ms/GiB;", name.c_str(), m.median, m.spread);
    out << Sprintf(" fixed %.3f ±%.3f ms", costs.step_overhead_ms.median, costs.step_overhead_ms.spread);
    // With several probed sizes the sends and gaps printed are the first size's (all are in the file).
    const std::string own_size = costs.by_microbatch_size.size() > 1 ? " (the first size; each size's in the file)" : "";
    const auto scales = [&out](const std::vector<Measured>& list) {
      for (size_t n = 0; n < list.size(); ++n) out << Sprintf(" %zu: %.3f ±%.3f", n + 1, list[n].median, list[n].spread);
    };
    if (costs.by_microbatch_size.size() > 1) {
      out << "\ncompute as pipelines of n ranks on the node, against the profile, per micro-batch size:";
      for (const ColocatedAtSize& at : costs.by_microbatch_size) {
        out << "\n  " << at.microbatch_size << " samples:";
        scales(at.compute_scale);
      }
    } else {
      out << "\ncompute as pipelines of n ranks on the node, against the profile:";
      scales(costs.compute_scale);
    }
    if (!costs.send_ms.empty()) {
      out << "\na send occupies its rank, n ranks" << own_size << ":";
      for (size_t n = 0; n < costs.send_ms.size(); ++n) {
        out << Sprintf(" %zu: %.3f ±%.3f ms", n + 1, costs.send_ms[n].median, costs.send_ms[n].spread);
      }
    }
    if (costs.concurrent_ranks > 0) {
      out << "\nthe node computes " << costs.concurrent_ranks << " rank" << (costs.concurrent_ranks == 1 ? "" : "s")
          << " at full speed at once; past that, ranks computing at the same moment share its cores";
    }
    out << "\nbetween actions, per forward or backward, n ranks" << own_size << ":";
    for (size_t n = 0; n < costs.action_gap_ms.size(); ++n) {
      out << Sprintf(" %zu: %.3f ±%.3f ms", n + 1, costs.action_gap_ms[n].median, costs.action_gap_ms[n].spread);
    }
    out << "\n";
  }

  static void Summary(const executor::SizeMeasurement& size, std::ostream& out) {
    std::vector<const executor::LayerMeasurement*> layers;
    double sum = 0, forward = 0, no_grad = 0;
    for (const auto& m : size.layers) {
      layers.push_back(&m);
      sum += m.forward.median_ms + m.backward.median_ms;
      forward += m.forward.median_ms;
      no_grad += m.forward_no_grad.median_ms;
    }
    out << "\nmicro-batch " << size.microbatch_size << ": " << size.layers.size() << " layers\n";
    out << Pad("layer", 14) << Pad("forward", 18) << Pad("no_grad fwd", 12) << Pad("backward", 18)
        << Pad("weight grad", 12) << Pad("params", 11) << Pad("activations", 12) << "output\n";
    for (const auto& m : size.layers) {
      out << Pad(m.name, 14) << Pad(Sprintf("%.3f ±%.3f ms", m.forward.median_ms, m.forward.spread_ms), 18)
          << Pad(Sprintf("%.3f ms", m.forward_no_grad.median_ms), 12)
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
    if (forward > 0) {
      out << Sprintf("forwards under no_grad (a remat stage's forward of the layers it recomputes): %.3f ms, %.0f%% of "
                     "the recorded %.3f ms\n", no_grad, 100 * no_grad / forward, forward);
    }
  }
#endif

  std::string model_path_, output_path_, device_ = "cpu", precision_ = "fp32";
  // The probe's sizes: --probe-sizes, each one of --microbatch-size, with the first always in; by
  // default the smallest, the first and the largest.
  Expected<std::vector<int64_t>> ProbeSizes() const {
    std::vector<int64_t> chosen = probe_sizes_;
    if (chosen.empty()) chosen = {*std::min_element(sizes_.begin(), sizes_.end()), *std::max_element(sizes_.begin(), sizes_.end())};
    for (int64_t size : chosen) {
      if (std::find(sizes_.begin(), sizes_.end(), size) == sizes_.end()) {
        return Status::Usage("--probe-sizes " + std::to_string(size) + ": not one of --microbatch-size " + JoinSizes(sizes_) +
                             "; the probe compares runs with the layers profiled at its size");
      }
    }
    chosen.push_back(sizes_.front());
    std::sort(chosen.begin(), chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
    return chosen;
  }

  // Ranks the node computes at once: its hardware threads over each rank's intra-op threads.
  static int ConcurrentRanks(int threads) {
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, threads));
  }

  static std::string JoinSizes(const std::vector<int64_t>& sizes) {
    std::string text;
    for (int64_t size : sizes) text += (text.empty() ? "" : ",") + std::to_string(size);
    return text;
  }

  std::vector<int64_t> sizes_ = {8};
  std::vector<int64_t> probe_sizes_;
  int threads_ = 1, warmup_ = 3, repeats_ = 10, ranks_per_node_ = 0;
};

}  // namespace

std::unique_ptr<Command> MakeProfileCommand(CLI::App& app) { return std::make_unique<ProfileCommand>(app); }

}  // namespace gpipe::cli
