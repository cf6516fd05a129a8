// A lower bound on every plan of a configuration, read off its profile and cluster without
// choosing a partition: what the search queues the configurations by first (thousands of them at
// a thousand devices), and what a configuration it never reaches counts toward the gap with. The
// greatest of
//   - the step's work spread over its K ranks (the busiest rank does at least the average),
//   - one micro-batch's way through every layer and back: its forward and backward (for the
//     zero-bubble kinds its input-gradient pass, then the first stage's weight pass), and the
//     messages between consecutive stages on different ranks, each boundary's over the links
//     the placement puts between them, carrying a different layer's output (the boundaries'
//     layers are distinct): at least the smallest outputs, the smallest over the slowest links,
//   - M times the heaviest layer's work, on whichever rank holds it,
// each followed by the all-reduce (or the sharded optimizer's reduce-scatter and all-gather) of
// at least the lightest layer's parameters over D replicas, at the least latency and greatest
// bandwidth a ring of D devices can have on this cluster. Layer times are the problem's profile's
// (measured at its micro-batch size when the profile has several), scaled as the cost model
// scales them; what the cost model adds beyond (overheads, core sharing, recompute, the rest of
// the messages) only lengthens the step. tests/planner/cheap_bound_test.cpp checks it against
// every plan of small configurations.
#pragma once

#include <map>
#include <optional>
#include <tuple>

#include "core/calibration.h"
#include "planner/partition.h"

namespace gpipe {

class CheapBounds {
 public:
  /// A lower bound on the step of every plan of `problem` (one of the search's configurations).
  double Of(const PartitionProblem& problem);
  /// A rough guess at `problem`'s best step, for picking which configurations to try first when
  /// no search has found a plan: the work spread over the ranks, stretched by the bubble of equal
  /// stages ((K - 1) / (v M), halved for the zero-bubble kinds) and by a third where the model
  /// state and one stage's worth of K micro-batches' activations pass the memory (remat); plus one
  /// micro-batch's messages through every boundary and two messages per micro-batch, and the
  /// all-reduce of a rank's share of the parameters; infinity where the model state alone passes
  /// the memory. Not a bound.
  double Estimate(const PartitionProblem& problem);

 private:
  // What the bound reads of a profile, the same for every configuration that shares it, per
  // micro-batch at the profile's size: with a full backward (B) and with one split into I and W.
  struct Work {
    double work_full = 0, work_split = 0;        // every layer's F + B; F + min(B, I + W)
    double path_full = 0, path_split = 0;        // F + B; F + I, then the first layer's W
    double heaviest_full = 0, heaviest_split = 0;  // the largest layer's work
    std::vector<double> output_bytes;            // of the layers whose output can be sent, ascending
    double least_param_bytes = 0;
    double param_bytes = 0, activation_bytes = 0;  // every layer's, at the profile's micro-batch size
    std::optional<Calibration> calibration;
  };
  // The messages of one micro-batch's forward and backward over the stage boundaries that cross
  // ranks: the sum of their latencies, and of their transfer times at the profile's micro-batch
  // size (the boundaries carrying distinct layers' outputs: at least the smallest outputs, the
  // smallest over the slowest links).
  struct Hops {
    double latency_ms = 0;
    double transfer_ms = 0;
  };
  const Work& WorkOf(const PartitionProblem& problem);
  const Hops& HopsOf(const PartitionProblem& problem);
  // One micro-batch's messages (HopsOf) at `samples` times the profile's micro-batch size.
  double MessagesMs(const PartitionProblem& problem, double samples);
  double AllReduceMs(const PartitionProblem& problem, double bytes);

  std::map<const Profile*, Work> works_;
  // By layout, K, chunks, D, placement, t and profile: shared by the configurations that differ
  // in M (the profile too, unless it has several micro-batch sizes).
  std::map<std::tuple<int, int, int, int, int, int, const Profile*>, Hops> hops_;
  // Per cluster, and whether the ring must cross nodes: the least latency and the greatest
  // bandwidth its links can have (AllReduceMs).
  std::map<std::pair<const Cluster*, bool>, std::pair<double, double>> ring_links_;
};

}  // namespace gpipe
