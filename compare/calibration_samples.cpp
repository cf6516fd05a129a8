#include "compare/calibration_samples.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "core/statistics.h"
#include "simulator/cost_model.h"

namespace gpipe {
namespace {

bool IsBackward(Op op) { return IsCompute(op) && op != Op::kForward; }

// One run as the samples read it: its record, and its plan costed without calibration.
struct CostedRun {
  const RunRecord& record;
  const Plan& plan;
  const CostModel& costs;
  // The warm-up step left out (-1: none, the record has one step).
  int first_step;
};

// The record must be a run of the plan: same K, D and M.
Status CheckRecordOfPlan(const CalibrationRun& run, const Plan& plan) {
  const RunRecord& record = run.record;
  if (record.num_ranks == plan.num_ranks() && record.microbatches == plan.microbatches &&
      record.replicas == plan.replicas) {
    return Status::Ok();
  }
  return Status::Invalid(run.name + ": the record (K=" + std::to_string(record.num_ranks) + ", D=" +
                         std::to_string(record.replicas) + ", M=" + std::to_string(record.microbatches) +
                         ") is not a run of its plan (K=" + std::to_string(plan.num_ranks()) + ", D=" +
                         std::to_string(plan.replicas) + ", M=" + std::to_string(plan.microbatches) + ")");
}

// Compute: per (rank, op, stage), the mean measured time against the profile's time.
void GatherCompute(const CostedRun& run, std::vector<ComputeSample>& compute) {
  std::map<std::tuple<int, Op, int>, std::vector<double>> durations;
  for (const RankRecord& r : run.record.ranks) {
    for (const ActionRecord& a : r.actions) {
      if (a.step != run.first_step && IsCompute(a.action.op)) {
        durations[{r.rank, a.action.op, a.action.stage}].push_back(a.end_ms - a.start_ms);
      }
    }
  }
  const int per_node = RanksPerNode(run.plan.cluster, run.plan.num_ranks(), run.plan.replicas, run.plan.tensor_parallel);
  for (const auto& [key, values] : durations) {
    const auto& [rank, op, stage] = key;
    const StageCost& c = run.costs.stages[stage];
    // The costs carry no calibration: this is the profile's time of the action.
    const double base = ComputeMs(c, op);
    const int forwards = op == Op::kForward || Recomputes(c, op) ? 1 : 0;
    // Means, not medians: a step is a sum of actions, so the occasional stalled action (a rank
    // preempted by its peer on a shared node) costs its share; the caller picks records free of
    // slow spells.
    if (base > 0) compute.push_back({per_node, forwards, IsBackward(op) ? 1 : 0, base, Mean(values)});
  }
}

// Sends: how long each occupied its rank; and, paired with its receive, each message whose
// receiver was already waiting when the send ended (then the receive's end is the arrival).
void GatherSends(const CostedRun& run, CalibrationSamples& samples) {
  // Each receive by (replica, pipeline rank, step, op, stage, micro-batch), indexed once.
  using ReceiveKey = std::tuple<int, int, int, Op, int, int>;
  std::map<ReceiveKey, const ActionRecord*> receives;
  for (const RankRecord& r : run.record.ranks) {
    for (const ActionRecord& b : r.actions) {
      if (IsRecv(b.action.op)) {
        receives.emplace(ReceiveKey{r.replica, r.pipeline_rank, b.step, b.action.op, b.action.stage, b.action.microbatch}, &b);
      }
    }
  }
  const std::vector<int> stage_rank = run.plan.StageRanks();
  for (const RankRecord& r : run.record.ranks) {
    for (const ActionRecord& a : r.actions) {
      if (a.step == run.first_step || !IsSend(a.action.op)) continue;
      samples.sends.push_back(a.end_ms - a.start_ms);
      const bool gradient = a.action.op == Op::kSendGradient;
      const int to_stage = PeerStage(a.action);
      const Op recv_op = gradient ? Op::kRecvGradient : Op::kRecvActivation;
      const auto b = receives.find({r.replica, stage_rank[to_stage], a.step, recv_op, to_stage, a.action.microbatch});
      if (b != receives.end() && b->second->start_ms <= a.end_ms) {
        const StageCost& c = run.costs.stages[a.action.stage];
        samples.message_bytes.push_back(gradient ? c.input_bytes : c.output_bytes);
        samples.message_ms.push_back(b->second->end_ms - a.end_ms);
      }
    }
  }
}

// A step's earliest action start, its latest action end, and the pipeline rank whose action ended
// last (the first in record order among equal ends).
struct StepBounds {
  double first_start = 0;
  double last_end = 0;
  int last_rank = 0;
};

std::map<int, StepBounds> BoundsOfSteps(const CostedRun& run) {
  std::map<int, StepBounds> bounds;
  for (const RankRecord& r : run.record.ranks) {
    for (const ActionRecord& a : r.actions) {
      if (a.step == run.first_step) continue;
      const auto [it, fresh] = bounds.try_emplace(a.step, StepBounds{a.start_ms, a.end_ms, r.pipeline_rank});
      if (fresh) continue;
      StepBounds& b = it->second;
      b.first_start = std::min(b.first_start, a.start_ms);
      if (a.end_ms > b.last_end) b.last_end = a.end_ms, b.last_rank = r.pipeline_rank;
    }
  }
  return bounds;
}

// The tail of each step after the first that has actions.
void GatherTails(const CostedRun& run, CalibrationSamples& samples) {
  const std::map<int, StepBounds> bounds = BoundsOfSteps(run);
  const std::vector<double> rank_params = ParamBytesPerRank(run.plan);
  for (const StepRecord& s : run.record.steps) {
    const auto b = bounds.find(s.step);
    if (s.step == run.first_step || b == bounds.end()) continue;
    const int r = b->second.last_rank;
    const double allreduce = run.costs.allreduce_ms.empty() ? 0.0 : run.costs.allreduce_ms[r];
    samples.tail_ms.push_back(s.time_ms - b->second.last_end - allreduce);
    samples.tail_params.push_back(rank_params[r]);
    samples.first_starts.push_back(b->second.first_start);
    ++samples.steps;
  }
}

}  // namespace

Status GatherCalibrationSamples(const CalibrationRun& run, CalibrationSamples& samples) {
  // Fitted against the bare profile: a fitted calibration replaces the profile's measured step
  // costs too (simulator/cost_model.h, EffectiveCalibration).
  Plan plan = run.plan;
  plan.cluster.calibration.reset();
  plan.profile.step_costs.reset();
  GPIPE_RETURN_IF_ERROR(CheckRecordOfPlan(run, plan));
  Expected<CostModel> costs = BuildCostModel(plan);
  if (!costs.ok()) return Status::Invalid(run.name + ": " + costs.status().message());
  const int first_step = run.record.steps.size() > 1 ? run.record.steps.front().step : -1;
  const CostedRun costed{run.record, plan, *costs, first_step};
  GatherCompute(costed, samples.compute);
  GatherSends(costed, samples);
  GatherTails(costed, samples);
  return Status::Ok();
}

}  // namespace gpipe
