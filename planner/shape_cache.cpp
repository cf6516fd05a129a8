#include "planner/shape_cache.h"


#include "core/schedule/generators.h"
#include "core/schedule/lower.h"

namespace gpipe {

ShapeData::ShapeData(ScheduleKind kind, int ranks, int chunks, int microbatches)
    : evaluator_(std::make_unique<StepEvaluator>(
          AddCommunication(*GenerateSchedule(kind, ranks, ranks * chunks, microbatches)))),
      frontiers_(ranks) {}

MemoryFrontier& ShapeData::Frontier(int rank) {
  std::unique_ptr<MemoryFrontier>& frontier = frontiers_[rank];
  if (!frontier) frontier = std::make_unique<MemoryFrontier>(evaluator_->schedule(), rank, &Posting());
  return *frontier;
}

const ReceivePosting& ShapeData::Posting() {
  if (!posting_) posting_ = ReceivesPostedAt(evaluator_->schedule());
  return *posting_;
}

ShapeData& ShapeCache::For(ScheduleKind kind, int ranks, int chunks, int microbatches) {
  const std::array<int, 4> key = {static_cast<int>(kind), ranks, chunks, microbatches};
  auto it = shapes_.find(key);
  if (it != shapes_.end()) return *it->second;
  if (shapes_.size() >= kMaxShapes) shapes_.clear();
  std::unique_ptr<ShapeData>& entry = shapes_[key];
  entry = std::make_unique<ShapeData>(kind, ranks, chunks, microbatches);
  return *entry;
}

}  // namespace gpipe
