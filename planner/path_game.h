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

// One instant of a rank's memory walk (simulator/memory_model.h): per stage, the micro-batches
// whose activations a layer that keeps them holds then (forwards started whose B, or W, has not
// ended) and those a layer that recomputes holds (recomputed for a B or I that started, whose B,
// or W, has not ended). With split backwards both last until W.
struct MemoryInstant {
  int rank = 0;
  std::vector<double> kept, recomputed;  // per stage of the schedule (0 off the rank)
  // Priced only once the game has converged without it (GameBound).
  bool late = false;
};

// Per rank, with split backwards: the instants where it holds the most micro-batches kept, and
// where it holds the most recomputed (each breaking ties by the other count; one where they are the
// same). With full backwards: the instant right after a forward's start where it holds the most
// kept (a layer that recomputes holds none there), and, late, right after a B's start where it
// holds the most kept (a layer that recomputes holds that B's micro-batch there).
std::vector<MemoryInstant> MemoryInstants(const Schedule& schedule);

// Memory priced by Lagrange multipliers, one per instant (ms per byte): every plan that fits has
// sum_i u_i (what its rank holds at instant i - limit) <= 0, so adding that sum to what a mix of
// chains costs a partition keeps its least over the partitions a bound. What a rank holds at an
// instant is at least its model state and the activations of each of its layers, those
// micro-batches' that the instant's counts give: kept, or recomputed, and then the layer also
// adds its forward to each backward (B or I) of its stage. Each layer chooses alone (a relaxation
// of remat by stage or by layer). The prices are the game's (GameBound): one constraint row per
// instant.
struct MemoryPrices {
  const PathBoundInput* input = nullptr;
  const std::vector<int>* stage_rank = nullptr;
  std::vector<MemoryInstant> instants;
  std::vector<std::vector<int>> by_rank;  // per rank, its instants
  std::vector<double> price;  // per instant: the game's price of its memory row, per byte

  bool on() const { return input != nullptr; }
  double Limit() const { return input->memory_limit_bytes; }
  // Sets the prices, and each stage's sums of them (what a byte of model state, of kept and of
  // recomputed activations costs there).
  void SetPrices(std::vector<double> prices);
  // Whether layer l in stage s keeps its activations at these prices (recomputing costs
  // `recompute` per ms of its forward).
  bool Keeps(int l, int s, double recompute, double forward_ms) const {
    return !input->may_recompute ||
           keep_price[s] * input->activation_bytes[l] <= recompute * forward_ms + recompute_price[s] * input->activation_bytes[l];
  }
  // Per stage: the prices of its rank's instants summed, and weighted by its counts.
  std::vector<double> static_price, keep_price, recompute_price;
};

/// Layer l in stage s at the mix's coefficients `c` and the memory's prices (its ops' times; its
/// model state and, kept, its activations at the prices, or recomputed, its forward on each
/// backward: the cheaper). Summed over a partition's layers, less the prices times the limit,
/// plus the mix's messages, a lower bound on the step of that partition in any plan that fits.
double PricedLayerCost(const Coefficients& c, const std::vector<OpTimes>& times, const MemoryPrices& memory, int l,
                       int s);

/// Memory prices for `schedule` from `input`, all 0 at first (off where it gives no memory, or
/// past 64 ranks: a constraint row per instant, up to two per rank).
MemoryPrices MemoryPricesFor(const Schedule& schedule, const PathBoundInput& input);

// The bound as a game (a double oracle): the bound picks a mix of chains, a partition answers
// with the least weighted length. Over the chains and partitions met so far the game is solved
// exactly (planner/matrix_game.h); the mix of chains it finds is priced against every partition
// by the dynamic program (a bound, and a new partition), and the graph's longest path for the
// partitions' mix joins the chains. It stops when no path is longer, for the partitions' mix,
// than the bound: the chains' best mix is then found. With memory priced, where no mix of the
// partitions met fits, a second game (the instants against partitions, each layer holding the
// least it can) finds partitions that fit, or prices at which every partition holds more than the
// limit: then no plan fits, and the bound is infinite. Late instants join once the game has
// converged without them (at full backwards, partitions that recompute every layer fit the first
// instants, not the late ones: priced from the start, the game converges far more slowly), and
// the game goes on. `rows`: the chains' mixes to start from; `times`: per layer.
Mix GameBound(std::vector<Row> rows, const PrecedenceGraph& graph, const std::vector<OpTimes>& times, int stages,
              const PathBoundInput& input, MemoryPrices memory);

}  // namespace gpipe::path_internal
