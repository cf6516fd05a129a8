#include "compare/calibrate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "compare/calibration_samples.h"
#include "core/statistics.h"
#include "core/text.h"

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

// Compute: for each ranks-per-node count present, its scale and its two overheads (ranks that
// share a node slow each other's small actions more than their large ones); a count not
// measured takes the nearest measured count below (or, below them all, the smallest).
void FitComputePerNode(const std::vector<ComputeSample>& compute, CalibrationFit& fit) {
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
}

// Sends: the mean time a send occupies its rank (a step pays every send, stalls included).
void FitSends(const std::vector<double>& sends, CalibrationFit& fit) {
  fit.calibration.send_overhead_ms = Mean(sends);
  fit.notes.push_back(Sprintf("sends: %.3f ms each (mean of %zu; median %.3f ms)", fit.calibration.send_overhead_ms,
                              sends.size(), Median(sends)));
}

// Links: latency + bytes / bandwidth by least squares over messages of different sizes; with one
// size (or no slope), `cluster_bandwidth` kept and the latency the median of what is left.
void FitLinks(const CalibrationSamples& samples, double cluster_bandwidth, CalibrationFit& fit) {
  const std::vector<double>& bytes = samples.message_bytes;
  const std::vector<double>& ms = samples.message_ms;
  fit.messages = static_cast<int>(ms.size());
  if (ms.empty()) {
    fit.notes.push_back("links: no message found its receiver waiting; the cluster's links are kept");
    return;
  }
  const double low = *std::min_element(bytes.begin(), bytes.end());
  const double high = *std::max_element(bytes.begin(), bytes.end());
  Link link;
  std::vector<double> x_link;
  if (high > 1.5 * low) {
    std::vector<std::vector<double>> a;
    for (double b : bytes) a.push_back({1.0, b});
    x_link = LeastSquares(a, ms, {false, false}, 0.0);
  }
  if (!x_link.empty() && x_link[1] > 0) {
    link.latency_ms = std::max(0.0, x_link[0]);
    link.bandwidth_bytes_per_s = 1e3 / x_link[1];
  } else {
    link.bandwidth_bytes_per_s = cluster_bandwidth;
    std::vector<double> latency;
    for (size_t i = 0; i < ms.size(); ++i) latency.push_back(ms[i] - bytes[i] / link.bandwidth_bytes_per_s * 1e3);
    link.latency_ms = std::max(0.0, Median(latency));
  }
  fit.link = link;
  fit.notes.push_back(Sprintf("links: latency %.3f ms, bandwidth %.2f GiB/s (%d messages whose receiver was waiting, "
                              "%.0f to %.0f bytes)", link.latency_ms, link.bandwidth_bytes_per_s / kGiB, fit.messages,
                              low, high));
}

// The tail: step overhead + optimizer time per GiB of the last rank's parameters by least squares
// when those differ enough (else the median tail and no per-GiB term), plus the median start of a
// step's first action.
void FitTail(const CalibrationSamples& samples, CalibrationFit& fit) {
  if (samples.tail_ms.empty()) return;
  const double low = *std::min_element(samples.tail_params.begin(), samples.tail_params.end());
  const double high = *std::max_element(samples.tail_params.begin(), samples.tail_params.end());
  double overhead = Median(samples.tail_ms), per_gib = 0;
  if (high > 1.2 * low) {
    std::vector<std::vector<double>> a;
    for (double p : samples.tail_params) a.push_back({1.0, p / kGiB});
    const std::vector<double> t = LeastSquares(a, samples.tail_ms, {false, false}, 0.0);
    if (t[1] > 0) overhead = t[0], per_gib = t[1];
  }
  const double first_start = Median(samples.first_starts);
  fit.calibration.step_overhead_ms = std::max(0.0, overhead) + first_start;
  fit.calibration.optimizer_ms_per_gib = per_gib;
  fit.notes.push_back(Sprintf("after the last action: %.3f ms + %.1f ms per GiB of the rank's parameters; a step's first "
                              "action starts %.3f ms in (%d steps)", std::max(0.0, overhead), per_gib, first_start,
                              fit.steps));
}

// Memory: the executor on Gloo keeps what it sends until the step ends (see memory_model.h);
// held only when every run was on Gloo.
void FitSendsHeld(const std::vector<CalibrationRun>& runs, CalibrationFit& fit) {
  Calibration& c = fit.calibration;
  c.sends_held = std::all_of(runs.begin(), runs.end(), [](const CalibrationRun& run) { return run.record.backend == "gloo"; });
  fit.notes.push_back(c.sends_held ? "memory: sent tensors held until the step ends (Gloo)"
                                   : "memory: sent tensors released as they complete");
}

std::string SourceOf(const std::vector<CalibrationRun>& runs) {
  std::string names;
  for (const CalibrationRun& run : runs) names += (names.empty() ? "" : ", ") + run.name;
  return "gpipe-plan calibrate from " + std::to_string(runs.size()) + " run record" + (runs.size() == 1 ? "" : "s") +
         ": " + names;
}

}  // namespace

Expected<CalibrationFit> FitCalibration(const std::vector<CalibrationRun>& runs) {
  if (runs.empty()) return Status::Invalid("calibration needs at least one run record");
  CalibrationSamples samples;
  for (const CalibrationRun& run : runs) GPIPE_RETURN_IF_ERROR(GatherCalibrationSamples(run, samples));
  if (samples.compute.empty()) return Status::Invalid("the run records hold no compute actions after their first steps");
  CalibrationFit fit;
  fit.steps = samples.steps;
  FitComputePerNode(samples.compute, fit);
  FitSends(samples.sends, fit);
  FitLinks(samples, runs.front().plan.cluster.link.bandwidth_bytes_per_s, fit);
  FitTail(samples, fit);
  FitSendsHeld(runs, fit);
  fit.calibration.source = SourceOf(runs);
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
    return Status::Invalid(record_path + ": the record names no plan; give the plan it ran (gpipe-plan calibrate --plan)");
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
