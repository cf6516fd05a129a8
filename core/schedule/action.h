// The unit of a schedule: one action of one stage on one micro-batch, e.g. "2F0" (stage 2,
// forward, micro-batch 0). The text form prints and parses back exactly:
//   <stage><op><microbatch>, op one of F B I W SEND_F RECV_F SEND_B RECV_B.
// F forward; B full backward; I backward for the input gradient only and W the weight gradient
// (zero-bubble schedules split B into I then W). SEND_F/RECV_F move a stage's output activation
// to the next stage (SEND_F is on the sender's stage, RECV_F on the receiver's); SEND_B/RECV_B move
// the gradient of a stage's input back to the stage before (SEND_B on the sender, RECV_B on the
// receiver).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace gpipe {

enum class Op : uint8_t {
  kForward,
  kBackward,
  kBackwardInput,
  kBackwardWeight,
  kSendActivation,
  kRecvActivation,
  kSendGradient,
  kRecvGradient,
};
inline constexpr int kNumOps = 8;

/// "F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B".
std::string_view OpCode(Op op);
/// A readable name: "forward", "backward-input", "send-activation", ...
std::string_view OpName(Op op);
bool IsCompute(Op op);
bool IsSend(Op op);
bool IsRecv(Op op);

struct Action {
  Op op = Op::kForward;
  int stage = 0;
  int microbatch = 0;

  friend bool operator==(const Action&, const Action&) = default;
};

/// The stage at the other end of a hand-over: a SEND_F's receiver (stage + 1), a SEND_B's
/// (stage - 1), a RECV_F's sender (stage - 1), a RECV_B's (stage + 1). Which rank that stage is on
/// is the schedule's stage_rank. REQUIRES: IsSend(a.op) || IsRecv(a.op).
int PeerStage(const Action& a);

/// "2F0".
std::string ActionToText(const Action& action);
/// The exact inverse of ActionToText; anything else is an error naming the text.
Expected<Action> ActionFromText(std::string_view text);

}  // namespace gpipe
