// What depends only on a schedule's shape (kind, K ranks, v chunks per rank, M micro-batches):
// its step evaluator and each rank's memory frontier. Configurations that differ only in
// replicas, placement or memory share it, so a search over many configurations builds each
// shape once.
//
// A ShapeCache belongs to one search (SearchPlans makes one per call; a lone FindBestPartition
// makes its own). It is not thread-safe: one owner, one thread.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "core/schedule/schedule.h"
#include "simulator/memory_model.h"
#include "simulator/step_evaluator.h"

namespace gpipe {

/// One shape's evaluator and its ranks' memory frontiers (built when first asked for).
class ShapeData {
 public:
  /// REQUIRES: `kind` generates a schedule for K ranks, K x v stages and M micro-batches.
  ShapeData(ScheduleKind kind, int ranks, int chunks, int microbatches);

  const StepEvaluator& evaluator() const { return *evaluator_; }
  /// Rank `rank`'s frontier, built on the first call.
  MemoryFrontier& Frontier(int rank);
  /// Where the schedule's receives are posted (ReceivesPostedAt), built on the first call.
  const ReceivePosting& Posting();

 private:
  std::unique_ptr<StepEvaluator> evaluator_;
  std::optional<ReceivePosting> posting_;
  std::vector<std::unique_ptr<MemoryFrontier>> frontiers_;
};

class ShapeCache {
 public:
  /// The data of shape (kind, K, v, M), built on the first call. The reference stays valid until
  /// the next call (past kMaxShapes entries the cache empties itself before building a new one).
  /// REQUIRES: as ShapeData.
  ShapeData& For(ScheduleKind kind, int ranks, int chunks, int microbatches);

 private:
  static constexpr size_t kMaxShapes = 1024;
  std::map<std::array<int, 4>, std::unique_ptr<ShapeData>> shapes_;
};

}  // namespace gpipe
