// Measures what a training step costs beyond its layers (core/step_costs.h), on the device the
// ranks will use, the way the executor pays it:
//  - the optimizer step over the model's parameters, for each optimizer a plan can name, after
//    warm-up steps (Adam's moments exist), per GiB of parameters;
//  - a step's fixed cost: zeroing the gradients and taking the step's batch;
//  - the executor's own overhead per forward and backward action.
// Co-located ranks are measured by running pipelines (compare/pipeline_probe.h), which needs the
// planner and the launcher: the caller adds compute_scale.
#pragma once


#include "core/model.h"
#include "core/status.h"
#include "core/step_costs.h"
#include "executor/profiler.h"

namespace gpipe::executor {

/// Everything but compute_scale (on CUDA that is {1}: ranks on a node have a GPU each).
Expected<StepCosts> MeasureStepCosts(const ModelSpec& model, const ProfileSettings& settings);

}  // namespace gpipe::executor
