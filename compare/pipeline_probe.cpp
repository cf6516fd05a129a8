#include "compare/pipeline_probe.h"

#include <algorithm>
#include <filesystem>
#include <ostream>

#include "compare/calibration_samples.h"
#include "compare/compare.h"
#include "compare/core_sharing_fit.h"
#include "compare/plan_runs.h"
#include "compare/probe_rounds.h"
#include "core/plan.h"
#include "core/profile_sizes.h"
#include "core/text.h"

namespace gpipe {
namespace {

// The most stages, at most the model's layers, that split n ranks into K x D.
int StagesFor(int n, int layers) {
  for (int k = std::min(n, layers); k > 1; --k) {
    if (n % k == 0) return k;
  }
  return 1;
}

// One count's run: its factor (measured less overheads, over the profile's times), and the time
// its ranks lost between actions per forward and backward action.
Expected<ProbeFigures> FiguresOfRun(const CalibrationRun& run, const PipelineProbeRequest& request) {
  CalibrationSamples samples;
  GPIPE_RETURN_IF_ERROR(GatherCalibrationSamples(run, samples));
  double measured = 0, base = 0;
  for (const ComputeSample& s : samples.compute) {
    measured += s.measured_ms - s.forwards * request.forward_overhead_ms - s.backwards * request.backward_overhead_ms;
    base += s.base_ms;
  }
  if (base <= 0) return Status::Invalid("the run recorded no forward or backward with a profiled time");
  Expected<Comparison> compared = Compare(run.plan, run.record);
  if (!compared.ok()) return compared.status();
  double gaps = 0, sending = 0;
  for (const RankComparison& rank : compared->ranks) {
    gaps += rank.measured_gap_ms;
    sending += rank.measured_send_ms;
  }
  int sends = 0;
  for (const OpComparison& op : compared->ops) {
    if (op.op == Op::kSendActivation || op.op == Op::kSendGradient) sends += op.count;
  }
  // Each pipeline rank holds one stage: a forward and a backward per micro-batch.
  const double actions = 2.0 * run.plan.microbatches * static_cast<double>(compared->ranks.size());
  // Layers of a few microseconds are lost in the overheads' noise, and the difference can come out
  // at or below zero: a hundredth of the profile is the floor (a profile needs a positive factor).
  constexpr double kFloor = 0.01;
  return ProbeFigures{std::max(measured / base, kFloor), gaps / actions, sends > 0 ? sending / sends : 0.0};
}

}  // namespace

Expected<PipelineProbeResult> MeasurePipelineComputeScale(const PipelineProbeRequest& request, std::ostream& progress) {
  std::vector<int64_t> sizes = request.microbatch_sizes;
  if (sizes.empty()) sizes.push_back(request.profile.microbatch_size);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  std::error_code ec;
  std::filesystem::create_directories(request.dir, ec);
  std::vector<std::string> made;  // removed once every count is measured; kept to read on failure
  struct Count {
    std::string what;
    std::string plan_path;
    std::string stem;
  };
  // counts[s][n - 1]: size s, n ranks.
  std::vector<std::vector<Count>> counts(sizes.size());
  for (size_t s = 0; s < sizes.size(); ++s) {
    Profile profile = ProfileAtMicrobatch(request.profile, sizes[s]);
    profile.step_costs.reset();
    for (int n = 1; n <= request.max_ranks_per_node; ++n) {
      const int stages = StagesFor(n, profile.num_layers());
      const int replicas = n / stages;
      const int microbatches = 2 * stages;
      SearchRequest plan;
      plan.profile = profile;
      plan.cluster.name = "pipeline-probe";
      plan.cluster.devices = n;
      plan.cluster.device_memory_bytes = int64_t{1} << 50;  // compute is measured, not memory
      plan.cluster.link = {1e12, 0.0};
      plan.global_batch = sizes[s] * microbatches * replicas;
      plan.ranks = stages;
      plan.replicas = replicas;
      plan.microbatches = microbatches;
      plan.schedule = stages == 1 ? ScheduleKind::kGpipe : ScheduleKind::k1F1B;
      plan.remat = RematPolicy::kOff;
      plan.optimizer = Optimizer::kSgd;
      Count count;
      count.what = std::to_string(n) + " rank" + (n == 1 ? "" : "s") + " (K=" + std::to_string(stages) +
                   ", D=" + std::to_string(replicas) + ") at micro-batches of " + std::to_string(sizes[s]);
      count.stem = request.dir + "/mb" + std::to_string(sizes[s]) + "-ranks-" + std::to_string(n);
      Expected<std::string> plan_path = WritePlan(plan, count.stem);
      if (!plan_path.ok()) return plan_path.status().WithContext("planning the pipeline probe of " + count.what);
      made.push_back(*plan_path);
      count.plan_path = *plan_path;
      counts[s].push_back(std::move(count));
    }
  }
  // Round after round over every size and count, so that the counts of a round run seconds apart.
  // rounds[s][r][n - 1].
  std::vector<std::vector<std::vector<ProbeFigures>>> rounds(
      sizes.size(), std::vector<std::vector<ProbeFigures>>(static_cast<size_t>(request.rounds)));
  for (int round = 0; round < request.rounds; ++round) {
    for (size_t s = 0; s < sizes.size(); ++s) {
      for (const Count& count : counts[s]) {
        const std::string run_stem = count.stem + ".round" + std::to_string(round + 1);
        made.push_back(run_stem + ".run.json");
        made.push_back(run_stem + ".log");
        Expected<CalibrationRun> run = RunPlanHere(count.plan_path, request.model_path, request.steps, run_stem, progress);
        if (!run.ok()) return run.status().WithContext("running the pipeline probe of " + count.what);
        Expected<ProbeFigures> figures = FiguresOfRun(*run, request);
        if (!figures.ok()) return figures.status().WithContext("the pipeline probe of " + count.what);
        rounds[s][static_cast<size_t>(round)].push_back(*figures);
      }
    }
  }
  PipelineProbeResult result;
  for (size_t s = 0; s < sizes.size(); ++s) {
    Expected<ProbeFactors> factors = CombineProbeRounds(rounds[s], request.one_rank_scale);
    if (!factors.ok()) return factors.status().WithContext("micro-batches of " + std::to_string(sizes[s]));
    const double one = request.one_rank_scale.median;
    std::vector<double> fitted = {1.0};
    for (size_t i = 0; i < counts[s].size(); ++i) {
      Measured& scale = factors->compute_scale[i];
      progress << "  " << counts[s][i].what << ": compute " << Format("%.3f", scale.median) << "x the profile";
      if (i > 0 && static_cast<int>(i) < request.concurrent_ranks) {
        Expected<Plan> plan = LoadPlan(counts[s][i].plan_path);
        if (!plan.ok()) return plan.status();
        Expected<double> q = FitToCoreSharing(*plan, fitted, scale.median / one, request.concurrent_ranks);
        if (!q.ok()) return q.status().WithContext("fitting the pipeline probe of " + counts[s][i].what);
        scale.spread *= *q * one / scale.median;
        scale.median = *q * one;
        fitted.push_back(*q);
        progress << " on average, " << Format("%.3f", scale.median) << "x while all " << i + 1 << " compute";
      }
      progress << ", " << Format("%.3f", factors->action_gap_ms[i].median) << " ms between actions per forward or backward, "
               << Format("%.3f", factors->send_ms[i].median) << " ms per send\n";
    }
    result.push_back({sizes[s], std::move(factors->compute_scale), std::move(factors->action_gap_ms),
                      std::move(factors->send_ms)});
  }
  // File by file: std::filesystem::remove_all resolves to libtorch's copy, which crashes here.
  for (const std::string& path : made) std::filesystem::remove(path, ec);
  std::filesystem::remove(request.dir, ec);
  return result;
}

}  // namespace gpipe
