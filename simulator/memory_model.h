// What each action does to its rank's memory. Every change happens at the start or the end of
// one of the rank's own actions, so a rank's peak depends only on its action list and the
// stages' byte counts, never on timing: the planner computes the same peak as the simulator
// without simulating.
//   step start:     + the first stage's input for each of its micro-batches (the executor copies
//                     them all when the step begins, as a pipeline scatters its batch)
//   RECV_F   posted: + the stage's input (the receive buffer, allocated where the executor posts
//                     the receive: ahead of the RECV, as ReceivesPostedAt says)
//   F        start: + the stash (activations, or only the input under remat), and the received
//                     input, or the first stage's, becomes part of it (- input)
//   RECV_B   posted: + the stage's output bytes (the incoming gradient's buffer, likewise)
//   F        start: + the forward workspace,   end: - it (what the forward allocates and frees)
//   B / I / W start: + its workspace (B's, I's, W's), end: - it (gradients and temporaries)
//   B / I    start: + one micro-batch of recomputed activations under remat
//   B        end:   - the stash, the recomputed activations and the gradient buffer
//   I        end:   - the gradient buffer;   W end: - the stash and recomputed activations
//   SEND_F/B        nothing: a message in flight belongs to the link; except where the stage's
//                     cost says sends are held (StageCost::sends_held, calibrated for Gloo): then
//   SEND_F   start: + the stage's output bytes,   SEND_B start: + the stage's input bytes, until
//                     the step ends (a Gloo send reports completion only when waited on, and the
//                     executor waits at the step's end; measured in docs/compare.md). A sent
//                     output that is the stash's own tensor (StageCost::sent_output_in_stash)
//                     costs nothing more until the stash lets go of it:
//   B / W    end:     + the stage's output bytes instead, until the step ends.
// Static bytes (parameters, gradients, optimizer state) are held throughout.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/schedule/schedule.h"
#include "simulator/cost_model.h"

namespace gpipe {

/// What an action does to a rank's memory in units of its stage's quantities: stashes
/// (stash_bytes each), recomputed activations (activation_bytes each), gradient buffers
/// (output_bytes each), input buffers (input_bytes each), sent tensors when held (outputs: from
/// the send, or from the stash's release when the stash holds them), what I leaves
/// for W (weight_pass_bytes each), and workspaces
/// (forward_workspace_bytes, backward_workspace_bytes, backward_input_workspace_bytes and
/// backward_weight_workspace_bytes each). The byte effect is the dot product;
/// the planner keeps the counts to price many stages without walking the list again.
struct MemoryCounts {
  int stash = 0;
  int recompute = 0;
  int gradient_buffers = 0;
  int input_buffers = 0;
  /// Sent outputs (SEND_F) and sent input gradients (SEND_B), priced only when sends are held.
  int sent_outputs = 0;
  int sent_inputs = 0;
  /// Sent outputs that the stash held until their B (or W) ended, held by the send alone from
  /// there (priced only when sends are held and the stage's output is in its stash).
  int sent_outputs_unstashed = 0;
  /// Micro-batches between their I and their W: what I captured for W (weight_pass_bytes).
  int weight_pending = 0;
  /// Forward, full backward, I and W workspaces (transient: each action frees its own at its end).
  int forward_workspaces = 0;
  int backward_workspaces = 0;
  int input_workspaces = 0;
  int weight_workspaces = 0;
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
/// gradient of its output (a RECV_B precedes its backwards), and so it sends its output there.
MemoryEffect EffectOf(const Action& action, const StageCost& stage, bool received_input, bool received_gradient);

/// How many micro-batch inputs of the first stage `rank` holds when the step starts: one per
/// forward of stage 0 it runs (0 on the other ranks), input_bytes each, until that forward.
int StepStartInputs(const Schedule& schedule, int rank);
/// Their bytes: what the rank holds beyond its model state when the step starts.
double StepStartInputBytes(const Schedule& schedule, int rank, const std::vector<StageCost>& stages);

/// The effect of `action` in `schedule`, with the receive flags read off the stage layout.
MemoryEffect EffectOf(const Schedule& schedule, const Action& action, const StageCost& stage);

struct MemoryPeak {
  /// Model state: parameters, gradients and optimizer state of the rank's stages.
  double static_bytes = 0;
  double peak_bytes = 0;
  /// At the peak: activations (stashed and recomputed) and communication buffers.
  double activation_bytes = 0;
  double buffer_bytes = 0;
  int max_in_flight = 0;
};

/// Where the executor allocates each receive's buffer: it posts a receive ahead of its RECV
/// action (the wire program of a step after the first, core/schedule/wire.h, which posts them
/// earliest: while the compute action before runs, and in the sender's order), and the buffer
/// exists from its posting. posting[r] lists, in rank r's action order, pairs (i, j): its RECV
/// action j's buffer is allocated as its action i starts (i <= j; i == j when the receive is
/// posted only as its RECV is reached). Built once per schedule.
/// REQUIRES: ValidateSchedule(schedule, kWithCommunication) is ok.
using ReceivePosting = std::vector<std::vector<std::pair<size_t, size_t>>>;
ReceivePosting ReceivesPostedAt(const Schedule& schedule);

/// The one rule of every walk over a rank's actions (RankMemoryPeak, MemoryFrontier, the
/// simulator): as action i starts, calls `allocate(recv)` for each RECV whose buffer is posted
/// then (a RECV's start change belongs to its posting, never to the RECV itself). `rank_posting`
/// is the rank's entry of ReceivesPostedAt; `next` walks it and must start at 0; i must not
/// decrease between calls.
template <typename Allocate>
void AllocatePostedReceives(const std::vector<Action>& actions, const std::vector<std::pair<size_t, size_t>>& rank_posting,
                            size_t& next, size_t i, Allocate&& allocate) {
  for (; next < rank_posting.size() && rank_posting[next].first == i; ++next) allocate(actions[rank_posting[next].second]);
}

/// The peak over rank `rank`'s actions: apply each action's start change, then its end change.
/// `posting`: ReceivesPostedAt(schedule), or null to build it here.
MemoryPeak RankMemoryPeak(const Schedule& schedule, int rank, const std::vector<StageCost>& stages,
                          const ReceivePosting* posting = nullptr);
/// The same for a cost model's stages, the rank's model state held once where its stages share a
/// tied parameter (CostModel::shared_static_bytes). What the simulator reports.
MemoryPeak RankMemoryPeak(const Schedule& schedule, int rank, const CostModel& costs,
                          const ReceivePosting* posting = nullptr);

/// A rank's peak as a function of its stages' bytes and remat: the walk of RankMemoryPeak done
/// once with counts instead of bytes, every stage counted as if it rematerialized (a stage that
/// does not prices its recomputed activations at zero, so one walk serves every remat choice).
/// Peak = static + the largest dot product of a count vector met on the walk with the stages'
/// byte counts. The first few prices replay the walk's changes; after that
/// the vectors that can be the largest (none below another in every count) are kept and priced
/// instead, so that a frontier priced only a few times (a long interleaved rank) costs little
/// and one priced thousands of times (a search's stage) costs a handful of vectors each.
/// Not thread-safe: pricing may build the set.
class MemoryFrontier {
 public:
  /// `posting`: ReceivesPostedAt(schedule), or null to build it here.
  MemoryFrontier(const Schedule& schedule, int rank, const ReceivePosting* posting = nullptr);

  /// The stages on the rank, in stage order.
  const std::vector<int>& stages() const { return stages_; }
  int max_in_flight() const { return max_in_flight_; }
  /// Activations and buffers at the peak, for `costs[i]` the i-th stage on the rank, with its
  /// remat (static bytes excluded).
  double PeakDynamicBytes(const std::vector<const StageCost*>& costs) const { return PeakDynamicBytes(costs.data()); }
  /// The same, `costs` pointing at one pointer per stage on the rank.
  double PeakDynamicBytes(const StageCost* const* costs) const;
  /// A lower bound on PeakDynamicBytes when each stage may cost either of two ways (the
  /// planner's stage kept and recomputed, or any way that holds at least as much as one of them
  /// at every moment): priced by stashes, recomputed activations and input buffers only, each
  /// stage's cheaper way at each moment. A null pair (a stage not placed yet) counts nothing.
  /// Quick: few moments are maximal in those three counts.
  double LeastStashPeakBytes(const StageCost* const* kept, const StageCost* const* recomputed) const;
  /// The number of count vectors that can be the largest (builds the set), with workspaces
  /// counted or not.
  size_t size(bool workspaces = true) const;
  /// Whether pricing (with workspaces or not) reads the set of maximal vectors; false while it
  /// replays the walk: priced too few times yet, or the set too large to pay (a long interleaved
  /// rank). Both ways give the same bits.
  bool keeps_vectors(bool workspaces) const { return (workspaces ? with_workspaces_ : without_workspaces_).built; }

 private:
  // One change of one count (index: stride x slot + which count, in MemoryCounts' order);
  // `candidate`: the counts right after it may be the peak (an action's start grew them, and
  // some count falls before the next such point).
  struct Change {
    int32_t index;
    int16_t delta;
    bool candidate;
  };
  // The walk, and once priced often its maximal vectors. Two are kept: one with the workspace
  // counts, and one without, used while every stage's workspaces are zero (profiles that do not
  // measure them), whose walk is shorter and whose set is smaller.
  struct Walk {
    int stride = 0;    // counts per stage: all of MemoryCounts', or those before the workspaces
    size_t width = 0;  // stride x stages on the rank
    std::vector<Change> changes;
    mutable int walks = 0;
    mutable bool built = false;
    mutable bool too_many = false;  // pricing gave up building the set (kKeptAtMost): it walks
    mutable std::vector<int> vectors;  // vectors of `width` counts, once built
  };
  void Record(const Schedule& schedule, int rank, const std::vector<int>& slot,
              const std::vector<std::pair<size_t, size_t>>& posted, bool workspaces, Walk& walk);
  // Builds the set of maximal vectors; unless `any_size`, gives up once it is too large to pay.
  void BuildVectors(const Walk& walk, bool any_size) const;
  // The walk's moments projected on each stage's stash, recompute and input-buffer counts, the
  // maximal ones (built on first use: three counts a stage keep few, even where the full
  // vectors are too many to keep).
  void BuildStashVectors() const;

  std::vector<int> stages_;
  Walk with_workspaces_, without_workspaces_;
  int max_in_flight_ = 0;
  mutable std::vector<double> price_;  // scratch: bytes per count
  mutable std::vector<uint32_t> priced_;  // scratch: the counts whose price is not zero
  mutable bool stash_vectors_built_ = false;
  mutable std::vector<int> stash_vectors_;  // 3 counts per stage each
  mutable std::vector<int> counts_;    // scratch: the walk's counts
};

/// Parameters, gradients and optimizer state of the stages on `rank` (their static_bytes summed).
double StaticBytesOfRank(const Schedule& schedule, int rank, const std::vector<StageCost>& stages);
/// The same less CostModel::shared_static_bytes: a tied parameter held once per rank.
double StaticBytesOfRank(const Schedule& schedule, int rank, const CostModel& costs);

}  // namespace gpipe
