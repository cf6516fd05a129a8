// What each action does to its rank's memory. Every change happens at the start or the end of
// one of the rank's own actions, so a rank's peak depends only on its action list and the
// stages' byte counts, never on timing: the planner computes the same peak as the simulator
// without simulating.
//   RECV_F   start: + the stage's input (the receive buffer, posted when the rank reaches it)
//   F        start: + the stash (activations, or only the input under remat), and the received
//                     input becomes part of it (- input when a RECV_F precedes)
//   RECV_B   start: + the stage's output bytes (the incoming gradient's buffer)
//   B / I    start: + one micro-batch of recomputed activations under remat
//   B        end:   - the stash, the recomputed activations and the gradient buffer
//   I        end:   - the gradient buffer;   W end: - the stash and recomputed activations
//   SEND_F/B        nothing: a message in flight belongs to the link.
// Static bytes (parameters, gradients, optimizer state) are held throughout.
#pragma once

#include <vector>

#include "core/schedule/schedule.h"
#include "simulator/cost_model.h"

namespace gpipe {

/// What an action does to a rank's memory in units of its stage's quantities: stashes
/// (stash_bytes each), recomputed activations (activation_bytes each), gradient buffers
/// (output_bytes each) and input buffers (input_bytes each). The byte effect is the dot product;
/// the planner keeps the counts to price many stages without walking the list again.
struct MemoryCounts {
  int stash = 0;
  int recompute = 0;
  int gradient_buffers = 0;
  int input_buffers = 0;
  int in_flight = 0;
};

struct SymbolicEffect {
  MemoryCounts at_start;
  MemoryCounts at_end;
};

SymbolicEffect SymbolicEffectOf(const Action& action, bool remat, bool received_input, bool received_gradient);

struct MemoryChange {
  double activation_bytes = 0;
  double buffer_bytes = 0;
  /// Change in the number of micro-batches whose activations are stashed.
  int in_flight = 0;
};

struct MemoryEffect {
  MemoryChange at_start;
  MemoryChange at_end;
};

/// The effect of `action` given its stage's costs. `received_input`: the stage's input comes
/// from another rank (a RECV_F precedes its forwards); `received_gradient`: likewise for the
/// gradient of its output (a RECV_B precedes its backwards).
MemoryEffect EffectOf(const Action& action, const StageCost& stage, bool received_input, bool received_gradient);

/// The effect of `action` in `schedule`, with the receive flags read off the stage layout.
MemoryEffect EffectOf(const Schedule& schedule, const Action& action, const StageCost& stage);

struct MemoryPeak {
  double static_bytes = 0;
  double peak_bytes = 0;
  /// At the peak: activations (stashed and recomputed) and communication buffers.
  double activation_bytes = 0;
  double buffer_bytes = 0;
  int max_in_flight = 0;
};

/// The peak over rank `rank`'s actions: apply each action's start change, then its end change.
MemoryPeak RankMemoryPeak(const Schedule& schedule, int rank, const std::vector<StageCost>& stages);

/// A rank's peak as a function of its stages' bytes: the walk of RankMemoryPeak done once with
/// counts instead of bytes, keeping the count vectors that can be the largest (none is below
/// another in every count). Peak = static + max over the kept vectors of the dot product.
class MemoryFrontier {
 public:
  /// For rank `rank` of `schedule`, with remat[i] for the i-th stage on the rank (in stage order).
  MemoryFrontier(const Schedule& schedule, int rank, const std::vector<bool>& remat);

  /// The stages on the rank, in stage order.
  const std::vector<int>& stages() const { return stages_; }
  int max_in_flight() const { return max_in_flight_; }
  /// Activations and buffers at the peak, for `costs[i]` the i-th stage on the rank (static
  /// bytes excluded).
  double PeakDynamicBytes(const std::vector<const StageCost*>& costs) const;
  size_t size() const { return vectors_.size() / width_; }

 private:
  std::vector<int> stages_;
  size_t width_ = 0;             // 4 counts per stage on the rank
  std::vector<int> vectors_;     // size() vectors of width_ counts
  int max_in_flight_ = 0;
};

/// Parameters, gradients and optimizer state of the stages on `rank`.
double StaticBytesOfRank(const Schedule& schedule, int rank, const std::vector<StageCost>& stages);

}  // namespace gpipe
