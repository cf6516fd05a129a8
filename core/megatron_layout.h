// A plan's partition as Megatron-Core's --pipeline-model-parallel-layout (e.g. "Et*3|tttt|tttL"):
// the stages in pipeline order separated by "|", stage s on pipeline rank s mod K (virtual stage
// s / K with several stages per rank), each stage its layers: 'E' the embedding (the first
// layer), 't' a transformer layer, 'L' the output layer and loss (the last layer); "t*n" stands
// for n transformer layers. Megatron describes GPT-like models only and places stages in a loop,
// so a model whose first layer is not an embedding or whose last is not an output head, and the
// V-placed schedules (zb-v, dualpipe-v), are refused with the reason.
#pragma once

#include <string>

#include "core/plan.h"
#include "core/status.h"

namespace gpipe {

/// The layout string alone, e.g. "Et*3|tttt|tttL".
Expected<std::string> MegatronLayout(const Plan& plan);

/// Megatron's flags for the plan: "--pipeline-model-parallel-size K --pipeline-model-parallel-layout
/// \"...\"" (and --num-layers-per-virtual-pipeline-stage is left out: the layout implies it), led by
/// "--tensor-model-parallel-size t --sequence-parallel" when t > 1 and followed by
/// "--use-distributed-optimizer" with a sharded optimizer. Megatron takes D from the world size.
Expected<std::string> MegatronFlags(const Plan& plan);

}  // namespace gpipe
