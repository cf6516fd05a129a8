#include "compare/calibrate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>

#include "compare/compare.h"
#include "core/text.h"
#include "simulator/cost_model.h"

namespace gpipe {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Least squares: the x minimizing |A x - b|^2 + ridge * sum over `ridged` of x_j^2, by the
// normal equations (a handful of unknowns).
std::vector<double> LeastSquares(const std::vector<std::vector<double>>& a, const std::vector<double>& b,
                                 const std::vector<bool>& ridged, double ridge) {
  const size_t n = ridged.size();
  std::vector<std::vector<double>> m(n, std::vector<double>(n + 1, 0.0));
  for (size_t row = 0; row < a.size(); ++row) {
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) m[i][j] += a[row][i] * a[row][j];
      m[i][n] += a[row][i] * b[row];
    }
  }
  for (size_t i = 0; i < n; ++i) m[i][i] += ridged[i] ? ridge : 1e-12 * (1.0 + m[i][i]);
  for (size_t col = 0; col < n; ++col) {
    size_t pivot = col;
    for (size_t r = col + 1; r < n; ++r) {
      if (std::abs(m[r][col]) > std::abs(m[pivot][col])) pivot = r;
    }
    std::swap(m[col], m[pivot]);
    if (std::abs(m[col][col]) < 1e-300) continue;
    for (size_t r = 0; r < n; ++r) {
      if (r == col) continue;
      const double f = m[r][col] / m[col][col];
      for (size_t k = col; k <= n; ++k) m[r][k] -= f * m[col][k];
    }
  }
  std::vector<double> x(n, 0.0);
  for (size_t i = 0; i < n; ++i) x[i] = std::abs(m[i][i]) < 1e-300 ? 0.0 : m[i][n] / m[i][i];
  return x;
}

bool IsBackward(Op op) { return IsCompute(op) && op != Op::kForward; }

// The profile's (uncalibrated) time of a compute action.
double BaseMs(const StageCost& c, Op op) {
  switch (op) {
    case Op::kForward: return c.forward_ms;
    case Op::kBackward: return c.recompute_ms() + c.backward_ms;
    case Op::kBackwardInput: return c.recompute_ms() + c.backward_input_ms;
    case Op::kBackwardWeight: return c.backward_weight_ms;
    default: return 0.0;
  }
}

struct ComputeSample {
  int ranks_per_node;
  // How many forward and backward overheads the action pays (a remat backward recomputes a
  // forward first: one of each).
  int forwards;
  int backwards;
  double base_ms;
  double measured_ms;
};

// One ranks-per-node count's compute fit: measured = scale x profiled + overheads per action.
struct ComputeFit {
  double scale = 1, forward_ms = 0, backward_ms = 0;
  double squares = 0;  // sum of squared residuals
  bool scales_only = false;
};

ComputeFit FitCompute(const std::vector<ComputeSample>& samples) {
  std::vector<bool> use_overhead = {true, true};
  std::vector<double> x;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<std::vector<double>> a;
    std::vector<double> b;
    for (const ComputeSample& s : samples) {
      a.push_back({s.base_ms, use_overhead[0] ? static_cast<double>(s.forwards) : 0.0,
                   use_overhead[1] ? static_cast<double>(s.backwards) : 0.0});
      b.push_back(s.measured_ms);
    }
    x = LeastSquares(a, b, {false, !use_overhead[0], !use_overhead[1]}, 1.0);
    bool changed = false;
    for (int k = 0; k < 2; ++k) {
      if (use_overhead[k] && x[1 + k] < 0) use_overhead[k] = false, changed = true;
    }
    if (!changed) break;
  }
  ComputeFit fit;
  // Noisy records of too few sizes can make the scale come out nonsensical: then fit the scale
  // alone, as a ratio (overheads 0).
  if (!(x[0] > 0.05) || !std::isfinite(x[0])) {
    double pd = 0, pp = 0;
    for (const ComputeSample& s : samples) {
      pd += s.base_ms * s.measured_ms;
      pp += s.base_ms * s.base_ms;
    }
    x = {pd / pp, 0.0, 0.0};
    use_overhead = {false, false};
    fit.scales_only = true;
  }
  fit.scale = x[0];
  fit.forward_ms = use_overhead[0] ? x[1] : 0.0;
  fit.backward_ms = use_overhead[1] ? x[2] : 0.0;
  for (const ComputeSample& s : samples) {
    const double predicted = fit.scale * s.base_ms + s.forwards * fit.forward_ms + s.backwards * fit.backward_ms;
    fit.squares += (predicted - s.measured_ms) * (predicted - s.measured_ms);
  }
  return fit;
}

}  // namespace

Expected<CalibrationFit> FitCalibration(const std::vector<CalibrationRun>& runs) {
  if (runs.empty()) return Status::Invalid("calibration needs at least one run record");
  CalibrationFit fit;
  std::vector<ComputeSample> compute;
  std::vector<double> sends, message_bytes, message_ms, tail_ms, tail_params, first_starts;
  for (const CalibrationRun& run : runs) {
    Plan plan = run.plan;
    plan.cluster.calibration.reset();
    const RunRecord& record = run.record;
    if (record.num_ranks != plan.num_ranks() || record.microbatches != plan.microbatches ||
        record.replicas != plan.replicas) {
      return Status::Invalid(run.name + ": the record (K=" + std::to_string(record.num_ranks) + ", D=" +
                             std::to_string(record.replicas) + ", M=" + std::to_string(record.microbatches) +
                             ") is not a run of its plan (K=" + std::to_string(plan.num_ranks()) + ", D=" +
                             std::to_string(plan.replicas) + ", M=" + std::to_string(plan.microbatches) + ")");
    }
    Expected<CostModel> costs = BuildCostModel(plan);
    if (!costs.ok()) return Status::Invalid(run.name + ": " + costs.status().message());
    const int per_node = RanksPerNode(plan.cluster, plan.num_ranks() * plan.replicas);
    const std::vector<int> stage_rank = plan.StageRanks();
    const std::vector<double> rank_params = ParamBytesPerRank(plan);
    const int first_step = record.steps.size() > 1 ? record.steps.front().step : -1;
    // Compute: per (rank, op, stage), the median over steps and micro-batches.
    std::map<std::tuple<int, Op, int>, std::vector<double>> durations;
    // Each receive by (replica, pipeline rank, step, op, stage, micro-batch), for pairing messages.
    using ReceiveKey = std::tuple<int, int, int, Op, int, int>;
    std::map<ReceiveKey, const ActionRecord*> receives;
    for (const RankRecord& r : record.ranks) {
      for (const ActionRecord& b : r.actions) {
        if (IsRecv(b.action.op)) {
          receives.emplace(ReceiveKey{r.replica, r.pipeline_rank, b.step, b.action.op, b.action.stage, b.action.microbatch}, &b);
        }
      }
    }
    std::map<int, double> last_end, first_start;  // per step
    std::map<int, int> last_rank;                 // per step: the pipeline rank that ended last
    for (const RankRecord& r : record.ranks) {
      std::map<int, double> rank_first;
      for (const ActionRecord& a : r.actions) {
        if (a.step == first_step) continue;
        const Op op = a.action.op;
        const double d = a.end_ms - a.start_ms;
        if (IsCompute(op)) durations[{r.rank, op, a.action.stage}].push_back(d);
        if (IsSend(op)) {
          sends.push_back(d);
          const bool gradient = op == Op::kSendGradient;
          const int to_stage = gradient ? a.action.stage - 1 : a.action.stage + 1;
          const Op recv_op = gradient ? Op::kRecvGradient : Op::kRecvActivation;
          const auto b = receives.find({r.replica, stage_rank[to_stage], a.step, recv_op, to_stage, a.action.microbatch});
          if (b != receives.end() && b->second->start_ms <= a.end_ms) {  // the receiver waited: its end is the arrival
            const StageCost& c = costs->stages[a.action.stage];
            message_bytes.push_back(gradient ? c.input_bytes : c.output_bytes);
            message_ms.push_back(b->second->end_ms - a.end_ms);
          }
        }
        if (!rank_first.count(a.step) || a.start_ms < rank_first[a.step]) rank_first[a.step] = a.start_ms;
        if (!last_end.count(a.step) || a.end_ms > last_end[a.step]) {
          last_end[a.step] = a.end_ms;
          last_rank[a.step] = r.pipeline_rank;
        }
      }
      for (const auto& [step, start] : rank_first) {
        first_start[step] = first_start.count(step) ? std::min(first_start[step], start) : start;
      }
    }
    for (const auto& [key, values] : durations) {
      const auto& [rank, op, stage] = key;
      const double base = BaseMs(costs->stages[stage], op);
      const StageCost& c = costs->stages[stage];
      const bool recomputes = c.remat && (op == Op::kBackward || op == Op::kBackwardInput);
      const int forwards = op == Op::kForward || recomputes ? 1 : 0;
      // Means: a step is a sum of actions, so the occasional stalled action (a rank preempted
      // by its peer on a shared node) costs its share; the caller picks records free of slow spells.
      if (base > 0) compute.push_back({per_node, forwards, IsBackward(op) ? 1 : 0, base, Mean(values)});
    }
    for (const StepRecord& s : record.steps) {
      if (s.step == first_step || !last_end.count(s.step)) continue;
      const int r = last_rank[s.step];
      const double params = rank_params[r];
      const double allreduce = costs->allreduce_ms.empty() ? 0.0 : costs->allreduce_ms[r];
      tail_ms.push_back(s.time_ms - last_end[s.step] - allreduce);
      tail_params.push_back(params);
      first_starts.push_back(first_start[s.step]);
      ++fit.steps;
    }
  }
  if (compute.empty()) return Status::Invalid("the run records hold no compute actions after their first steps");

  // Compute: for each ranks-per-node count present, its scale and its two overheads (ranks that
  // share a node slow each other's small actions more than their large ones).
  std::vector<int> groups;
  for (const ComputeSample& s : compute) {
    if (std::find(groups.begin(), groups.end(), s.ranks_per_node) == groups.end()) groups.push_back(s.ranks_per_node);
  }
  std::sort(groups.begin(), groups.end());
  std::vector<ComputeFit> fits;
  double squares = 0;
  for (const int group : groups) {
    std::vector<ComputeSample> mine;
    for (const ComputeSample& s : compute) {
      if (s.ranks_per_node == group) mine.push_back(s);
    }
    fits.push_back(FitCompute(mine));
    squares += fits.back().squares;
    if (fits.back().scales_only) {
      fit.notes.push_back(Sprintf("compute, %d rank%s per node: the overheads could not be told apart from the scale "
                                  "(too few micro-batch sizes?); scale fitted alone", group, group == 1 ? "" : "s"));
    }
  }
  fit.compute_samples = static_cast<int>(compute.size());
  fit.compute_rms_ms = std::sqrt(squares / static_cast<double>(compute.size()));
  Calibration& c = fit.calibration;
  c.compute_scale.assign(groups.back(), 1.0);
  c.forward_overhead_ms.assign(groups.back(), 0.0);
  c.backward_overhead_ms.assign(groups.back(), 0.0);
  for (int n = 1; n <= groups.back(); ++n) {
    // Ranks per node not measured take the nearest measured count below (or above).
    size_t nearest = 0;
    for (size_t i = 0; i < groups.size(); ++i) {
      if (groups[i] <= n) nearest = i;
    }
    c.compute_scale[n - 1] = fits[nearest].scale;
    c.forward_overhead_ms[n - 1] = fits[nearest].forward_ms;
    c.backward_overhead_ms[n - 1] = fits[nearest].backward_ms;
  }
  std::string parts;
  for (size_t i = 0; i < groups.size(); ++i) {
    parts += Sprintf("%s%d rank%s per node: scale %.3f, %.3f ms per forward, %.3f ms per backward", i ? "; " : "",
                     groups[i], groups[i] == 1 ? "" : "s", fits[i].scale, fits[i].forward_ms, fits[i].backward_ms);
  }
  fit.notes.push_back(Sprintf("compute: %s (%d samples, rms residual %.3f ms)", parts.c_str(), fit.compute_samples,
                              fit.compute_rms_ms));

  c.send_overhead_ms = Mean(sends);
  fit.notes.push_back(Sprintf("sends: %.3f ms each (mean of %zu; median %.3f ms)", c.send_overhead_ms, sends.size(),
                              Median(sends)));

  fit.messages = static_cast<int>(message_ms.size());
  if (!message_ms.empty()) {
    const double low = *std::min_element(message_bytes.begin(), message_bytes.end());
    const double high = *std::max_element(message_bytes.begin(), message_bytes.end());
    Link link;
    std::vector<double> x_link;
    if (high > 1.5 * low) {
      std::vector<std::vector<double>> a;
      for (double bytes : message_bytes) a.push_back({1.0, bytes});
      x_link = LeastSquares(a, message_ms, {false, false}, 0.0);
    }
    if (!x_link.empty() && x_link[1] > 0) {
      link.latency_ms = std::max(0.0, x_link[0]);
      link.bandwidth_bytes_per_s = 1e3 / x_link[1];
    } else {
      // One message size (or no slope): keep the cluster's bandwidth, fit the latency.
      link.bandwidth_bytes_per_s = runs.front().plan.cluster.link.bandwidth_bytes_per_s;
      std::vector<double> latency;
      for (size_t i = 0; i < message_ms.size(); ++i) latency.push_back(message_ms[i] - message_bytes[i] / link.bandwidth_bytes_per_s * 1e3);
      link.latency_ms = std::max(0.0, Median(latency));
    }
    fit.link = link;
    fit.notes.push_back(Sprintf("links: latency %.3f ms, bandwidth %.2f GiB/s (%d messages whose receiver was waiting, "
                                "%.0f to %.0f bytes)", link.latency_ms, link.bandwidth_bytes_per_s / kGiB, fit.messages,
                                low, high));
  } else {
    fit.notes.push_back("links: no message found its receiver waiting; the cluster's links are kept");
  }

  if (!tail_ms.empty()) {
    const double low = *std::min_element(tail_params.begin(), tail_params.end());
    const double high = *std::max_element(tail_params.begin(), tail_params.end());
    double overhead = Median(tail_ms), per_gib = 0;
    if (high > 1.2 * low) {
      std::vector<std::vector<double>> a;
      for (double p : tail_params) a.push_back({1.0, p / kGiB});
      const std::vector<double> t = LeastSquares(a, tail_ms, {false, false}, 0.0);
      if (t[1] > 0) overhead = t[0], per_gib = t[1];
    }
    c.step_overhead_ms = std::max(0.0, overhead) + Median(first_starts);
    c.optimizer_ms_per_gib = per_gib;
    fit.notes.push_back(Sprintf("after the last action: %.3f ms + %.1f ms per GiB of the rank's parameters; a step's first "
                                "action starts %.3f ms in (%d steps)", std::max(0.0, overhead), per_gib,
                                Median(first_starts), fit.steps));
  }
  // The executor on Gloo keeps what it sends until the step ends (see memory_model.h).
  c.sends_held = std::all_of(runs.begin(), runs.end(), [](const CalibrationRun& run) { return run.record.backend == "gloo"; });
  fit.notes.push_back(c.sends_held ? "memory: sent tensors held until the step ends (Gloo)"
                                   : "memory: sent tensors released as they complete");
  std::string names;
  for (const CalibrationRun& run : runs) names += (names.empty() ? "" : ", ") + run.name;
  c.source = "gpipe-plan calibrate from " + std::to_string(runs.size()) + " run record" + (runs.size() == 1 ? "" : "s") +
             ": " + names;
  return fit;
}

Expected<CalibrationRun> LoadCalibrationRun(const std::string& record_path, const std::string& plan_path,
                                            const Cluster* cluster) {
  CalibrationRun run;
  run.name = record_path;
  Expected<RunRecord> record = LoadRunRecord(record_path);
  if (!record.ok()) return record.status();
  run.record = std::move(*record);
  std::string path = plan_path.empty() ? run.record.plan : plan_path;
  if (path.empty()) {
    return Status::Invalid(record_path + ": the record names no plan; give the plan it ran (--plan)");
  }
  namespace fs = std::filesystem;
  if (plan_path.empty() && !fs::exists(path) && fs::path(path).is_relative()) {
    const fs::path beside = fs::path(record_path).parent_path() / fs::path(path).filename();
    if (fs::exists(beside)) path = beside.string();
  }
  Expected<Plan> plan = LoadPlan(path);
  if (!plan.ok()) return Status::Invalid(record_path + ": its plan: " + plan.status().message());
  run.plan = std::move(*plan);
  if (cluster != nullptr) run.plan.cluster = *cluster;
  return run;
}

Cluster ApplyCalibration(const Cluster& cluster, const CalibrationFit& fit) {
  Cluster out = cluster;
  out.calibration = fit.calibration;
  if (fit.link) out.link = *fit.link;
  return out;
}

}  // namespace gpipe
