// The precedence graph of a schedule's compute actions, for the path bound (path_bound.h):
// every action after its rank's previous compute action and after what it needs from a
// neighbouring stage (F(s, m) after F(s - 1, m); B or I (s, m) after B or I (s + 1, m), or after
// F(s, m) at the last stage; W(s, m) after I(s, m)), with the message across its stage boundary
// on each edge between ranks. Whatever the partition, the step is at least its longest path: the simulator runs the
// same actions in the same order on each rank, and messages, overheads and recompute only add.
#pragma once

#include <array>
#include <optional>
#include <vector>

#include "core/schedule/schedule.h"
#include "planner/path_bound.h"

namespace gpipe::path_internal {

// The compute ops a path counts, and their index in a stage's times. P: the stage's parameter
// bytes, which a path ending at its rank's last action prices at the all-reduce's time per byte.
// H: the message across the boundary after the stage (to the next stage, or the gradient back
// from it; 0 at the last stage and where the two stages share a rank), which depends on the
// stage's last layer, not on a sum over its layers (a layer's own H time is 0).
inline constexpr int kF = 0, kB = 1, kI = 2, kW = 3, kP = 4, kH = 5, kOps = 6;
/// kF, kB, kI or kW; -1 for what is not compute.
int OpIndex(Op op);
using OpTimes = std::array<double, kOps>;

struct PathTerm {
  int stage;
  int op;
  double count;
};

/// A path of the graph: `count` times each (stage, op) time (its messages as H terms), plus
/// `hops` ms (where `reduced`, its rank's all-reduce's fixed time).
struct GraphPath {
  int rank = 0;  // where it ends
  bool reduced = false;
  double hops = 0;
  std::vector<PathTerm> body;
};

struct PrecedenceGraph {
  // Per node, in a topological order.
  std::vector<int> stage, op;
  std::vector<int> after_rank;   // the rank's previous compute node, or -1
  std::vector<int> after_peer;   // the node needed from a neighbouring stage, or -1
  std::vector<int> peer_boundary;  // the stage boundary that edge crosses between ranks, or -1
  std::vector<int> last;         // per rank, its last compute node (-1: none)
  std::vector<std::vector<int>> rank_stages;
};

/// The graph, or nothing past `max_nodes` compute actions (or for an order with a cycle, which no
/// valid schedule has).
std::optional<PrecedenceGraph> PrecedenceGraphOf(const Schedule& schedule, size_t max_nodes);

/// Longest paths for stages whose op times (messages: H) are `stage_times`, each ending at a rank's last action
/// and its all-reduce where `allreduce` has one: with `every_rank` one per rank, else the longest.
std::vector<GraphPath> LongestPaths(const PrecedenceGraph& g, const std::vector<OpTimes>& stage_times,
                                    const std::vector<AllReduceLine>& allreduce, bool every_rank);

}  // namespace gpipe::path_internal
