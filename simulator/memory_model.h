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

/// Parameters, gradients and optimizer state of the stages on `rank`.
double StaticBytesOfRank(const Schedule& schedule, int rank, const std::vector<StageCost>& stages);

}  // namespace gpipe
