// Measures what a training step costs beyond its layers (core/step_costs.h), on the device the
// ranks will use, the way the executor pays it:
//  - the optimizer step over the model's parameters, for each optimizer a plan can name, after
//    warm-up steps (Adam's moments exist), per GiB of parameters;
//  - a step's fixed cost: zeroing the gradients and taking the step's batch;
//  - co-located ranks: the whole model's forward and backward on one micro-batch run by n rank
//    processes at once (started by the caller, each calling WholeModelTimes), against one process
//    alone; only the rounds that ran while all n processes were measuring count (processes start
//    and finish up to a second apart). (Threads in one process do not do: they measured no slowdown
//    where rank processes computed 1.4x slower.)
#pragma once

#include <functional>
#include <vector>

#include "core/model.h"
#include "core/status.h"
#include "core/step_costs.h"
#include "executor/profiler.h"

namespace gpipe::executor {

/// One round of WholeModelTimes: when it started on the machine's steady clock (shared by its
/// processes) and how long it took.
struct TimedRound {
  double start_ms = 0;
  double ms = 0;
};

/// Starts n processes that each call WholeModelTimes at once, and returns each one's rounds.
using ColocatedRun = std::function<Expected<std::vector<std::vector<TimedRound>>>(int n)>;

/// Of each process's rounds, the times of those that ran while every process was measuring: from
/// the latest first start to the earliest last end. Fails when a process has fewer than
/// `min_rounds` rounds in that window (the processes hardly overlapped).
Expected<std::vector<std::vector<double>>> RoundsWhileAllRan(const std::vector<std::vector<TimedRound>>& runs,
                                                             size_t min_rounds);

/// `max_ranks_per_node`: compute_scale is measured for 1..max_ranks_per_node ranks on a node, with
/// `colocated` starting the processes.
Expected<StepCosts> MeasureStepCosts(const ModelSpec& model, const ProfileSettings& settings, int max_ranks_per_node,
                                     const ColocatedRun& colocated);

/// Rounds of one forward and backward of the whole model on a micro-batch of the first size, after
/// settings.warmup unmeasured ones, until settings.repeats rounds and `min_seconds` have passed:
/// what each co-located process measures.
Expected<std::vector<TimedRound>> WholeModelTimes(const ModelSpec& model, const ProfileSettings& settings,
                                                  double min_seconds);

}  // namespace gpipe::executor
