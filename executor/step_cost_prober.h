// Measures what a training step costs beyond its layers (core/step_costs.h), on the device the
// ranks will use, the way the executor pays it:
//  - the optimizer step over the model's parameters, for each optimizer a plan can name, after
//    warm-up steps (Adam's moments exist), per GiB of parameters;
//  - a step's fixed cost: zeroing the gradients and taking the step's batch;
//  - co-located ranks: the whole model's forward and backward on one micro-batch run by n rank
//    processes at once (started by the caller, each calling WholeModelTimes), against one process
//    alone. (Threads in one process do not do: they measured no slowdown where rank processes
//    computed 1.4x slower.)
#pragma once

#include <functional>
#include <vector>

#include "core/model.h"
#include "core/status.h"
#include "core/step_costs.h"
#include "executor/profiler.h"

namespace gpipe::executor {

/// Starts n processes that each call WholeModelTimes at once, and returns each one's times.
using ColocatedRun = std::function<Expected<std::vector<std::vector<double>>>(int n)>;

/// `max_ranks_per_node`: compute_scale is measured for 1..max_ranks_per_node ranks on a node, with
/// `colocated` starting the processes.
Expected<StepCosts> MeasureStepCosts(const ModelSpec& model, const ProfileSettings& settings, int max_ranks_per_node,
                                     const ColocatedRun& colocated);

/// Per round (settings.repeats after settings.warmup), one forward and backward of the whole
/// model on a micro-batch of the first size: what each co-located process measures.
Expected<std::vector<double>> WholeModelTimes(const ModelSpec& model, const ProfileSettings& settings);

}  // namespace gpipe::executor
