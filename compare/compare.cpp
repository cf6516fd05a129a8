#include "compare/compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/schedule/validate.h"
#include "core/text.h"
#include "core/units.h"
#include "simulator/bubble.h"
#include "simulator/cost_model.h"
#include "simulator/report.h"
#include "simulator/simulator.h"

namespace gpipe {
namespace {

// What one rank did in one step (measured or simulated).
struct RankStep {
  double busy = 0, end = 0, wait = 0, send = 0, gap = 0;
};

template <typename Timing>
RankStep Summarize(std::vector<const Timing*> actions) {
  std::sort(actions.begin(), actions.end(), [](const Timing* a, const Timing* b) { return a->start_ms < b->start_ms; });
  RankStep s;
  double last_end = 0;
  for (const Timing* a : actions) {
    const double duration = a->end_ms - a->start_ms;
    if (IsCompute(a->action.op)) s.busy += duration;
    if (IsRecv(a->action.op)) s.wait += duration;
    if (IsSend(a->action.op)) s.send += duration;
    s.gap += std::max(0.0, a->start_ms - last_end);
    last_end = std::max(last_end, a->end_ms);
  }
  s.end = last_end;
  return s;
}

using OpKey = std::tuple<int, Op, int>;  // rank, op, stage

std::string OpLabel(Op op, int stage) { return std::string(OpName(op)) + " of stage " + std::to_string(stage); }

// "error -1.20 ms" (predicted - measured), the sign convention of kErrorConvention.
std::string ErrorMs(double predicted_ms, double measured_ms) {
  return Sprintf("error %+.2f ms", predicted_ms - measured_ms);
}

// 1 - busy rank-time / (ranks x step): the share of the ranks' time not computing.
double IdleFraction(double busy_ms, int ranks, double step_ms) {
  return step_ms > 0 ? 1.0 - busy_ms / (ranks * step_ms) : 0.0;
}

}  // namespace

double Comparison::PeakMemoryError() const {
  double worst = 0;
  for (const RankComparison& r : ranks) {
    if (r.measured_peak_bytes <= 0) continue;
    const double e = RelativeError(r.predicted_peak_bytes, r.measured_peak_bytes);
    if (std::abs(e) > std::abs(worst)) worst = e;
  }
  return worst;
}

Expected<Comparison> Compare(const Plan& plan, const RunRecord& record) {
  const int ranks = plan.num_ranks();
  if (record.num_ranks != ranks || record.microbatches != plan.microbatches || record.replicas != plan.replicas ||
      record.schedule != ScheduleName(plan.schedule)) {
    return Status::Invalid(Sprintf("the run record (%s, K=%d, D=%d, M=%d) is not a run of this plan (%s, K=%d, D=%d, "
                                   "M=%d); compare a plan with the record 'gpipe-plan run PLAN --record' wrote for it",
                                   record.schedule.c_str(), record.num_ranks, record.replicas, record.microbatches,
                                   std::string(ScheduleName(plan.schedule)).c_str(), ranks, plan.replicas,
                                   plan.microbatches));
  }
  if (record.steps.empty()) return Status::Invalid("the run record has no steps");
  Expected<Schedule> schedule = BuildSchedule(plan);
  if (!schedule.ok()) return schedule.status();
  Expected<CostModel> costs = BuildCostModel(plan);
  if (!costs.ok()) return costs.status();
  Expected<SimResult> sim = Simulate(*schedule, *costs);
  if (!sim.ok()) return sim.status();

  Comparison c;
  c.title = PlanTitle(plan, "predicted vs measured");
  const std::vector<StepRecord> steps = MeasuredSteps(record.steps);
  c.measured_steps = static_cast<int>(steps.size());
  const std::vector<double> step_times = MeasuredStepTimes(record.steps);
  c.predicted_step_ms = sim->step_time_ms;
  c.measured_step_ms = MeasuredStepMs(record.steps);
  c.measured_step_spread_ms = HalfIqr(step_times);
  c.predicted_throughput = sim->throughput_samples_per_s;
  c.measured_throughput = ThroughputOf(record.steps, plan.global_batch);
  c.predicted_bubble = sim->bubble_fraction;

  // Measured: replica 0's ranks, per step.
  std::vector<const RankRecord*> by_rank(ranks, nullptr);
  for (const RankRecord& r : record.ranks) {
    if (r.replica == 0 && r.pipeline_rank >= 0 && r.pipeline_rank < ranks) by_rank[r.pipeline_rank] = &r;
  }
  std::map<OpKey, std::vector<double>> measured_ops, predicted_ops;
  std::vector<double> after, bubble, idle;
  c.ranks.resize(ranks);
  std::vector<std::vector<RankStep>> measured(ranks);
  for (const StepRecord& step_record : steps) {
    const int step = step_record.step;
    double last_end = 0, busy = 0;
    std::vector<RankSpan> spans;
    for (int r = 0; r < ranks; ++r) {
      if (by_rank[r] == nullptr) continue;
      std::vector<const ActionRecord*> actions;
      for (const ActionRecord& a : by_rank[r]->actions) {
        if (a.step != step) continue;
        actions.push_back(&a);
        if (!IsRecv(a.action.op)) measured_ops[{r, a.action.op, a.action.stage}].push_back(a.end_ms - a.start_ms);
      }
      measured[r].push_back(Summarize(actions));
      const RankStep& s = measured[r].back();
      last_end = std::max(last_end, s.end);
      busy += s.busy;
      spans.push_back({s.wait, s.end});
    }
    after.push_back(step_record.time_ms - last_end);
    bubble.push_back(BubbleFraction(spans));
    idle.push_back(IdleFraction(busy, ranks, step_record.time_ms));
  }
  std::vector<std::vector<const ActionTiming*>> simulated(ranks);
  for (const ActionTiming& a : sim->actions) {
    simulated[a.rank].push_back(&a);
    if (!IsRecv(a.action.op)) predicted_ops[{a.rank, a.action.op, a.action.stage}].push_back(a.end_ms - a.start_ms);
  }
  double predicted_last_end = 0, predicted_busy = 0;
  for (int r = 0; r < ranks; ++r) {
    RankComparison& rc = c.ranks[r];
    rc.rank = r;
    const RankStep p = Summarize(simulated[r]);
    rc.predicted_busy_ms = sim->ranks[r].busy_ms;
    rc.predicted_end_ms = p.end;
    rc.predicted_wait_ms = p.wait;
    rc.predicted_send_ms = p.send;
    rc.predicted_peak_bytes = sim->ranks[r].peak_memory_bytes;
    predicted_last_end = std::max(predicted_last_end, p.end);
    predicted_busy += rc.predicted_busy_ms;
    const auto median_of = [&](double RankStep::*field) {
      std::vector<double> v;
      for (const RankStep& s : measured[r]) v.push_back(s.*field);
      return Median(v);
    };
    rc.measured_busy_ms = median_of(&RankStep::busy);
    rc.measured_end_ms = median_of(&RankStep::end);
    rc.measured_wait_ms = median_of(&RankStep::wait);
    rc.measured_send_ms = median_of(&RankStep::send);
    rc.measured_gap_ms = median_of(&RankStep::gap);
    if (by_rank[r] != nullptr) rc.measured_peak_bytes = static_cast<double>(by_rank[r]->peak_memory_bytes);
  }
  c.predicted_after_ms = c.predicted_step_ms - predicted_last_end;
  c.measured_after_ms = Median(after);
  c.measured_bubble = Median(bubble);
  c.predicted_idle = IdleFraction(predicted_busy, ranks, c.predicted_step_ms);
  c.measured_idle = Median(idle);
  for (const auto& [key, values] : predicted_ops) {
    OpComparison o;
    std::tie(o.rank, o.op, o.stage) = key;
    o.count = static_cast<int>(values.size());
    o.predicted_ms = Median(values);
    auto it = measured_ops.find(key);
    o.measured_ms = it == measured_ops.end() ? 0.0 : Median(it->second);
    c.ops.push_back(o);
  }

  // Findings, on the rank whose last action ended last (it decides the step).
  int critical = 0;
  for (int r = 1; r < ranks; ++r) {
    if (c.ranks[r].measured_end_ms > c.ranks[critical].measured_end_ms) critical = r;
  }
  const RankComparison& k = c.ranks[critical];
  std::vector<std::pair<double, std::string>> findings;
  findings.push_back({1e300, Sprintf("The step took %.2f ms (median, +-%.2f over %d steps) against %.2f ms predicted "
                                     "(error %+.1f%%). Rank %d ended last: its end moves with its compute, waiting, "
                                     "sending and gaps, and the step with that and what follows the last action.",
                                     c.measured_step_ms, c.measured_step_spread_ms, c.measured_steps, c.predicted_step_ms,
                                     100.0 * c.StepError(), critical)});
  {
    // The op of the critical rank with the largest total difference.
    const OpComparison* worst = nullptr;
    for (const OpComparison& o : c.ops) {
      if (o.rank != critical || !IsCompute(o.op)) continue;
      if (worst == nullptr || std::abs(o.count * (o.measured_ms - o.predicted_ms)) >
                                  std::abs(worst->count * (worst->measured_ms - worst->predicted_ms))) {
        worst = &o;
      }
    }
    const double d = k.measured_busy_ms - k.predicted_busy_ms;
    std::string text = Sprintf("Compute: rank %d computed %.2f ms against %.2f ms predicted (%s, %+.1f%%)", critical,
                               k.measured_busy_ms, k.predicted_busy_ms, ErrorMs(k.predicted_busy_ms, k.measured_busy_ms).c_str(),
                               100.0 * RelativeError(k.predicted_busy_ms, k.measured_busy_ms));
    if (worst != nullptr) {
      text += Sprintf("; most of it in %s, %.3f ms each against %.3f ms (x%d)", OpLabel(worst->op, worst->stage).c_str(),
                      worst->measured_ms, worst->predicted_ms, worst->count);
    }
    findings.push_back({std::abs(d), text + (d > 0 ? ": a slow stage (profile times too low for this run)." : ".")});
  }
  {
    const double d = k.measured_wait_ms - k.predicted_wait_ms;
    double peer_slow = 0;
    int peer = -1;
    for (int r = 0; r < ranks; ++r) {
      if (r == critical) continue;
      const double slow = c.ranks[r].measured_busy_ms - c.ranks[r].predicted_busy_ms;
      if (peer < 0 || slow > peer_slow) peer = r, peer_slow = slow;
    }
    std::string why = ranks == 1 || d <= 0 ? "" : peer >= 0 && peer_slow >= 0.5 * d ?
        Sprintf(": a slow peer (rank %d computed %.2f ms more than predicted)", peer, peer_slow) :
        ": slower links than the cluster file says (or later sends)";
    findings.push_back({std::abs(d), Sprintf("Waiting for messages: rank %d waited %.2f ms against %.2f ms predicted "
                                             "(%s)%s.", critical, k.measured_wait_ms, k.predicted_wait_ms,
                                             ErrorMs(k.predicted_wait_ms, k.measured_wait_ms).c_str(), why.c_str())});
  }
  {
    const double d = k.measured_send_ms - k.predicted_send_ms;
    findings.push_back({std::abs(d), Sprintf("Issuing sends: rank %d spent %.2f ms against %.2f ms predicted (%s).",
                                             critical, k.measured_send_ms, k.predicted_send_ms,
                                             ErrorMs(k.predicted_send_ms, k.measured_send_ms).c_str())});
  }
  findings.push_back({k.measured_gap_ms, Sprintf("Between actions: rank %d lost %.2f ms to overhead between and before its "
                                                 "actions (the simulator has none).", critical, k.measured_gap_ms)});
  {
    const double d = c.measured_after_ms - c.predicted_after_ms;
    findings.push_back({std::abs(d), Sprintf("After the last action (optimizer step, all-reduce, step bookkeeping): %.2f ms "
                                             "against %.2f ms predicted (%s).",
                                             c.measured_after_ms, c.predicted_after_ms,
                                             ErrorMs(c.predicted_after_ms, c.measured_after_ms).c_str())});
  }
  std::stable_sort(findings.begin(), findings.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& f : findings) c.findings.push_back(std::move(f.second));

  c.predicted = TimelineFromSim(*sim, "predicted");
  c.measured = TimelineFromRecord(record, steps.back().step, "measured");
  return c;
}

std::string ComparisonTable(const Comparison& c) {
  std::string out = c.title + "\n";
  out += Sprintf("(%s; measured: median over %d step%s after the first)\n\n", kErrorConvention, c.measured_steps,
                 c.measured_steps == 1 ? "" : "s");
  out += Sprintf("%-22s %12s %12s %9s\n", "", "predicted", "measured", "error");
  const auto row = [&](const char* name, double p, double m, const char* unit) {
    out += Sprintf("%-22s %10.2f %s %10.2f %s %+8.1f%%\n", name, p, unit, m, unit, 100.0 * RelativeError(p, m));
  };
  row("step time", c.predicted_step_ms, c.measured_step_ms, "ms");
  row("throughput", c.predicted_throughput, c.measured_throughput, "/s");
  out += Sprintf("%-22s %11.1f%% %11.1f%%\n", "pipeline bubble", 100 * c.predicted_bubble, 100 * c.measured_bubble);
  out += Sprintf("%-22s %11.1f%% %11.1f%%\n", "idle (not computing)", 100 * c.predicted_idle, 100 * c.measured_idle);
  row("after last action", c.predicted_after_ms, c.measured_after_ms, "ms");
  out += "\nrank   busy (pred / meas ms)   waiting        sending        between   end            peak memory (pred / meas)\n";
  for (const RankComparison& r : c.ranks) {
    out += Sprintf("%-6d %9.2f / %-9.2f  %5.2f / %-6.2f  %5.2f / %-6.2f  %7.2f   %6.2f / %-6.2f  %s / %s (%+.1f%%)\n", r.rank,
                   r.predicted_busy_ms, r.measured_busy_ms, r.predicted_wait_ms, r.measured_wait_ms, r.predicted_send_ms,
                   r.measured_send_ms, r.measured_gap_ms, r.predicted_end_ms, r.measured_end_ms,
                   FormatBytes(r.predicted_peak_bytes).c_str(), FormatBytes(r.measured_peak_bytes).c_str(),
                   100.0 * RelativeError(r.predicted_peak_bytes, r.measured_peak_bytes));
  }
  out += "\naction              count   predicted    measured   error\n";
  for (const OpComparison& o : c.ops) {
    out += Sprintf("rank %d %-6s s%-3d %6d  %8.3f ms %8.3f ms  %+6.1f%%\n", o.rank, std::string(OpCode(o.op)).c_str(),
                   o.stage, o.count, o.predicted_ms, o.measured_ms,
                   100.0 * RelativeError(o.predicted_ms, o.measured_ms));
  }
  out += "\nwhere they differ, largest first:\n";
  for (const std::string& f : c.findings) out += "  - " + f + "\n";
  return out;
}

nlohmann::json ComparisonToJson(const Comparison& c) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankComparison& r : c.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"predicted_busy_ms", r.predicted_busy_ms},
                     {"measured_busy_ms", r.measured_busy_ms},
                     {"predicted_end_ms", r.predicted_end_ms},
                     {"measured_end_ms", r.measured_end_ms},
                     {"predicted_wait_ms", r.predicted_wait_ms},
                     {"measured_wait_ms", r.measured_wait_ms},
                     {"predicted_send_ms", r.predicted_send_ms},
                     {"measured_send_ms", r.measured_send_ms},
                     {"measured_gap_ms", r.measured_gap_ms},
                     {"predicted_peak_memory_bytes", r.predicted_peak_bytes},
                     {"measured_peak_memory_bytes", r.measured_peak_bytes}});
  }
  nlohmann::json ops = nlohmann::json::array();
  for (const OpComparison& o : c.ops) {
    ops.push_back({{"rank", o.rank},
                   {"op", std::string(OpCode(o.op))},
                   {"stage", o.stage},
                   {"count", o.count},
                   {"predicted_ms", o.predicted_ms},
                   {"measured_ms", o.measured_ms}});
  }
  return {{"predicted_step_ms", c.predicted_step_ms},
          {"measured_step_ms", c.measured_step_ms},
          {"measured_step_spread_ms", c.measured_step_spread_ms},
          {"measured_steps", c.measured_steps},
          {"error_convention", kErrorConvention},
          {"step_error", c.StepError()},
          {"predicted_throughput_samples_per_s", c.predicted_throughput},
          {"measured_throughput_samples_per_s", c.measured_throughput},
          {"predicted_bubble_fraction", c.predicted_bubble},
          {"measured_bubble_fraction", c.measured_bubble},
          {"predicted_idle_fraction", c.predicted_idle},
          {"measured_idle_fraction", c.measured_idle},
          {"predicted_after_last_action_ms", c.predicted_after_ms},
          {"measured_after_last_action_ms", c.measured_after_ms},
          {"peak_memory_error", c.PeakMemoryError()},
          {"ranks", ranks},
          {"actions", ops},
          {"findings", c.findings}};
}

}  // namespace gpipe
