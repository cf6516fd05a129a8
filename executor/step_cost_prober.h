// Measures what a training step costs beyond its layers (core/step_costs.h), on the device the
// ranks will use, the way the executor pays it:
//  - the optimizer step over the model's parameters, for each optimizer a plan can name, after
//    warm-up steps (Adam's moments exist), per GiB of parameters;
//  - a step's fixed cost: zeroing the gradients and taking the step's batch;
//  - co-located ranks: the whole model's forward and backward on one micro-batch run by n threads
//    at once, each with its own copy of the layers and the profile's intra-op thread count, in
//    lockstep, against the same run alone. Threads share the node's cores, caches and memory
//    bandwidth as n rank processes would (with more than one intra-op thread per rank they would
//    also share one thread pool, which rank processes do not: measure with --threads 1 then).
#pragma once

#include "core/model.h"
#include "core/status.h"
#include "core/step_costs.h"
#include "executor/profiler.h"

namespace gpipe::executor {

/// `max_ranks_per_node`: compute_scale is measured for 1..max_ranks_per_node ranks on a node.
Expected<StepCosts> MeasureStepCosts(const ModelSpec& model, const ProfileSettings& settings, int max_ranks_per_node);

}  // namespace gpipe::executor
