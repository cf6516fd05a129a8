// The least-memory partition of one stage per rank: a dynamic program over (rank, first layer)
// with the simulator's own memory peaks, exact (checked against brute force in
// tests/planner). What the tightest memory budget must hold (LeastMemoryPartition, partition.h).
#pragma once

#include "planner/partition_context.h"

namespace gpipe::partition_internal {

class StageDp : public PartitionContext {
 public:
  // REQUIRES: the problem passed CheckProblem, with one stage per rank, and its schedule generates.
  explicit StageDp(const PartitionProblem& problem) : PartitionContext(problem) {}

  // `at_most_bytes`: as LeastMemoryPartition's (infinity: the least, whatever it is).
  LeastMemoryResult Run(double at_most_bytes = kInfinity);
};

}  // namespace gpipe::partition_internal
