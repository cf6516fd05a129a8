// The full path bound's game (path_bound.h): the bound picks a mix of chains, a partition answers
// with the least weighted length; over the chains and partitions met so far the game is a linear
// program (matrix_game.h), the dynamic program prices the chains' mix against every partition,
// and the schedule's longest path for the partitions' mix joins the chains. Memory, where given,
// is priced in the same program. Internal to the planner's bounds.
#pragma once

#include <vector>

#include "core/schedule/schedule.h"
#include "planner/partition_program.h"
#include "planner/path_bound.h"
#include "planner/precedence_graph.h"

namespace gpipe::path_internal {

// Per stage, how many micro-batches' activations its rank holds at the instant it holds the most
// (of all its stages together): forwards done whose backward (B or I) has not run.
std::vector<double> HeldAtPeak(const Schedule& schedule);

// Memory priced by Lagrange multipliers, one per rank (ms per byte): every plan that fits has
// sum_r u_r (what rank r holds - limit) <= 0, so adding that sum to what a mix of chains costs a
// partition keeps its least over the partitions a bound. What rank r holds is at least its model
// state and, at the instant of HeldAtPeak, those micro-batches' activations of every layer it
// does not recompute; a layer recomputed instead adds its forward to each backward (B or I) of its
// stage. Each layer chooses alone (a relaxation of remat by stage or by layer). The prices are
// the game's (GameBound): one constraint row per rank.
struct MemoryPrices {
  const PathBoundInput* input = nullptr;
  const std::vector<int>* stage_rank = nullptr;
  std::vector<double> held;   // per stage
  std::vector<double> price;  // per rank: the game's prices of its memory rows, per byte

  bool on() const { return input != nullptr; }
  double Limit() const { return input->memory_limit_bytes; }
  // Whether layer l in stage s keeps its activations at these prices (recomputing costs
  // `recompute` per ms of its forward).
  bool Keeps(int l, int s, double recompute, double forward_ms) const {
    return !input->may_recompute ||
           price[(*stage_rank)[s]] * held[s] * input->activation_bytes[l] <= recompute * forward_ms;
  }
};

/// Layer l in stage s at the mix's coefficients `c` and the memory's prices (its ops' times; its
/// model state and, kept, its activations at the prices, or recomputed, its forward on each
/// backward: the cheaper). Summed over a partition's layers, less the prices times the limit,
/// plus the mix's messages, a lower bound on the step of that partition in any plan that fits.
double PricedLayerCost(const Coefficients& c, const std::vector<OpTimes>& times, const MemoryPrices& memory, int l,
                       int s);

/// Memory prices for `schedule` from `input`, all 0 at first (off where it gives no memory, or
/// past 64 ranks: a constraint row per rank).
MemoryPrices MemoryPricesFor(const Schedule& schedule, const PathBoundInput& input);

// The bound as a game (a double oracle): the bound picks a mix of chains, a partition answers
// with the least weighted length. Over the chains and partitions met so far the game is solved
// exactly (planner/matrix_game.h); the mix of chains it finds is priced against every partition
// by the dynamic program (a bound, and a new partition), and the graph's longest path for the
// partitions' mix joins the chains. It stops when no path is longer, for the partitions' mix,
// than the bound: the chains' best mix is then found. `rows`: the chains' mixes to start from;
// `times`: per layer.
Mix GameBound(std::vector<Row> rows, const PrecedenceGraph& graph, const std::vector<OpTimes>& times, int stages,
              const PathBoundInput& input, MemoryPrices memory);

}  // namespace gpipe::path_internal
