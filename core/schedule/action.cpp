#include "core/schedule/action.h"

#include <array>
#include <cassert>
#include <cctype>

namespace gpipe {
namespace {

struct OpInfo {
  Op op;
  std::string_view code;
  std::string_view name;
};

constexpr std::array<OpInfo, kNumOps> kOps = {{
    {Op::kForward, "F", "forward"},
    {Op::kBackward, "B", "backward"},
    {Op::kBackwardInput, "I", "backward-input"},
    {Op::kBackwardWeight, "W", "backward-weight"},
    {Op::kSendActivation, "SEND_F", "send-activation"},
    {Op::kRecvActivation, "RECV_F", "recv-activation"},
    {Op::kSendGradient, "SEND_B", "send-gradient"},
    {Op::kRecvGradient, "RECV_B", "recv-gradient"},
}};

// Parses a canonical non-negative decimal (no sign, no leading zeros); -1 when it is not one.
int ParseIndex(std::string_view digits) {
  if (digits.empty() || digits.size() > 9) return -1;
  if (digits.size() > 1 && digits[0] == '0') return -1;
  int value = 0;
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
    value = value * 10 + (c - '0');
  }
  return value;
}

}  // namespace

std::string_view OpCode(Op op) { return kOps[static_cast<size_t>(op)].code; }
std::string_view OpName(Op op) { return kOps[static_cast<size_t>(op)].name; }

bool IsCompute(Op op) {
  return op == Op::kForward || op == Op::kBackward || op == Op::kBackwardInput ||
         op == Op::kBackwardWeight;
}
bool IsSend(Op op) { return op == Op::kSendActivation || op == Op::kSendGradient; }
bool IsRecv(Op op) { return op == Op::kRecvActivation || op == Op::kRecvGradient; }

int PeerStage(const Action& a) {
  assert(IsSend(a.op) || IsRecv(a.op));
  const bool toward_first = a.op == Op::kSendGradient || a.op == Op::kRecvActivation;
  return toward_first ? a.stage - 1 : a.stage + 1;
}

std::string ActionToText(const Action& action) {
  return std::to_string(action.stage) + std::string(OpCode(action.op)) +
         std::to_string(action.microbatch);
}

Expected<Action> ActionFromText(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return Status::Invalid("\"" + std::string(text) + "\" is not an action: " + why +
                           " (expected <stage><op><microbatch> such as 2F0, 1SEND_B3; ops: "
                           "F B I W SEND_F RECV_F SEND_B RECV_B)");
  };
  size_t stage_end = 0;
  while (stage_end < text.size() && std::isdigit(static_cast<unsigned char>(text[stage_end]))) ++stage_end;
  size_t mb_begin = text.size();
  while (mb_begin > stage_end && std::isdigit(static_cast<unsigned char>(text[mb_begin - 1]))) --mb_begin;
  const int stage = ParseIndex(text.substr(0, stage_end));
  if (stage < 0) return bad("it must start with a stage number");
  const int microbatch = ParseIndex(text.substr(mb_begin));
  if (microbatch < 0) return bad("it must end with a micro-batch number");
  const std::string_view code = text.substr(stage_end, mb_begin - stage_end);
  for (const OpInfo& info : kOps) {
    if (info.code == code) return Action{info.op, stage, microbatch};
  }
  return bad("unknown op \"" + std::string(code) + "\"");
}

}  // namespace gpipe
