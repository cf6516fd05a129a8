#include "core/schedule/generators.h"

#include <algorithm>
#include <cassert>
#include <string>

namespace gpipe {
namespace {

Schedule Empty(int ranks, int stages, int microbatches) {
  Schedule schedule;
  schedule.num_microbatches = microbatches;
  schedule.ranks.resize(ranks);
  schedule.stage_rank.resize(stages);
  for (int s = 0; s < stages; ++s) schedule.stage_rank[s] = s % ranks;
  return schedule;
}

}  // namespace

Schedule GenerateGpipe(int ranks, int microbatches) {
  assert(ranks >= 1 && microbatches >= 1);
  Schedule schedule = Empty(ranks, ranks, microbatches);
  for (int r = 0; r < ranks; ++r) {
    auto& actions = schedule.ranks[r];
    for (int i = 0; i < microbatches; ++i) actions.push_back({Op::kForward, r, i});
    for (int i = 0; i < microbatches; ++i) actions.push_back({Op::kBackward, r, i});
  }
  return schedule;
}

Schedule Generate1F1B(int ranks, int microbatches) {
  assert(ranks >= 1 && microbatches >= 1);
  Schedule schedule = Empty(ranks, ranks, microbatches);
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
  assert(ranks >= 1 && chunks >= 1 && microbatches >= 1 && microbatches % ranks == 0);
  Schedule schedule = Empty(ranks, ranks * chunks, microbatches);
  const int total = microbatches * chunks;
  // The k-th forward (or backward) of a rank: groups of K micro-batches sweep the chunks in
  // order (backwards sweep them in reverse), as Megatron-LM's get_model_chunk_id.
  const auto unit = [&](int k, bool forward) {
    const int within = k % (ranks * chunks);
    int chunk = within / ranks;
    if (!forward) chunk = chunks - 1 - chunk;
    const int microbatch = (k / (ranks * chunks)) * ranks + k % ranks;
    return std::pair<int, int>{chunk, microbatch};
  };
  for (int r = 0; r < ranks; ++r) {
    auto& actions = schedule.ranks[r];
    const auto push = [&](int k, bool forward) {
      const auto [chunk, microbatch] = unit(k, forward);
      actions.push_back({forward ? Op::kForward : Op::kBackward, chunk * ranks + r, microbatch});
    };
    const int warmup = std::min(2 * (ranks - r - 1) + (chunks - 1) * ranks, total);
    for (int k = 0; k < warmup; ++k) push(k, true);
    for (int k = 0; k < total; ++k) {
      if (warmup + k < total) push(warmup + k, true);
      push(k, false);
    }
  }
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
    case ScheduleKind::kInterleaved1F1B: break;
  }
  return microbatches;
}

Expected<Schedule> GenerateSchedule(ScheduleKind kind, int ranks, int stages, int microbatches) {
  if (ranks < 1) return Status::Invalid("a schedule needs at least one rank, got " + std::to_string(ranks));
  if (microbatches < 1) {
    return Status::Invalid("a schedule needs at least one micro-batch, got " + std::to_string(microbatches));
  }
  const std::string name = ScheduleName(kind);
  if (kind == ScheduleKind::kInterleaved1F1B) {
    if (stages < ranks || stages % ranks != 0) {
      return Status::Invalid(name + " needs a whole number of stages per rank; got " +
                             std::to_string(stages) + " stages on " + std::to_string(ranks) + " ranks");
    }
    if (microbatches % ranks != 0) {
      return Status::Invalid(name + " needs micro-batches to be a multiple of the " +
                             std::to_string(ranks) + " ranks, got " + std::to_string(microbatches));
    }
    return GenerateInterleaved1F1B(ranks, stages / ranks, microbatches);
  }
  if (stages != ranks) {
    return Status::Invalid(name + " runs one stage per rank; got " + std::to_string(stages) +
                           " stages on " + std::to_string(ranks) + " ranks");
  }
  switch (kind) {
    case ScheduleKind::kGpipe: return GenerateGpipe(ranks, microbatches);
    case ScheduleKind::k1F1B: return Generate1F1B(ranks, microbatches);
    case ScheduleKind::kZbH1: return GenerateZbH1(ranks, microbatches);
    case ScheduleKind::kInterleaved1F1B: break;
  }
  return Status::Invalid("unhandled schedule " + name);
}

}  // namespace gpipe
