// Co-located ranks measured as the executor runs them: for each count n of ranks on this node,
// the model run for real as an n-rank pipeline (K stages x D replicas = n, K as large as the
// model's layers allow; 1F1B over 2K micro-batches of the profile's size; one process per rank
// over the executor's wire), its forward and backward actions against the profile's times for the
// same stages; at each micro-batch size asked for, since the slowdown depends on how long the
// actions are (the tiny GPT's two-rank factor over one rank: 1.19 at 1 sample, 1.00 at 8). What two independent processes computing side by side show is not what pipeline
// ranks show: on a 2-core virtual machine, two whole-model processes together measured 1.07-1.26x
// one alone, while a K=2 pipeline's actions ran 1.4-1.7x the profile (a rank waiting for its
// peer idles its core, and its next action starts cold).
//
// The factor for n ranks is the sum over the run's (rank, op, stage) of the mean action time, less
// the executor's per-action overheads the simulator adds on its own, over the profile's times for
// them, divided by the same figure of the one-rank run in the same round (up to the ranks the
// node computes at once, then mapped to the factor the simulator applies while all n compute:
// concurrent_ranks below): the counts run round
// after round, and a ratio of two runs seconds apart holds where the machine's speed drifts by
// tens of percent over minutes (a one-rank run measured 0.69x, 0.92x and 1.33x the profile's
// times in three profiles of the tiny GPT, each consistent within a few percent). That ratio
// times `one_rank_scale` (the profile's whole-model pass over its layers' sum, measured in the
// same rounds as the layers) is the count's factor; the median over the rounds, with half their
// interquartile range as its spread. The time lost between actions, per forward and backward
// action, comes from the same runs. Runs start this program: REQUIRES the caller is gpipe-plan.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "core/profile.h"
#include "core/status.h"
#include "core/step_costs.h"

namespace gpipe {

struct PipelineProbeRequest {
  /// The profile just measured (its step_costs, if any, are left out of the base times).
  Profile profile;
  /// The model's file, handed to every run.
  std::string model_path;
  /// Counts 1..max_ranks_per_node are measured.
  int max_ranks_per_node = 4;
  /// The micro-batch sizes to measure at (each must be one the profile measured, or it is
  /// interpolated: ProfileAtMicrobatch); empty: the profile's own size.
  std::vector<int64_t> microbatch_sizes;
  int steps = 20;
  int rounds = 5;
  /// One rank's compute against the profile's layer times: the whole model run as one graph over
  /// the sum of its layers run one by one (OneGraphScale), entry 0 of the result.
  Measured one_rank_scale{1.0, 0.0};
  /// How many ranks the node computes at once (StepCosts::concurrent_ranks). For counts n up to
  /// it, the factor kept is the one at which the simulator's core sharing prices the probe's own
  /// run as measured (FitToCoreSharing in the .cpp): it applies a count's factor only while that
  /// many ranks compute, while the run's figure averages over moments when fewer did. 0: the
  /// average is kept.
  int concurrent_ranks = 0;
  /// The executor's overheads per forward and backward action (StepCosts), taken out of the
  /// measured times since the simulator adds them itself.
  double forward_overhead_ms = 0;
  double backward_overhead_ms = 0;
  /// Plans, records and the ranks' logs go here; removed when every count is measured, kept on
  /// failure (the error names the log).
  std::string dir;
};

/// Per size, ascending, and in each per count n = 1..max_ranks_per_node (entry n - 1): the compute
/// factor; the time between actions (each rank's "between" of compare) per forward and backward
/// action, from the same run; the mean time a send occupied its rank (0 for one stage).
using PipelineProbeResult = std::vector<ColocatedAtSize>;

/// Errors name the size, the count and the run's log.
Expected<PipelineProbeResult> MeasurePipelineComputeScale(const PipelineProbeRequest& request, std::ostream& progress);

}  // namespace gpipe
