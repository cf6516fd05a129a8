// Checking a schedule before anything runs it. ValidateSchedule checks structure (every stage and
// micro-batch has its forward and backward exactly once, on the stage's rank, in a legal order,
// and, for lowered schedules, that every cross-rank hand-over has one send after its producer
// and one receive before its consumer). DryRun plays the schedule in unit-time lockstep, with
// sends that never block and receives that wait for their send, and reports a deadlock as the
// rank-by-action grid with the stuck cells marked.
#pragma once

#include "core/schedule/schedule.h"
#include "core/status.h"

namespace gpipe {

enum class Lowering { kComputeOnly, kWithCommunication };

Status ValidateSchedule(const Schedule& schedule, Lowering lowering);

/// REQUIRES: ValidateSchedule(schedule, ...) is ok.
Status DryRun(const Schedule& schedule);

/// Generate, lower, validate and dry-run: the schedule that the simulator and executor walk.
struct Plan;
Expected<Schedule> BuildSchedule(const Plan& plan);
/// The same for a schedule given from outside (e.g. PyTorch's CSV): its stages must sit on the
/// plan's ranks and it must have the plan's M; a compute-only one is lowered. Errors name the
/// stage or micro-batch; a deadlock shows the rank-by-action grid.
Expected<Schedule> BuildSchedule(const Plan& plan, const Schedule& given);

}  // namespace gpipe
