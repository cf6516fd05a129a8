// The wire under a lowered schedule: which messages each rank sends and receives, in what order
// it posts them, and a dry run of that order under NCCL's point-to-point rules. The executor
// walks the same WireProgram action by action (executor/stage_runner.cpp), so what the dry run
// proves is what runs.
//
// NCCL's rules, as ProcessGroupNCCL 2.11 applies them: each pair of ranks shares one communicator
// and one stream per process group, so the sends and receives a rank issues to one peer run in
// issue order, both directions in one queue; tags are ignored (the k-th send from a to b meets b's
// k-th receive from a); a send completes only once its receive is there. Two receives at the
// heads of the two queues of a pair, or two sends, wait for each other forever.
//
// The executor's design under these rules ("lanes"): it opens two process groups, one for
// messages to higher ranks and one for messages to lower ranks, so each queue carries one
// direction only, and a receiver posts its receives from a peer in exactly the order the peer
// sends (each rank derives the peer's order from the same schedule). Receives are posted one
// compute action ahead of the RECV that waits for them, so they overlap compute. The first step
// of a run also carries one shape header before the first message of each stage boundary and
// direction; a receive waits for its header before its buffer is posted, and no receive is posted
// ahead past a header.
#pragma once

#include <string>
#include <vector>

#include "core/schedule/schedule.h"
#include "core/status.h"

namespace gpipe {

enum class MessageKind : uint8_t { kActivation, kGradient };

/// One message between stages on different ranks: a stage's output activation (to from_stage + 1)
/// or the gradient of its input (to from_stage - 1), of one micro-batch; or, with `header`, the
/// shape header that precedes the first such message of (kind, from_stage) in a run.
struct Message {
  MessageKind kind = MessageKind::kActivation;
  int from_stage = 0;
  int microbatch = 0;
  bool header = false;

  int to_stage() const { return kind == MessageKind::kActivation ? from_stage + 1 : from_stage - 1; }
  friend bool operator==(const Message&, const Message&) = default;
  friend auto operator<=>(const Message&, const Message&) = default;
};

/// "activation of stage 1, micro-batch 3" / "shape header of stage 1's gradients".
std::string MessageToText(const Message& message);
/// The message a SEND_F/SEND_B or RECV_F/RECV_B action moves.
Message MessageOf(const Action& action);
/// A c10d tag for the message, the same for every micro-batch of (kind, from_stage, header): the
/// lanes keep messages in order, so no tag can collide whatever M is. REQUIRES from_stage < 2^28.
int MessageTag(const Message& message);
/// The message a tag names, micro-batch unknown (for errors).
std::string TagToText(int tag);

enum class WireOp : uint8_t {
  kPostRecv,    // start receiving `message` into a buffer of its known shape
  kRecvHeader,  // receive `message` (a header) and wait for it: the shape becomes known
  kWaitRecv,    // wait until `message` has arrived
  kCompute,     // run the action itself (F, B, I or W)
  kSendHeader,  // send the shape header `message`
  kSend,        // start sending `message`
};

struct WireStep {
  WireOp op = WireOp::kCompute;
  Message message;
  /// The rank on the other end (pipeline rank, as in Schedule::stage_rank); -1 for kCompute.
  int peer = -1;
  friend bool operator==(const WireStep&, const WireStep&) = default;
};

std::string WireStepToText(const WireStep& step);

/// For each rank, for each of its actions in order, the wire steps that action performs.
struct WireProgram {
  std::vector<std::vector<std::vector<WireStep>>> ranks;
};

enum class WirePosting {
  /// The executor's design: receives posted ahead, in the sender's order.
  kAheadInSenderOrder,
  /// The design before lanes: each receive posted ahead in the receiver's own action order.
  kAheadInOwnOrder,
};

/// The program every rank runs. `first_step`: the step that carries the shape headers.
/// REQUIRES: ValidateSchedule(schedule, kWithCommunication) is ok.
WireProgram BuildWireProgram(const Schedule& schedule, bool first_step,
                             WirePosting posting = WirePosting::kAheadInSenderOrder);

enum class NcclQueues {
  /// One queue per pair and direction (the executor's two process groups).
  kPerDirection,
  /// One queue per pair for both directions (a single process group).
  kSharedByPair,
};

/// Plays `program` under NCCL's rules: sends and receives queue per pair (and direction), a
/// queue's head completes only against the head of its peer's facing queue, a rank blocks on
/// kRecvHeader and kWaitRecv, and every rank waits for its sends at the end of the step.
/// Errors: "would deadlock on NCCL" with each stuck rank, what it waits for and the heads of its
/// queues; or "NCCL would deliver X where rank r expects Y" when the orders of a pair disagree.
Status NcclDryRun(const Schedule& schedule, const WireProgram& program, NcclQueues queues);

/// Both wire programs (first and later steps) of `schedule`, dry-run per direction, as the
/// executor runs them.
Status CheckWireOnNccl(const Schedule& schedule);

}  // namespace gpipe
