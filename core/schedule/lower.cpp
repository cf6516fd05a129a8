#include "core/schedule/lower.h"

#include <cassert>

namespace gpipe {

Schedule AddCommunication(const Schedule& schedule) {
  Schedule lowered = schedule;
  const int stages = schedule.num_stages();
  const auto crosses = [&](int from, int to) {
    return to >= 0 && to < stages && schedule.stage_rank[from] != schedule.stage_rank[to];
  };
  for (int r = 0; r < schedule.num_ranks(); ++r) {
    std::vector<Action> actions;
    actions.reserve(schedule.ranks[r].size() * 2);
    for (const Action& a : schedule.ranks[r]) {
      assert(IsCompute(a.op));
      const bool backward = a.op == Op::kBackward || a.op == Op::kBackwardInput;
      if (a.op == Op::kForward && crosses(a.stage, a.stage - 1)) {
        actions.push_back({Op::kRecvActivation, a.stage, a.microbatch});
      }
      if (backward && crosses(a.stage, a.stage + 1)) {
        actions.push_back({Op::kRecvGradient, a.stage, a.microbatch});
      }
      actions.push_back(a);
      if (a.op == Op::kForward && crosses(a.stage, a.stage + 1)) {
        actions.push_back({Op::kSendActivation, a.stage, a.microbatch});
      }
      if (backward && crosses(a.stage, a.stage - 1)) {
        actions.push_back({Op::kSendGradient, a.stage, a.microbatch});
      }
    }
    lowered.ranks[r] = std::move(actions);
  }
  return lowered;
}

Schedule ComputeOnly(const Schedule& schedule) {
  Schedule compute = schedule;
  for (auto& actions : compute.ranks) {
    std::erase_if(actions, [](const Action& a) { return !IsCompute(a.op); });
  }
  return compute;
}

}  // namespace gpipe
