#include "core/schedule/generators.h"

#include <algorithm>
#include <cassert>
#include <string>

#include "core/schedule/placement.h"

namespace gpipe {
namespace {

Schedule Empty(ScheduleKind kind, int ranks, int stages, int microbatches) {
  Schedule schedule;
  schedule.num_microbatches = microbatches;
  schedule.ranks.resize(ranks);
  schedule.stage_rank = PlaceStages(kind, ranks, stages);
  return schedule;
}

// One rank of PyTorch's looped schedules (_get_1f1b_rank_ops with the warm-up of
// _get_warmup_ops and the stage indices of ScheduleInterleaved1F1B / ScheduleInterleavedZeroBubble),
// without its idle slots. The k-th forward runs chunk (k / R) mod v, R micro-batches per round;
// the k-th backward sweeps the chunks in reverse from the end of the warm-up. Each stage counts its
// own micro-batches. Zero bubble: I in B's place, and from the rank's (r+1)-th I on, each I is
// followed by the W of the oldest backward still without one.
std::vector<Action> LoopedRank(int ranks, int chunks, int microbatches, int rank, bool zero_bubble) {
  const int per_round = MicrobatchesPerRound(ranks, microbatches);
  const int total = chunks * microbatches;
  const int warmup = std::min((chunks - 1) * per_round + (zero_bubble ? 1 : 2) * (ranks - 1 - rank), total);
  const auto forward_stage = [&](int k) { return ((k / per_round) % chunks) * ranks + rank; };
  const auto backward_stage = [&](int k) { return (chunks - 1 - ((k - warmup) / per_round) % chunks) * ranks + rank; };
  std::vector<int> forwards(ranks * chunks, 0), backwards(ranks * chunks, 0), weights(ranks * chunks, 0);
  std::vector<int> backward_steps;
  size_t weights_done = 0;
  std::vector<Action> actions;
  const auto forward = [&](int k) {
    const int stage = forward_stage(k);
    actions.push_back({Op::kForward, stage, forwards[stage]++});
  };
  const auto weight = [&] {
    const int stage = backward_stage(backward_steps[weights_done++]);
    actions.push_back({Op::kBackwardWeight, stage, weights[stage]++});
  };
  const auto backward = [&](int k) {
    const int stage = backward_stage(k);
    actions.push_back({zero_bubble ? Op::kBackwardInput : Op::kBackward, stage, backwards[stage]++});
    backward_steps.push_back(k);
    if (zero_bubble && k - warmup >= rank) weight();
  };
  for (int k = 0; k < total + warmup; ++k) {
    if (k < total) forward(k);
    if (k >= warmup) backward(k);
  }
  while (zero_bubble && weights_done < backward_steps.size()) weight();
  return actions;
}

// One rank of PyTorch's ScheduleZBVZeroBubble (the ZB-V of Qi et al. 2024, section 6): chunk 0 is
// stage r, chunk 1 stage 2K-1-r. It plans max(2K-1, M) micro-batches and drops those past M.
std::vector<Action> ZbVRank(int ranks, int microbatches, int rank) {
  const int planned = std::max(2 * ranks - 1, microbatches);
  const int stage[2] = {rank, 2 * ranks - 1 - rank};
  std::vector<Action> actions;
  const auto push = [&](int chunk, Op op, int microbatch) {
    if (microbatch < microbatches) actions.push_back({op, stage[chunk], microbatch});
  };
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  const auto backward_and_weight = [&](int chunk, int& b) {
    push(chunk, Op::kBackwardInput, b);
    push(chunk, Op::kBackwardWeight, b);
    ++b;
  };
  for (int i = 0; i < 2 * (ranks - rank) - 1; ++i) push(0, Op::kForward, f0++);
  for (int i = 0; i < rank; ++i) {
    push(1, Op::kForward, f1++);
    push(0, Op::kForward, f0++);
  }
  for (int i = 0; i < ranks - rank; ++i) {
    push(1, Op::kForward, f1++);
    backward_and_weight(1, b1);
  }
  while (f1 < f0 || f0 < planned) {
    if (f0 < planned) push(0, Op::kForward, f0++);
    backward_and_weight(0, b0);
    push(1, Op::kForward, f1++);
    backward_and_weight(1, b1);
  }
  int w0 = b0, w1 = b1;
  for (int i = 0; i < rank; ++i) {
    push(0, Op::kBackwardInput, b0++);
    push(1, Op::kBackwardInput, b1++);
  }
  for (int i = 0; i < ranks - rank; ++i) {
    push(0, Op::kBackwardInput, b0++);
    push(0, Op::kBackwardWeight, w0++);
  }
  while (w1 < b1) push(1, Op::kBackwardWeight, w1++);
  while (w0 < b0) push(0, Op::kBackwardWeight, w0++);
  return actions;
}

// One rank of PyTorch's ScheduleDualPipeV (DeepSeek's DualPipe folded into a V, after
// deepseek-ai/DualPipe's dualpipev.py). Its overlapped pairs (a forward of one chunk with a full
// backward of the other) are written as the forward, then the backward: one compute stream runs
// them one after the other. A full backward counts as its micro-batch's I and W; an I queues its
// W, which runs where the schedule asks for a pending weight pass.
class DualPipeVRank {
 public:
  DualPipeVRank(int ranks, int rank) : stage_{rank, 2 * ranks - 1 - rank} {}

  void Add(int chunk, Op op) {
    switch (op) {
      case Op::kForward: actions_.push_back({op, stage_[chunk], forwards_[chunk]++}); break;
      case Op::kBackward: actions_.push_back({op, stage_[chunk], inputs_[chunk]++}); break;
      case Op::kBackwardInput:
        pending_.push_back({Op::kBackwardWeight, stage_[chunk], inputs_[chunk]});
        actions_.push_back({op, stage_[chunk], inputs_[chunk]++});
        break;
      default: break;
    }
  }
  void Overlapped(int forward_chunk, int backward_chunk) {
    Add(forward_chunk, Op::kForward);
    Add(backward_chunk, Op::kBackward);
  }
  void PendingWeight() {
    if (pending_.empty()) return;
    actions_.push_back(pending_.front());
    pending_.erase(pending_.begin());
  }
  std::vector<Action> Take() { return std::move(actions_); }

 private:
  int stage_[2];
  int forwards_[2] = {0, 0};
  int inputs_[2] = {0, 0};
  std::vector<Action> pending_;
  std::vector<Action> actions_;
};

std::vector<Action> DualPipeVRankOrder(int ranks, int microbatches, int r) {
  DualPipeVRank rank(ranks, r);
  for (int i = 0; i < 2 * (ranks - r - 1); ++i) rank.Add(0, Op::kForward);
  for (int i = 0; i < r + 1; ++i) {
    rank.Add(0, Op::kForward);
    rank.Add(1, Op::kForward);
  }
  for (int i = 0; i < ranks - r - 1; ++i) {
    rank.Add(1, Op::kBackwardInput);
    rank.PendingWeight();
    rank.Add(1, Op::kForward);
  }
  for (int i = 0; i < microbatches - 2 * ranks + r + 1; ++i) {
    if (i == 0 && r == ranks - 1) {  // not overlapped, to shrink the bubble (as DualPipe)
      rank.Add(0, Op::kForward);
      rank.Add(1, Op::kBackward);
    } else {
      rank.Overlapped(0, 1);
    }
    rank.Overlapped(1, 0);
  }
  for (int i = 0; i < ranks - r - 1; ++i) {
    rank.Add(1, Op::kBackward);
    rank.Overlapped(1, 0);
  }
  // The second half of the last backwards split into I and W.
  bool split = false;
  const int last = r + 1;
  for (int i = 0; i < last; ++i) {
    if (i == last / 2 && r % 2 == 1) split = true;
    rank.Add(1, split ? Op::kBackwardInput : Op::kBackward);
    if (i == last / 2 && r % 2 == 0) split = true;
    rank.Add(0, split ? Op::kBackwardInput : Op::kBackward);
  }
  for (int i = 0; i < ranks - r - 1; ++i) {
    rank.PendingWeight();
    rank.Add(0, split ? Op::kBackwardInput : Op::kBackward);
  }
  for (int i = 0; i < r + 1; ++i) rank.PendingWeight();
  return rank.Take();
}

}  // namespace

Schedule GenerateGpipe(int ranks, int microbatches) {
  assert(ranks >= 1 && microbatches >= 1);
  Schedule schedule = Empty(ScheduleKind::kGpipe, ranks, ranks, microbatches);
  for (int r = 0; r < ranks; ++r) {
    auto& actions = schedule.ranks[r];
    for (int i = 0; i < microbatches; ++i) actions.push_back({Op::kForward, r, i});
    for (int i = 0; i < microbatches; ++i) actions.push_back({Op::kBackward, r, i});
  }
  return schedule;
}

Schedule Generate1F1B(int ranks, int microbatches) {
  assert(ranks >= 1 && microbatches >= 1);
  Schedule schedule = Empty(ScheduleKind::k1F1B, ranks, ranks, microbatches);
  for (int r = 0; r < ranks; ++r) {
    auto& actions = schedule.ranks[r];
    const int warmup = std::min(ranks - r - 1, microbatches);
    for (int i = 0; i < warmup; ++i) actions.push_back({Op::kForward, r, i});
    for (int i = 0; i < microbatches; ++i) {
      if (warmup + i < microbatches) actions.push_back({Op::kForward, r, warmup + i});
      actions.push_back({Op::kBackward, r, i});
    }
  }
  return schedule;
}

Schedule GenerateInterleaved1F1B(int ranks, int chunks, int microbatches) {
  assert(ranks >= 1 && chunks >= 1 && CheckMicrobatchCount(ScheduleKind::kInterleaved1F1B, ranks, microbatches).ok());
  Schedule schedule = Empty(ScheduleKind::kInterleaved1F1B, ranks, ranks * chunks, microbatches);
  for (int r = 0; r < ranks; ++r) schedule.ranks[r] = LoopedRank(ranks, chunks, microbatches, r, false);
  return schedule;
}

Schedule GenerateInterleavedZb(int ranks, int chunks, int microbatches) {
  assert(ranks >= 1 && chunks >= 1 && CheckMicrobatchCount(ScheduleKind::kInterleavedZb, ranks, microbatches).ok());
  Schedule schedule = Empty(ScheduleKind::kInterleavedZb, ranks, ranks * chunks, microbatches);
  for (int r = 0; r < ranks; ++r) schedule.ranks[r] = LoopedRank(ranks, chunks, microbatches, r, true);
  return schedule;
}

Schedule GenerateZbV(int ranks, int microbatches) {
  assert(ranks >= 1 && microbatches >= 1);
  Schedule schedule = Empty(ScheduleKind::kZbV, ranks, 2 * ranks, microbatches);
  for (int r = 0; r < ranks; ++r) schedule.ranks[r] = ZbVRank(ranks, microbatches, r);
  return schedule;
}

Schedule GenerateDualPipeV(int ranks, int microbatches) {
  assert(ranks >= 1 && microbatches >= 2 * ranks);
  Schedule schedule = Empty(ScheduleKind::kDualPipeV, ranks, 2 * ranks, microbatches);
  for (int r = 0; r < ranks; ++r) schedule.ranks[r] = DualPipeVRankOrder(ranks, microbatches, r);
  return schedule;
}

Schedule GenerateZbH1(int ranks, int microbatches) {
  // 1F1B's order with each B split: I takes B's place, and rank r runs W of its micro-batches
  // in order, starting after its (r+1)-th I; the W left over run at the end.
  Schedule schedule = Generate1F1B(ranks, microbatches);
  for (int r = 0; r < ranks; ++r) {
    std::vector<Action> actions;
    int inputs_done = 0;
    int next_weight = 0;
    for (const Action& a : schedule.ranks[r]) {
      if (a.op != Op::kBackward) {
        actions.push_back(a);
        continue;
      }
      actions.push_back({Op::kBackwardInput, r, a.microbatch});
      if (inputs_done++ >= r) actions.push_back({Op::kBackwardWeight, r, next_weight++});
    }
    while (next_weight < microbatches) actions.push_back({Op::kBackwardWeight, r, next_weight++});
    schedule.ranks[r] = std::move(actions);
  }
  return schedule;
}

int ForwardsBeforeFirstBackward(ScheduleKind kind, int ranks, int microbatches, int rank) {
  return kind == ScheduleKind::kGpipe ? microbatches : std::min(ranks - rank, microbatches);
}

int MaxInFlight(ScheduleKind kind, int ranks, int microbatches, int rank) {
  switch (kind) {
    case ScheduleKind::kGpipe: return microbatches;
    case ScheduleKind::k1F1B: return std::min(ranks - rank, microbatches);
    // W passes run r slots late on rank r, so every rank reaches rank 0's count.
    case ScheduleKind::kZbH1: return std::min(ranks, microbatches);
    case ScheduleKind::kInterleaved1F1B:
    case ScheduleKind::kInterleavedZb:
    case ScheduleKind::kZbV:
    case ScheduleKind::kDualPipeV: break;  // several stages per rank: walk the schedule
  }
  return microbatches;
}

Expected<Schedule> GenerateSchedule(ScheduleKind kind, int ranks, int stages, int microbatches) {
  if (ranks < 1) return Status::Invalid("a schedule needs at least one rank, got " + std::to_string(ranks));
  if (microbatches < 1) {
    return Status::Invalid("a schedule needs at least one micro-batch, got " + std::to_string(microbatches));
  }
  GPIPE_RETURN_IF_ERROR(CheckStageCount(kind, ranks, stages));
  GPIPE_RETURN_IF_ERROR(CheckMicrobatchCount(kind, ranks, microbatches));
  switch (kind) {
    case ScheduleKind::kGpipe: return GenerateGpipe(ranks, microbatches);
    case ScheduleKind::k1F1B: return Generate1F1B(ranks, microbatches);
    case ScheduleKind::kZbH1: return GenerateZbH1(ranks, microbatches);
    case ScheduleKind::kInterleaved1F1B: return GenerateInterleaved1F1B(ranks, stages / ranks, microbatches);
    case ScheduleKind::kInterleavedZb: return GenerateInterleavedZb(ranks, stages / ranks, microbatches);
    case ScheduleKind::kZbV: return GenerateZbV(ranks, microbatches);
    case ScheduleKind::kDualPipeV: return GenerateDualPipeV(ranks, microbatches);
  }
  return Status::Invalid("unhandled schedule " + std::string(ScheduleName(kind)));
}

}  // namespace gpipe
