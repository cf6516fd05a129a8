#include "core/schedule/validate.h"

#include <string>
#include <vector>

#include "core/plan.h"
#include "core/schedule/generators.h"
#include "core/schedule/lower.h"

namespace gpipe {
namespace {

// Position of every (op, stage, micro-batch) in its rank's list, and how often it occurs.
class ActionIndex {
 public:
  explicit ActionIndex(const Schedule& schedule)
      : stages_(schedule.num_stages()), microbatches_(schedule.num_microbatches),
        position_(static_cast<size_t>(kNumOps) * stages_ * microbatches_, -1),
        count_(position_.size(), 0) {}

  size_t Key(Op op, int stage, int microbatch) const {
    return (static_cast<size_t>(op) * stages_ + stage) * microbatches_ + microbatch;
  }
  void Add(const Action& a, int position) {
    const size_t key = Key(a.op, a.stage, a.microbatch);
    position_[key] = position;
    ++count_[key];
  }
  int Count(Op op, int stage, int microbatch) const { return count_[Key(op, stage, microbatch)]; }
  int Position(Op op, int stage, int microbatch) const { return position_[Key(op, stage, microbatch)]; }

 private:
  int stages_;
  int microbatches_;
  std::vector<int> position_;
  std::vector<int> count_;
};

std::string Name(Op op, int stage, int microbatch) { return ActionToText({op, stage, microbatch}); }

Status CheckOnce(const ActionIndex& index, Op op, int s, int i, const char* why) {
  const int count = index.Count(op, s, i);
  if (count == 1) return Status::Ok();
  return Status::Invalid("schedule: " + Name(op, s, i) + (count == 0 ? " is missing" : " appears " + std::to_string(count) + " times") + "; " + why);
}

Status CheckBefore(const ActionIndex& index, Op first, Op then, int s, int i) {
  if (index.Position(first, s, i) < index.Position(then, s, i)) return Status::Ok();
  return Status::Invalid("schedule: " + Name(first, s, i) + " must come before " + Name(then, s, i) +
                         " on its rank");
}

Status CheckCommunication(const Schedule& schedule, const ActionIndex& index, int s, int i, Op backward) {
  const int stages = schedule.num_stages();
  const bool to_next = s + 1 < stages && schedule.stage_rank[s] != schedule.stage_rank[s + 1];
  const bool from_prev = s > 0 && schedule.stage_rank[s] != schedule.stage_rank[s - 1];
  struct Need {
    Op op;
    bool required;
    Op anchor;
    bool after_anchor;
  };
  const Need needs[] = {
      {Op::kSendActivation, to_next, Op::kForward, true},
      {Op::kRecvActivation, from_prev, Op::kForward, false},
      {Op::kSendGradient, from_prev, backward, true},
      {Op::kRecvGradient, to_next, backward, false},
  };
  for (const Need& need : needs) {
    const int count = index.Count(need.op, s, i);
    if (!need.required) {
      if (count != 0) {
        return Status::Invalid("schedule: " + Name(need.op, s, i) +
                               " moves a tensor between stages on the same rank (or past the pipeline's end); remove it");
      }
      continue;
    }
    GPIPE_RETURN_IF_ERROR(CheckOnce(index, need.op, s, i, "stages on different ranks exchange every micro-batch (lower the schedule with AddCommunication)"));
    if (need.after_anchor) {
      GPIPE_RETURN_IF_ERROR(CheckBefore(index, need.anchor, need.op, s, i));
    } else {
      GPIPE_RETURN_IF_ERROR(CheckBefore(index, need.op, need.anchor, s, i));
    }
  }
  return Status::Ok();
}

// The action `a` depends on, in the sense that it may start only after that one finished;
// false when it depends on nothing across ranks or earlier in the same list.
bool Dependency(const Schedule& schedule, const ActionIndex& index, const Action& a, Action* dep) {
  const int s = a.stage, i = a.microbatch;
  const auto backward_of = [&](int stage) {
    return index.Count(Op::kBackward, stage, i) > 0 ? Op::kBackward : Op::kBackwardInput;
  };
  switch (a.op) {
    case Op::kForward:
      if (s == 0) return false;
      *dep = {Op::kForward, s - 1, i};
      return true;
    case Op::kBackward:
    case Op::kBackwardInput:
      if (s + 1 == schedule.num_stages()) {
        *dep = {Op::kForward, s, i};
      } else {
        *dep = {backward_of(s + 1), s + 1, i};
      }
      return true;
    case Op::kBackwardWeight:
      *dep = {Op::kBackwardInput, s, i};
      return true;
    case Op::kSendActivation:
    case Op::kSendGradient:
      return false;
    case Op::kRecvActivation:
      *dep = {Op::kSendActivation, s - 1, i};
      return true;
    case Op::kRecvGradient:
      *dep = {Op::kSendGradient, s + 1, i};
      return true;
  }
  return false;
}

}  // namespace

Status ValidateSchedule(const Schedule& schedule, Lowering lowering) {
  const int ranks = schedule.num_ranks();
  const int stages = schedule.num_stages();
  const int microbatches = schedule.num_microbatches;
  if (ranks < 1 || stages < 1 || microbatches < 1) {
    return Status::Invalid("schedule: needs at least one rank, stage and micro-batch; got " +
                           std::to_string(ranks) + ", " + std::to_string(stages) + ", " +
                           std::to_string(microbatches));
  }
  for (int s = 0; s < stages; ++s) {
    if (schedule.stage_rank[s] < 0 || schedule.stage_rank[s] >= ranks) {
      return Status::Invalid("schedule: stage " + std::to_string(s) + " is on rank " +
                             std::to_string(schedule.stage_rank[s]) + ", outside 0.." + std::to_string(ranks - 1));
    }
  }
  ActionIndex index(schedule);
  for (int r = 0; r < ranks; ++r) {
    for (size_t p = 0; p < schedule.ranks[r].size(); ++p) {
      const Action& a = schedule.ranks[r][p];
      const auto where = [&] {
        return "schedule: rank " + std::to_string(r) + " action " + std::to_string(p) + " (" + ActionToText(a) + ")";
      };
      if (a.stage < 0 || a.stage >= stages) return Status::Invalid(where() + ": no stage " + std::to_string(a.stage));
      if (a.microbatch < 0 || a.microbatch >= microbatches) {
        return Status::Invalid(where() + ": no micro-batch " + std::to_string(a.microbatch) + " (M = " +
                               std::to_string(microbatches) + ")");
      }
      if (schedule.stage_rank[a.stage] != r) {
        return Status::Invalid(where() + ": stage " + std::to_string(a.stage) + " runs on rank " +
                               std::to_string(schedule.stage_rank[a.stage]));
      }
      if (lowering == Lowering::kComputeOnly && !IsCompute(a.op)) {
        return Status::Invalid(where() + ": a compute-only schedule has no sends or receives");
      }
      index.Add(a, static_cast<int>(p));
    }
  }
  for (int s = 0; s < stages; ++s) {
    for (int i = 0; i < microbatches; ++i) {
      GPIPE_RETURN_IF_ERROR(CheckOnce(index, Op::kForward, s, i, "every stage runs every micro-batch forward once"));
      if (index.Count(Op::kBackward, s, i) + index.Count(Op::kBackwardInput, s, i) +
              index.Count(Op::kBackwardWeight, s, i) == 0) {
        return Status::Invalid("schedule: " + Name(Op::kBackward, s, i) + " is missing (or its split form " +
                               Name(Op::kBackwardInput, s, i) + " then " + Name(Op::kBackwardWeight, s, i) +
                               "); every stage runs every micro-batch backward once");
      }
      const bool split = index.Count(Op::kBackward, s, i) == 0;
      Op backward = Op::kBackward;
      if (split) {
        GPIPE_RETURN_IF_ERROR(CheckOnce(index, Op::kBackwardInput, s, i, "a backward is either B, or I followed by W"));
        GPIPE_RETURN_IF_ERROR(CheckOnce(index, Op::kBackwardWeight, s, i, "a backward split into I needs its W"));
        GPIPE_RETURN_IF_ERROR(CheckBefore(index, Op::kBackwardInput, Op::kBackwardWeight, s, i));
        backward = Op::kBackwardInput;
      } else {
        GPIPE_RETURN_IF_ERROR(CheckOnce(index, Op::kBackward, s, i, "every stage runs every micro-batch backward once"));
        if (index.Count(Op::kBackwardInput, s, i) + index.Count(Op::kBackwardWeight, s, i) > 0) {
          return Status::Invalid("schedule: " + Name(Op::kBackward, s, i) + " and a split backward (I/W) both appear; use one form");
        }
      }
      GPIPE_RETURN_IF_ERROR(CheckBefore(index, Op::kForward, backward, s, i));
      const bool same_rank_next = s + 1 < stages && schedule.stage_rank[s + 1] == schedule.stage_rank[s];
      if (same_rank_next && index.Count(Op::kForward, s + 1, i) == 1 &&
          index.Position(Op::kForward, s, i) > index.Position(Op::kForward, s + 1, i)) {
        return Status::Invalid("schedule: " + Name(Op::kForward, s, i) + " must come before " +
                               Name(Op::kForward, s + 1, i) + " on their shared rank");
      }
      if (lowering == Lowering::kWithCommunication) {
        GPIPE_RETURN_IF_ERROR(CheckCommunication(schedule, index, s, i, backward));
      }
    }
  }
  return Status::Ok();
}

Status DryRun(const Schedule& schedule) {
  const int ranks = schedule.num_ranks();
  ActionIndex index(schedule);
  for (int r = 0; r < ranks; ++r) {
    for (size_t p = 0; p < schedule.ranks[r].size(); ++p) index.Add(schedule.ranks[r][p], static_cast<int>(p));
  }
  std::vector<char> done(static_cast<size_t>(kNumOps) * schedule.num_stages() * schedule.num_microbatches, 0);
  std::vector<size_t> next(ranks, 0);
  size_t remaining = schedule.num_actions();
  std::vector<size_t> finished_now;
  while (remaining > 0) {
    finished_now.clear();
    for (int r = 0; r < ranks; ++r) {
      if (next[r] >= schedule.ranks[r].size()) continue;
      const Action& a = schedule.ranks[r][next[r]];
      Action dep;
      if (Dependency(schedule, index, a, &dep) && !done[index.Key(dep.op, dep.stage, dep.microbatch)]) continue;
      finished_now.push_back(index.Key(a.op, a.stage, a.microbatch));
      ++next[r];
    }
    if (finished_now.empty()) {
      std::string why = "deadlock: no rank can take its next step";
      for (int r = 0; r < ranks; ++r) {
        if (next[r] >= schedule.ranks[r].size()) continue;
        const Action& a = schedule.ranks[r][next[r]];
        Action dep;
        Dependency(schedule, index, a, &dep);
        why += "\n  rank " + std::to_string(r) + " waits at " + ActionToText(a) + " for " + ActionToText(dep) +
               " (rank " + std::to_string(schedule.stage_rank[dep.stage]) + ")";
      }
      return Status::Invalid("schedule:\n" + RenderScheduleGrid(schedule, next, why));
    }
    for (size_t key : finished_now) done[key] = 1;
    remaining -= finished_now.size();
  }
  return Status::Ok();
}

Expected<Schedule> BuildSchedule(const Plan& plan) {
  Expected<Schedule> compute =
      GenerateSchedule(plan.schedule, plan.num_ranks(), plan.num_stages(), plan.microbatches);
  if (!compute.ok()) return compute.status();
  return BuildSchedule(plan, *compute);
}

Expected<Schedule> BuildSchedule(const Plan& plan, const Schedule& given) {
  if (given.num_ranks() != plan.num_ranks()) {
    return Status::Invalid("schedule: has " + std::to_string(given.num_ranks()) + " ranks, the plan " +
                           std::to_string(plan.num_ranks()));
  }
  if (given.num_microbatches != plan.microbatches) {
    return Status::Invalid("schedule: runs " + std::to_string(given.num_microbatches) + " micro-batches, the plan " +
                           std::to_string(plan.microbatches));
  }
  const std::vector<int> ranks = plan.StageRanks();
  if (given.num_stages() != plan.num_stages()) {
    return Status::Invalid("schedule: has " + std::to_string(given.num_stages()) + " stages, the plan " +
                           std::to_string(plan.num_stages()));
  }
  for (int s = 0; s < plan.num_stages(); ++s) {
    if (given.stage_rank[s] != ranks[s]) {
      return Status::Invalid("schedule: stage " + std::to_string(s) + " runs on rank " +
                             std::to_string(given.stage_rank[s]) + ", the plan puts it on rank " + std::to_string(ranks[s]));
    }
  }
  bool lowered = false;
  for (const auto& actions : given.ranks) {
    for (const Action& a : actions) lowered = lowered || !IsCompute(a.op);
  }
  if (!lowered) GPIPE_RETURN_IF_ERROR(ValidateSchedule(given, Lowering::kComputeOnly));
  const Schedule schedule = lowered ? given : AddCommunication(given);
  GPIPE_RETURN_IF_ERROR(ValidateSchedule(schedule, Lowering::kWithCommunication));
  GPIPE_RETURN_IF_ERROR(DryRun(schedule));
  return schedule;
}

}  // namespace gpipe
