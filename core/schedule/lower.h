// Lowering: Schedule -> Schedule passes that add what a compute-only schedule leaves implicit.
#pragma once

#include "core/schedule/schedule.h"

namespace gpipe {

/// Adds the communication between stages on different ranks:
///   RECV_F right before a forward whose previous stage is elsewhere, SEND_F right after a
///   forward whose next stage is elsewhere; RECV_B right before a backward (B or I) whose next
///   stage is elsewhere, SEND_B right after a backward whose previous stage is elsewhere.
/// Stages on the same rank hand tensors over in memory and get no actions.
/// REQUIRES: `schedule` has no send or receive actions yet.
Schedule AddCommunication(const Schedule& schedule);

/// The same schedule with each rank's receives from every peer posted in the order that peer
/// sends: a receive that the rank's order reaches before messages the peer sends earlier brings
/// their receives forward to just before it. For runtimes that match messages untagged, in
/// posting order (PyTorch's compute_comms CSV over Gloo or NCCL), and post a receive without
/// waiting for it (the wait is at the compute that reads it): the compute order is unchanged.
/// Our executor matches by tag and needs none of this (receive buffers posted earlier are held
/// longer). REQUIRES: `schedule` is lowered (AddCommunication) and valid.
Schedule PostReceivesInSendOrder(const Schedule& schedule);

/// The compute actions alone, in order: the inverse of AddCommunication.
Schedule ComputeOnly(const Schedule& schedule);

}  // namespace gpipe
