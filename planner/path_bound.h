// A lower bound on the step of every contiguous partition of a schedule, read off the schedule's
// own order of actions: whatever the partition, the step is at least the length of any chain of
// actions that must run one after another. The chains used, per rank r:
//   the forwards of micro-batch m through the stages before stage s, where F(s, m) is the first
//   forward of one of r's stages; then r's own actions in order up to the last backward (B or I)
//   of one of its stages, or to its last action; then, from a backward of stage s', the same
//   micro-batch's backwards through the stages before s';
//   the same with the first backward B(s, m) (or I) of one of r's stages in place of the
//   forward: micro-batch m's forwards through every stage and backwards through the stages after
//   s come before it (the fill seen from the drain side: a pipeline whose ranks all hold a stage
//   near the end waits for a whole micro-batch's forward before its first backward);
// with, on every hop between ranks, the message the boundary carries (the output of the layer
// that ends the stage, over the quicker of the two ranks' links: BoundaryHops); and the chains
// that end at the rank's last action with its all-reduce instead of the backwards after it. A
// chain's length is linear in the stages' forward, backward, input-gradient and weight-gradient
// sums and their boundaries' message times, so any weighted average of chains is too, and its
// least value over all partitions is a dynamic program over the layers (each layer to a stage,
// stages in order, none empty; a message priced where a stage ends). The weights are improved by Frank-Wolfe steps
// towards the longest chain of the partition that minimized the last average. Every such
// least value is a lower bound; the bound is the largest met.
//
// The full bound then plays a game (a double oracle): the bound picks a mix of chains, a
// partition answers with the least weighted length. Over the chains and partitions met so far the
// game is a linear program (planner/matrix_game.h); its mix of chains is priced against every
// partition by the dynamic program (a bound, and a new partition), and the longest path of the
// schedule's precedence graph (planner/precedence_graph.h) for the partitions' mix joins the
// chains, until no path is longer than the bound. Where memory is given, the game also prices
// it: one constraint per rank (what it holds at its fullest instant, less the limit), whose prices
// are Lagrange multipliers, and the dynamic program lets each layer recompute its forward, at
// that forward's cost on every backward of its stage, instead of keeping its activations. That
// sees the recompute memory forces.
//
// It sees what the per-rank bound of interleaved_search.h cannot: a partition that makes the
// first round's stages short to shorten every rank's wait lengthens the later rounds, whose chains
// then bind. It ignores per-action overheads and calibrated step costs (which only add), and
// prices the least memory a plan can hold (model state and activations: not the inputs,
// buffers and workspace, which only add).
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <limits>
#include <vector>

#include "core/cluster.h"
#include "core/schedule/schedule.h"
#include "simulator/layer_table.h"

namespace gpipe {

/// A lower bound on a rank's all-reduce, affine in its parameter bytes.
struct AllReduceLine {
  double fixed_ms = 0;
  double ms_per_byte = 0;
};

/// The least a message across a stage boundary takes: after stage s (to stage s + 1's rank, or
/// the gradient back), when layer l ends stage s, it carries that layer's output (`bytes[l]`;
/// none given: 0 bytes) over the link between the two ranks, whichever way is the quicker; 0
/// where the two stages share a rank (a V's turn).
struct BoundaryHops {
  std::vector<Link> forward, backward;  // per boundary s (between stages s and s + 1)
  std::vector<char> crosses;            // per boundary: whether the stages' ranks differ
  std::vector<double> bytes;            // per layer
  /// Once the fields above are set: Ms read from a table per distinct pair of links and layer
  /// (the dynamic programs ask for it at every cell; a cluster has few kinds of link).
  void Tabulate();
  double Ms(int s, int l) const {
    if (static_cast<size_t>(s) >= crosses.size() || !crosses[s]) return 0.0;
    if (!table_.empty()) return table_[static_cast<size_t>(pair_[s]) * bytes.size() + static_cast<size_t>(l)];
    const double b = bytes.empty() ? 0.0 : bytes[l];
    return std::min(forward[s].TransferMs(b), backward[s].TransferMs(b));
  }

 private:
  std::vector<int> pair_;      // per boundary: its row of the table
  std::vector<double> table_;  // [pair][layer]
};

/// The bound's best mix of chains (and memory prices), layer by layer: every plan that fits and
/// puts layer l in stage s has a step of at least constant + the sum of cost(s, l) over its
/// layers and of end(s, l) over its stages but the last (stage s ending at layer l: its
/// messages). Its least over the partitions is the bound it came from; a search prunes each
/// subtree by its least over the partitions there (Least), which rises as stages are placed.
class LayerPrices {
 public:
  LayerPrices() = default;
  /// `cost(s, l)` and `end(s, l)` for every stage and layer; `constant` the mix's all-reduce time
  /// less the memory priced.
  template <typename Cost, typename End>
  LayerPrices(int stages, int layers, double constant, const Cost& cost, const End& end);

  bool empty() const { return stages_ == 0; }
  double constant() const { return constant_; }
  /// Layers [a, e) in stage s (and, before the last stage, the message after layer e - 1).
  double StageCost(int s, int a, int e) const {
    return prefix_[Index(s, e)] - prefix_[Index(s, a)] + (s + 1 < stages_ ? end_[Index(s, e - 1)] : 0.0);
  }
  /// The least over the ways to place layers [a, L) in stages s, s + 1, ... (none empty), stage s
  /// starting at layer a; 0 for s = stages at a = layers, infinity where they cannot.
  double Rest(int s, int a) const {
    if (s == stages_) return a == layers_ ? 0.0 : std::numeric_limits<double>::infinity();
    return rest_[Index(s, a)];
  }
  /// The stage ends of a partition whose cost is the least, Rest(0, 0).
  std::vector<int> LeastPartition() const;

 private:
  size_t Index(int s, int l) const { return static_cast<size_t>(s) * (layers_ + 1) + l; }
  int stages_ = 0, layers_ = 0;
  double constant_ = 0;
  std::vector<double> prefix_;  // [s][l]: the cost of layers [0, l) in stage s
  std::vector<double> end_;     // [s][l]: end(s, l)
  std::vector<double> rest_;    // [s][a]: Rest(s, a)
};

struct PathBoundInput {
  const Schedule* schedule = nullptr;
  const LayerTable* table = nullptr;
  /// The messages across stage boundaries (none given: free).
  BoundaryHops hops;
  /// Per rank (empty: no all-reduce): its all-reduce after its last action. The parameter bytes
  /// are per-layer sums, so a profile with tied parameters must leave the per-byte term at 0.
  std::vector<AllReduceLine> allreduce;
  /// Frank-Wolfe steps (each one dynamic program over layers x stages).
  int iterations = 12;
  /// Frank-Wolfe's step takes the longest path of the schedule's whole precedence graph where it
  /// has at most this many compute actions, else the longest of the chains above.
  size_t max_graph_nodes = size_t{1} << 18;
  /// Rounds of the game over chains and partitions (where the graph is small enough); 0: a
  /// quick bound (the chains that start at a forward only, and no game).
  int game_iterations = 150;
  /// Memory (a limit of 0: not priced): per layer, its model state and the activations a
  /// micro-batch keeps from its forward to its backward; the device's limit; whether a layer
  /// may recompute its forward instead of keeping them. (No per-layer model state where
  /// parameters are tied: the sums would count them twice.)
  std::vector<double> static_bytes, activation_bytes;
  double memory_limit_bytes = 0;
  bool may_recompute = true;
  /// Stop once the bound reaches this (the caller only needs to know that it does).
  double enough = 0;
  /// Polled at every round of the game and every Frank-Wolfe step: once true, the bound so far (a
  /// bound still) is returned.
  /// Null: never.
  std::function<bool()> time_up;
  /// Where given (and the stages times the layers are at most kMaxLayerPrices): the best mix's
  /// LayerPrices (left empty otherwise).
  LayerPrices* prices = nullptr;
};

/// The most stages x layers LayerPrices are kept for (two tables of that many doubles).
inline constexpr size_t kMaxLayerPrices = size_t{1} << 20;

template <typename Cost, typename End>
LayerPrices::LayerPrices(int stages, int layers, double constant, const Cost& cost, const End& end)
    : stages_(stages), layers_(layers), constant_(constant),
      prefix_(static_cast<size_t>(stages) * (layers + 1), 0.0),
      end_(static_cast<size_t>(stages) * (layers + 1), 0.0),
      rest_(static_cast<size_t>(stages) * (layers + 1), std::numeric_limits<double>::infinity()) {
  for (int s = 0; s < stages; ++s) {
    for (int l = 0; l < layers; ++l) {
      prefix_[Index(s, l + 1)] = prefix_[Index(s, l)] + cost(s, l);
      if (s + 1 < stages) end_[Index(s, l)] = end(s, l);
    }
  }
  // in[s][l]: layers [l, L) placed, layer l in stage s (the stages after s not empty); Rest(s, a)
  // is in[s][a]. From the last layer back: layer l + 1 stays in stage s, or opens stage s + 1
  // (stage s ending at layer l).
  std::vector<double> next(stages);  // in[.][l + 1] (unread at l = L - 1: the last layer ends a stage)
  for (int l = layers - 1; l >= 0; --l) {
    std::vector<double> here(stages, std::numeric_limits<double>::infinity());
    for (int s = 0; s < stages; ++s) {
      const double stay = l + 1 < layers ? next[s] : (s == stages - 1 ? 0.0 : std::numeric_limits<double>::infinity());
      const double move = l + 1 < layers && s + 1 < stages ? end_[Index(s, l)] + next[s + 1] : std::numeric_limits<double>::infinity();
      const double after = std::min(stay, move);
      if (after < std::numeric_limits<double>::infinity()) here[s] = cost(s, l) + after;
      rest_[Index(s, l)] = here[s];
    }
    next = std::move(here);
  }
}

/// The bound (0 when the schedule has no compute action; infinite where the game, with memory
/// priced, proves that no partition fits: path_game.h).
double PathLowerBound(const PathBoundInput& input);

}  // namespace gpipe
