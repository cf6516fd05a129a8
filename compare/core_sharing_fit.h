// The co-located factor the simulator needs, from what a pipeline run measured. The simulator
// prices a node's ranks by how many compute at each moment (core sharing, simulator/cost_model.h):
// count a's factor applies only while a ranks compute at once, and one rank alone runs at one
// rank's speed. A probe run of n ranks (compare/pipeline_probe.h) measures an average over both:
// in the tiny GPT's two-rank probe (1F1B, 4 micro-batches) the simulator had both ranks computing
// for about two thirds of the compute, so a measured average of 1.156 taken as the two-rank
// factor priced that same run at 1.10. The factor kept is the one at which the simulator, pricing
// the probe's own plan, averages what was measured.
#pragma once

#include <vector>

#include "core/plan.h"
#include "core/status.h"

namespace gpipe {

/// The factor q for the plan's n ranks on one node, relative to one rank, at which the simulator
/// prices the plan's compute (its ranks' busy time) at `ratio` times what one rank's speed gives;
/// `fitted` holds the factors of counts 1..n-1 (entry 0 is 1), `capacity` the ranks the node
/// computes at once (n <= capacity). The plan's own step_costs are replaced. Found by bisection
/// over [1, 16]: the priced average grows with q. A ratio at or below 1 is returned as it is (the
/// simulator never prices a shared rank faster than one alone).
Expected<double> FitToCoreSharing(Plan plan, const std::vector<double>& fitted, double ratio, int capacity);

}  // namespace gpipe
