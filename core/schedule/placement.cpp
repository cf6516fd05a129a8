#include "core/schedule/placement.h"

#include <algorithm>

namespace gpipe {
namespace {

bool MicrobatchCountWorks(ScheduleKind kind, int ranks, int microbatches) {
  switch (LayoutOf(kind)) {
    case StageLayout::kOnePerRank: return true;
    case StageLayout::kLoop: return microbatches % std::max(1, microbatches / ranks) == 0;
    case StageLayout::kV: return kind != ScheduleKind::kDualPipeV || microbatches >= 2 * ranks;
  }
  return true;
}

}  // namespace

StageLayout LayoutOf(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGpipe:
    case ScheduleKind::k1F1B:
    case ScheduleKind::kZbH1: return StageLayout::kOnePerRank;
    case ScheduleKind::kInterleaved1F1B:
    case ScheduleKind::kInterleavedZb: return StageLayout::kLoop;
    case ScheduleKind::kZbV:
    case ScheduleKind::kDualPipeV: return StageLayout::kV;
  }
  return StageLayout::kOnePerRank;
}

std::string DescribeLayout(StageLayout layout) {
  switch (layout) {
    case StageLayout::kOnePerRank: return "stage s runs on rank s";
    case StageLayout::kLoop: return "the stages go round-robin: stage s on rank s mod K";
    case StageLayout::kV: return "the stages go down and back: stage s on rank s, stage 2K-1-s on rank s";
  }
  return "";
}

int StageCount(ScheduleKind kind, int ranks, int chunks) {
  switch (LayoutOf(kind)) {
    case StageLayout::kOnePerRank: return ranks;
    case StageLayout::kLoop: return ranks * chunks;
    case StageLayout::kV: return 2 * ranks;
  }
  return ranks;
}

std::vector<int> PlaceStages(ScheduleKind kind, int ranks, int stages) {
  std::vector<int> rank(static_cast<size_t>(std::max(stages, 0)));
  for (int s = 0; s < stages; ++s) {
    switch (LayoutOf(kind)) {
      case StageLayout::kOnePerRank:
      case StageLayout::kLoop: rank[s] = s % ranks; break;
      case StageLayout::kV: rank[s] = s < ranks ? s : 2 * ranks - 1 - s; break;
    }
  }
  return rank;
}

Status CheckStageCount(ScheduleKind kind, int ranks, int stages) {
  const std::string name = ScheduleName(kind);
  const std::string shape = std::to_string(stages) + " stages on " + std::to_string(ranks) + " ranks";
  switch (LayoutOf(kind)) {
    case StageLayout::kOnePerRank:
      if (stages == ranks) return Status::Ok();
      return Status::Invalid("\"" + name + "\" runs one stage per rank, but the plan puts " + shape +
                             "; use \"interleaved-1f1b\" for several stages per rank");
    case StageLayout::kLoop:
      if (stages >= ranks && stages % ranks == 0) return Status::Ok();
      return Status::Invalid(name + " needs the same number of stages on every rank; " + shape);
    case StageLayout::kV:
      if (stages == 2 * ranks) return Status::Ok();
      return Status::Invalid(name + " runs exactly two stages per rank (2K = " + std::to_string(2 * ranks) +
                             " stages in a V); got " + shape);
  }
  return Status::Ok();
}

Status CheckMicrobatchCount(ScheduleKind kind, int ranks, int microbatches) {
  if (MicrobatchCountWorks(kind, ranks, microbatches)) return Status::Ok();
  const std::string name = ScheduleName(kind);
  if (kind == ScheduleKind::kDualPipeV) {
    return Status::Invalid(name + " needs at least as many micro-batches as its 2K = " + std::to_string(2 * ranks) +
                           " stages (as PyTorch's ScheduleDualPipeV), got " + std::to_string(microbatches));
  }
  int lower = microbatches - 1, upper = microbatches + 1;
  while (!MicrobatchCountWorks(kind, ranks, lower)) --lower;
  while (!MicrobatchCountWorks(kind, ranks, upper)) ++upper;
  const int rounds = std::max(1, microbatches / ranks);
  return Status::Invalid(name + " runs M micro-batches in max(1, M / K) rounds of equal size (PyTorch's rule); M = " +
                         std::to_string(microbatches) + " on " + std::to_string(ranks) + " ranks is " +
                         std::to_string(rounds) + " rounds, which do not divide it; try " + std::to_string(lower) +
                         " or " + std::to_string(upper));
}

int MicrobatchesPerRound(int ranks, int microbatches) { return microbatches / std::max(1, microbatches / ranks); }

bool SplitsBackward(ScheduleKind kind) {
  return kind == ScheduleKind::kZbH1 || kind == ScheduleKind::kInterleavedZb || kind == ScheduleKind::kZbV ||
         kind == ScheduleKind::kDualPipeV;
}

bool IsNewerSchedule(ScheduleKind kind) {
  return kind == ScheduleKind::kInterleavedZb || kind == ScheduleKind::kZbV || kind == ScheduleKind::kDualPipeV;
}

}  // namespace gpipe
