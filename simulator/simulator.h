// The discrete-event simulator: walks a lowered Schedule over ranks and links and predicts one
// training step. Each rank runs its actions in order, one at a time:
//   - a compute action (F, B, I, W) occupies the rank for its cost; a remat stage recomputes its
//     forward right before each backward (B, or I in split schedules);
//   - a send occupies the rank for the calibrated send overhead (none by default), then its
//     link carries messages one after another, each taking bytes/bandwidth on the wire and
//     arriving latency_ms later, overlapping compute;
//   - a receive waits until its message has arrived.
// With data-parallel replicas, each rank then all-reduces its gradients (CostModel::allreduce_ms),
// then spends its calibrated tail (optimizer step and bookkeeping; none by default), and the
// step ends when the last rank is done.
// Memory per rank follows memory_model.h: every change happens at the start or end of one of the
// rank's actions, so the peak does not depend on timing.
#pragma once

#include <cstdint>
#include <vector>

#include "core/schedule/schedule.h"
#include "core/status.h"
#include "simulator/cost_model.h"

namespace gpipe {

/// One action as it happened: a compute ran over [start, end); a receive waited over
/// [start, end); a send was issued at start == end.
struct ActionTiming {
  int rank = 0;
  Action action;
  double start_ms = 0;
  double end_ms = 0;
  /// The recomputed forward at the head of a remat backward: [start, start + recompute_ms).
  double recompute_ms = 0;
};

/// One message on a link: on the wire over [start, wire_end), arrived at arrival.
struct Transfer {
  int from_rank = 0;
  int to_rank = 0;
  Action send;
  double bytes = 0;
  double start_ms = 0;
  double wire_end_ms = 0;
  double arrival_ms = 0;
};

struct MemorySample {
  double time_ms = 0;
  double bytes = 0;
};

struct RankResult {
  /// Time spent computing (F, B, I, W, recompute).
  double busy_ms = 0;
  /// When the rank's last action ended.
  double end_ms = 0;
  /// Time its receives waited for their messages.
  double wait_ms = 0;
  /// Model state: parameters, their gradients and the optimizer state (held all step).
  double static_bytes = 0;
  double peak_memory_bytes = 0;
  /// What was live at the peak, beyond static_bytes: stashed activations (with any recomputed
  /// ones) and communication buffers.
  double peak_activation_bytes = 0;
  double peak_buffer_bytes = 0;
  /// Most micro-batches whose activations were stashed at once (over all the rank's stages).
  int max_in_flight = 0;
  /// Memory over time (only when timelines are recorded).
  std::vector<MemorySample> memory;
};

struct SimResult {
  double step_time_ms = 0;
  /// The pipeline bubble (simulator/bubble.h): waiting and drain over the pipeline's rank-time;
  /// 0 for one rank.
  double bubble_fraction = 0;
  double throughput_samples_per_s = 0;
  std::vector<RankResult> ranks;
  /// Timelines (only when recorded): every action, every message.
  std::vector<ActionTiming> actions;
  std::vector<Transfer> transfers;
  size_t num_actions = 0;
};

struct SimOptions {
  /// Keep per-action timings, transfers and memory samples (for traces and pictures).
  bool record_timeline = true;
};

/// REQUIRES: ValidateSchedule(schedule, kWithCommunication) and DryRun(schedule) are ok, and
/// `costs` has one StageCost per stage and links for every rank.
Expected<SimResult> Simulate(const Schedule& schedule, const CostModel& costs, const SimOptions& options = {});

/// A plan's step: its schedule (BuildSchedule) under its costs (BuildCostModel), simulated.
Expected<SimResult> SimulatePlan(const Plan& plan, const SimOptions& options = {});

}  // namespace gpipe
