#include "planner/path_bound.h"

#include <algorithm>
#include <array>
#include <limits>
#include <cmath>
#include <optional>

#include "planner/matrix_game.h"
#include "planner/precedence_graph.h"

namespace gpipe {
namespace {

using namespace path_internal;  // NOLINT: the op indices and the graph

constexpr double kInfinity = std::numeric_limits<double>::infinity();
using Coefficients = std::vector<std::array<double, kOps>>;  // per stage, per op

// A weighted average of chains (its coefficients and messages' time), and its least value over
// the partitions: a bound.
struct Mix {
  double bound = 0;
  Coefficients c;
  double hops = 0;
};

// One chain: forwards of the stages before `head`, its rank's actions (`body`: stage, op, count),
// backwards (op `tail_op`) of the stages before `tail`, and its messages' least time.
struct Chain {
  int head = 0;
  int tail = 0;
  int tail_op = kB;
  // With back_from >= 0: before the body, also the backwards (op back_op) of the stages after
  // back_from (the head then covers every stage's forward).
  int back_from = -1;
  int back_op = kB;
  // Where it comes from: its rank, the index of its first action there, and whether it runs to
  // the rank's last action (before any all-reduce: `reduced`).
  int rank = 0;
  size_t first_action = 0;
  bool to_last = false;
  bool reduced = false;
  std::vector<PathTerm> body;
  double hops = 0;

  // Adds `share` x this chain's coefficients to `c`.
  void AddTo(double share, Coefficients* c) const {
    for (int t = 0; t < head; ++t) (*c)[t][kF] += share;
    for (int t = 0; t < tail; ++t) (*c)[t][tail_op] += share;
    if (back_from >= 0) {
      for (int t = back_from + 1; t < static_cast<int>(c->size()); ++t) (*c)[t][back_op] += share;
    }
    for (const auto& [stage, op, count] : body) (*c)[stage][op] += share * count;
  }
  // Its length for stages whose op times are `times` and prefix sums `prefix` ([s][op]: stages < s).
  double Ms(const std::vector<std::array<double, kOps>>& times, const std::vector<std::array<double, kOps>>& prefix) const {
    double ms = hops + prefix[head][kF] + prefix[tail][tail_op];
    if (back_from >= 0) ms += prefix.back()[back_op] - prefix[back_from + 1][back_op];
    for (const auto& [stage, op, count] : body) ms += count * times[stage][op];
    return ms;
  }
};

// The chains of the header comment, rank by rank.
// With `from_backwards`, also those that start at a backward.
std::vector<Chain> ChainsOf(const Schedule& schedule, const std::vector<double>& hop_ms,
                           const std::vector<AllReduceLine>& allreduce, bool from_backwards) {
  const int stages = schedule.num_stages();
  // Prefix message times: before[s] = the hops between stages 0 .. s.
  std::vector<double> before(stages + 1, 0.0);
  for (int s = 0; s + 1 < stages; ++s) before[s + 1] = before[s] + hop_ms[s];
  std::vector<Chain> chains;
  for (int rank = 0; rank < schedule.num_ranks(); ++rank) {
    const std::vector<Action>& actions = schedule.ranks[rank];
    // Starts: the first forward of each of the rank's stages, after the forwards of the stages
    // before; and the first backward (B or I) of each, after the same micro-batch's forwards
    // through every stage and backwards through the stages after it.
    std::vector<size_t> starts, back_starts, ends;
    std::vector<char> seen_forward(stages, 0), seen_first_backward(stages, 0);
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      if (a.op == Op::kForward && !seen_forward[a.stage]) {
        seen_forward[a.stage] = 1;
        starts.push_back(i);
      }
      if (from_backwards && (a.op == Op::kBackward || a.op == Op::kBackwardInput) && !seen_first_backward[a.stage]) {
        seen_first_backward[a.stage] = 1;
        back_starts.push_back(i);
      }
    }
    std::vector<char> seen_backward(stages, 0);
    size_t last_compute = actions.size();
    for (size_t i = actions.size(); i-- > 0;) {
      const Action& a = actions[i];
      if (OpIndex(a.op) < 0) continue;
      if (last_compute == actions.size()) last_compute = i;
      if ((a.op == Op::kBackward || a.op == Op::kBackwardInput) && !seen_backward[a.stage]) {
        seen_backward[a.stage] = 1;
        ends.push_back(i);
      }
    }
    if (last_compute == actions.size()) continue;
    if (std::find(ends.begin(), ends.end(), last_compute) == ends.end()) ends.push_back(last_compute);
    // The (stage, op) slots the rank has, and its counts of each before every start and after
    // every end (a sweep; only those positions are kept).
    std::vector<int> used;
    std::vector<int> local(static_cast<size_t>(stages) * kOps, -1);
    for (const Action& a : actions) {
      const int op = OpIndex(a.op);
      if (op < 0) continue;
      const int slot = a.stage * kOps + op;
      if (local[slot] < 0) {
        local[slot] = static_cast<int>(used.size());
        used.push_back(slot);
      }
    }
    std::vector<std::vector<int>> counts(actions.size() + 1);
    std::vector<int> running(used.size(), 0);
    std::vector<char> wanted(actions.size() + 1, 0);
    for (size_t i : starts) wanted[i] = 1;
    for (size_t i : back_starts) wanted[i] = 1;
    for (size_t j : ends) wanted[j + 1] = 1;
    for (size_t k = 0; k <= actions.size(); ++k) {
      if (wanted[k]) counts[k] = running;
      if (k == actions.size()) break;
      const int op = OpIndex(actions[k].op);
      if (op >= 0) ++running[local[actions[k].stage * kOps + op]];
    }
    for (size_t i : starts) back_starts.push_back(i);  // (below: the forward starts last)
    const size_t backward_starts = back_starts.size() - starts.size();
    for (size_t k = 0; k < back_starts.size(); ++k) {
      const size_t i = back_starts[k];
      const bool from_backward = k < backward_starts;
      for (size_t j : ends) {
        if (j < i) continue;
        Chain chain;
        chain.rank = rank;
        chain.first_action = i;
        chain.to_last = j == last_compute;
        if (from_backward) {
          chain.head = stages;
          chain.back_from = actions[i].stage;
          chain.back_op = OpIndex(actions[i].op);
          // (every hop forward, and back from the last stage to this one)
          chain.hops = before[stages - 1] + (before[stages - 1] - before[chain.back_from]);
        } else {
          chain.head = actions[i].stage;
          chain.hops = before[chain.head];
        }
        for (size_t u = 0; u < used.size(); ++u) {
          const int count = counts[j + 1][u] - counts[i][u];
          if (count > 0) chain.body.push_back({used[u] / kOps, used[u] % kOps, static_cast<double>(count)});
        }
        if (j == last_compute && rank < static_cast<int>(allreduce.size())) {
          // The rank's all-reduce follows its last action: a chain of its own (the backwards
          // that follow the same action on other ranks run alongside it, not after it).
          Chain reduced = chain;
          reduced.reduced = true;
          const AllReduceLine& line = allreduce[rank];
          reduced.hops += line.fixed_ms;
          if (line.ms_per_byte > 0) {
            for (int t = 0; t < stages; ++t) {
              if (schedule.stage_rank[t] == rank) reduced.body.push_back({t, kP, line.ms_per_byte});
            }
          }
          chains.push_back(std::move(reduced));
        }
        const Action& last = actions[j];
        if (last.op == Op::kBackward || last.op == Op::kBackwardInput) {
          chain.tail = last.stage;
          chain.tail_op = OpIndex(last.op);
          chain.hops += before[last.stage];
        }
        chains.push_back(std::move(chain));
      }
    }
  }
  return chains;
}

// Per layer, the time of each op (I = B - W; F the least a forward of the layer costs, as a
// remat stage may run it under no_grad).
std::vector<std::array<double, kOps>> LayerTimes(const LayerTable& table) {
  std::vector<std::array<double, kOps>> times(table.num_layers());
  for (int l = 0; l < table.num_layers(); ++l) {
    const double f = table.LeastForwardMs(l, l + 1), b = table.BackwardMs(l, l + 1), w = table.WeightMs(l, l + 1);
    times[l] = {f, b, std::max(0.0, b - w), w, table.ParamBytes(l, l + 1)};
  }
  return times;
}

// The least of sum over layers of layer_cost(l, s) (layer l in stage s) over contiguous
// partitions with no empty stage; `ends` gets its stage ends.
template <typename LayerCost>
double LeastOverPartitionsOf(int stages, int layers, const LayerCost& layer_cost, std::vector<int>* ends) {
  // cost[l][s]: layers 0..l assigned, layer l in stage s; from[l][s]: whether layer l - 1 was in
  // stage s - 1 (a new stage starts at l).
  std::vector<std::vector<double>> cost(layers, std::vector<double>(stages, kInfinity));
  std::vector<std::vector<char>> from(layers, std::vector<char>(stages, 0));
  cost[0][0] = layer_cost(0, 0);
  for (int l = 1; l < layers; ++l) {
    // Stage s can hold layer l only if stages 0..s-1 hold at least s layers and s+1.. the rest.
    const int lo = std::max(0, stages - (layers - l));
    const int hi = std::min(stages - 1, l);
    for (int s = lo; s <= hi; ++s) {
      double best = cost[l - 1][s];
      char started = 0;
      if (s > 0 && cost[l - 1][s - 1] < best) {
        best = cost[l - 1][s - 1];
        started = 1;
      }
      if (best == kInfinity) continue;
      cost[l][s] = best + layer_cost(l, s);
      from[l][s] = started;
    }
  }
  const double least = cost[layers - 1][stages - 1];
  if (ends != nullptr) {
    ends->assign(stages, layers);
    for (int l = layers - 1, s = stages - 1; l > 0; --l) {
      if (from[l][s]) {
        (*ends)[s - 1] = l;
        --s;
      }
    }
  }
  return least;
}

// The least of sum_s sum_op c[s][op] x (stage s's op time) over the partitions.
double LeastOverPartitions(const Coefficients& c, const std::vector<OpTimes>& times, std::vector<int>* ends) {
  const auto layer_cost = [&](int l, int s) {
    double x = 0;
    for (int op = 0; op < kOps; ++op) x += c[s][op] * times[l][op];
    return x;
  };
  return LeastOverPartitionsOf(static_cast<int>(c.size()), static_cast<int>(times.size()), layer_cost, ends);
}

// The bound from `chains` (not empty): Frank-Wolfe steps from the average of `start` (chains'
// indices; empty: all of them).
Mix FrankWolfe(const std::vector<Chain>& chains, const std::vector<size_t>& start,
               const std::vector<std::array<double, kOps>>& times, int stages, const PathBoundInput& input) {
  // Start from the average; each step moves a share 2 / (k + 2) of the weight onto the chain
  // that is longest for the partition the current average prefers.
  Coefficients weights(stages, {0.0, 0.0, 0.0, 0.0, 0.0});
  double hops = 0;
  const size_t n = start.empty() ? chains.size() : start.size();
  for (size_t k = 0; k < n; ++k) {
    const Chain& chain = chains[start.empty() ? k : start[k]];
    chain.AddTo(1.0 / static_cast<double>(n), &weights);
    hops += chain.hops / static_cast<double>(n);
  }
  Mix best;
  std::vector<int> ends;
  std::vector<std::array<double, kOps>> stage_times(stages), prefix(stages + 1);
  for (int k = 0; k < input.iterations; ++k) {
    const double least = LeastOverPartitions(weights, times, &ends) + hops;
    if (least > best.bound || k == 0) best = Mix{least, weights, hops};
    if ((input.enough > 0 && best.bound >= input.enough) || k + 1 == input.iterations) break;
    // The partition's stage times, and its longest chain.
    prefix[0] = {0.0, 0.0, 0.0, 0.0, 0.0};
    for (int s = 0, l = 0; s < stages; ++s) {
      stage_times[s] = {0.0, 0.0, 0.0, 0.0, 0.0};
      for (; l < ends[s]; ++l) {
        for (int op = 0; op < kOps; ++op) stage_times[s][op] += times[l][op];
      }
      for (int op = 0; op < kOps; ++op) prefix[s + 1][op] = prefix[s][op] + stage_times[s][op];
    }
    const Chain* longest = nullptr;
    double longest_ms = -1;
    {
      for (const Chain& chain : chains) {
        const double ms = chain.Ms(stage_times, prefix);
        if (ms > longest_ms) {
          longest_ms = ms;
          longest = &chain;
        }
      }
    }
    const double step = 2.0 / (k + 2.0);
    for (auto& row : weights) {
      for (double& x : row) x *= 1 - step;
    }
    longest->AddTo(step, &weights);
    hops = (1 - step) * hops + step * longest->hops;
  }
  return best;
}

// A convex combination of chains: its coefficients per stage and op, and its messages' time.
struct Row {
  Coefficients c;
  double hops = 0;
};

Row RowOf(const std::vector<Chain>& chains, const std::vector<size_t>& mix, int stages) {
  Row row{Coefficients(stages, {0.0, 0.0, 0.0, 0.0, 0.0}), 0.0};
  const size_t n = mix.empty() ? chains.size() : mix.size();
  for (size_t k = 0; k < n; ++k) {
    const Chain& chain = chains[mix.empty() ? k : mix[k]];
    chain.AddTo(1.0 / static_cast<double>(n), &row.c);
    row.hops += chain.hops / static_cast<double>(n);
  }
  return row;
}

Row RowOf(const GraphPath& path, int stages) {
  Row row{Coefficients(stages, {0.0, 0.0, 0.0, 0.0, 0.0}), path.hops};
  for (const auto& [stage, op, count] : path.body) row.c[stage][op] += count;
  return row;
}

double RowMs(const Row& row, const std::vector<std::array<double, kOps>>& stage_times) {
  double ms = row.hops;
  for (size_t s = 0; s < stage_times.size(); ++s) {
    for (int op = 0; op < kOps; ++op) ms += row.c[s][op] * stage_times[s][op];
  }
  return ms;
}

std::vector<std::array<double, kOps>> StageTimesOf(const std::vector<int>& ends,
                                                    const std::vector<std::array<double, kOps>>& times) {
  std::vector<std::array<double, kOps>> stage_times(ends.size());
  for (size_t s = 0, l = 0; s < ends.size(); ++s) {
    stage_times[s] = {0.0, 0.0, 0.0, 0.0, 0.0};
    for (; l < static_cast<size_t>(ends[s]); ++l) {
      for (int op = 0; op < kOps; ++op) stage_times[s][op] += times[l][op];
    }
  }
  return stage_times;
}

// Per stage, how many micro-batches' activations its rank holds at the instant it holds the most
// (of all its stages together): forwards done whose backward (B or I) has not run.
std::vector<double> HeldAtPeak(const Schedule& schedule) {
  std::vector<double> held(schedule.num_stages(), 0.0);
  const auto change = [](const Action& a) {
    return a.op == Op::kForward ? 1 : a.op == Op::kBackward || a.op == Op::kBackwardInput ? -1 : 0;
  };
  for (const std::vector<Action>& actions : schedule.ranks) {
    // The instant (after action `peak`) of the most, then each stage's count there.
    int total = 0, most = 0;
    size_t peak = 0;
    for (size_t i = 0; i < actions.size(); ++i) {
      total += change(actions[i]);
      if (total > most) {
        most = total;
        peak = i;
      }
    }
    if (most == 0) continue;
    for (size_t i = 0; i <= peak; ++i) held[actions[i].stage] += change(actions[i]);
  }
  return held;
}

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

// The least over partitions of the mix's cost plus the memory's price (as above); `ends` gets the
// partition, `stage_times` its stage times with what it recomputes, `holds` what each rank holds.
double LeastPriced(const Coefficients& c, double hops, const std::vector<OpTimes>& times, const MemoryPrices& memory,
                   std::vector<int>* ends, std::vector<OpTimes>* stage_times, std::vector<double>* holds) {
  const int stages = static_cast<int>(c.size()), layers = static_cast<int>(times.size());
  if (!memory.on()) {
    const double least = LeastOverPartitions(c, times, ends) + hops;
    *stage_times = StageTimesOf(*ends, times);
    return least;
  }
  const auto recompute = [&](int s) { return c[s][kB] + c[s][kI]; };
  const auto layer_cost = [&](int l, int s) {
    double x = 0;
    for (int op = 0; op < kOps; ++op) x += c[s][op] * times[l][op];
    const double u = memory.price[(*memory.stage_rank)[s]];
    x += u * memory.input->static_bytes[l];
    x += memory.Keeps(l, s, recompute(s), times[l][kF]) ? u * memory.held[s] * memory.input->activation_bytes[l]
                                                          : recompute(s) * times[l][kF];
    return x;
  };
  double priced = 0;
  for (double u : memory.price) priced += u * memory.Limit();
  const double least = LeastOverPartitionsOf(stages, layers, layer_cost, ends) + hops - priced;
  *stage_times = StageTimesOf(*ends, times);
  holds->assign(memory.price.size(), 0.0);
  for (int s = 0, l = 0; s < stages; ++s) {
    for (; l < (*ends)[s]; ++l) {
      double& hold = (*holds)[(*memory.stage_rank)[s]];
      hold += memory.input->static_bytes[l];
      if (memory.Keeps(l, s, recompute(s), times[l][kF])) {
        hold += memory.held[s] * memory.input->activation_bytes[l];
      } else {
        (*stage_times)[s][kB] += times[l][kF];
        (*stage_times)[s][kI] += times[l][kF];
      }
    }
  }
  return least;
}

// The bound as a game (a double oracle): the bound picks a mix of chains, a partition answers
// with the least weighted length. Over the chains and partitions met so far the game is solved
// exactly (planner/matrix_game.h); the mix of chains it finds is priced against every partition
// by the dynamic program (a bound, and a new partition), and the graph's longest path for the
// partitions' mix joins the chains. It stops when no path is longer, for the partitions' mix,
// than the bound: the chains' best mix is then found.
constexpr size_t kGameKept = 64;
// Memory is priced (a constraint row per rank) up to this many ranks.
constexpr int kMemoryRows = 64;
// The game stops once no path, for the partitions' mix, is longer than the bound by this share.
constexpr double kGameTolerance = 1e-3;

Mix GameBound(std::vector<Row> chains, const PrecedenceGraph& graph, const std::vector<OpTimes>& times, int stages,
              const PathBoundInput& input, MemoryPrices memory) {
  const int layers = static_cast<int>(times.size());
  // The game starts from the partition that spreads the work most evenly, and its longest paths
  // (one to each rank's end): the partitions a mix of chains prefers are lopsided at first, and
  // so would their paths be. With memory priced, the same partition recomputing every layer too
  // (a column that keeps the memory rows when any does).
  std::vector<int> ends(stages, layers);
  {
    std::vector<double> work(times.size() + 1, 0.0);
    for (int l = 0; l < layers; ++l) work[l + 1] = work[l] + times[l][kF] + times[l][kB];
    for (int s = 0, l = 0; s + 1 < stages; ++s) {
      const double target = work.back() * (s + 1) / stages;
      int e = l + 1;
      while (e < layers - (stages - 1 - s) && work[e + 1] <= target) ++e;
      if (e < layers - (stages - 1 - s) && target - work[e] > work[e + 1] - target) ++e;
      ends[s] = e;
      l = e;
    }
  }
  struct Column {
    std::vector<OpTimes> times;  // its stage times, what it recomputes included
    std::vector<double> holds;   // per rank, with memory priced
  };
  std::vector<Column> columns;
  const int ranks = memory.on() ? static_cast<int>(memory.price.size()) : 0;
  const auto balanced = [&](bool recompute) {
    Column column{StageTimesOf(ends, times), std::vector<double>(ranks, 0.0)};
    for (int s = 0, l = 0; s < stages && ranks > 0; ++s) {
      for (; l < ends[s]; ++l) {
        double& hold = column.holds[(*memory.stage_rank)[s]];
        hold += memory.input->static_bytes[l];
        if (recompute) {
          column.times[s][kB] += times[l][kF];
          column.times[s][kI] += times[l][kF];
        } else {
          hold += memory.held[s] * memory.input->activation_bytes[l];
        }
      }
    }
    return column;
  };
  columns.push_back(balanced(false));
  for (const GraphPath& path : LongestPaths(graph, columns[0].times, input.allreduce, true)) {
    chains.push_back(RowOf(path, stages));
  }
  if (memory.on() && memory.input->may_recompute) columns.push_back(balanced(true));
  double scale = 0;
  for (const Row& row : chains) scale = std::max(scale, RowMs(row, columns[0].times));
  // The game's rows: the chains (memory_rank -1), then, with memory priced, one constraint per
  // rank (what it holds less the limit, over the limit: at most 0 on average over the
  // partitions' mix), whose prices are the memory's multipliers; then each path found.
  std::vector<Row> rows = std::move(chains);
  std::vector<int> memory_rank(rows.size(), -1);
  MatrixGame game(scale);
  for (size_t i = 0; i < rows.size(); ++i) game.AddRow({});
  for (int r = 0; r < ranks; ++r) {
    game.AddRow({}, /*constraint=*/true);
    rows.emplace_back();
    memory_rank.push_back(r);
  }
  const auto entries = [&](const Column& column) {
    std::vector<double> out;
    for (size_t i = 0; i < rows.size(); ++i) {
      out.push_back(memory_rank[i] < 0 ? RowMs(rows[i], column.times)
                                       : (column.holds[memory_rank[i]] - memory.Limit()) / memory.Limit());
    }
    return out;
  };
  for (const Column& column : columns) game.AddColumn(entries(column));
  Mix best;
  for (int k = 0; k < input.game_iterations; ++k) {
    MatrixGameSolution solution = game.Solve();
    if (!solution.bounded) break;  // no partition met keeps memory (the bound stands without it)
    // The chains and partitions outside both mixes are dropped once there are many (the
    // program's pivots grow with its size); the oracles bring back any that matter.
    if (rows.size() > kGameKept + ranks || columns.size() > kGameKept) {
      std::vector<char> want_rows(rows.size()), want_columns(columns.size());
      for (size_t i = 0; i < rows.size(); ++i) {
        want_rows[i] = memory_rank[i] >= 0 || rows.size() <= kGameKept + ranks || solution.row[i] > 0;
      }
      for (size_t j = 0; j < columns.size(); ++j) {
        want_columns[j] = columns.size() <= kGameKept || solution.column[j] > 0;
      }
      const MatrixGame::Kept kept = game.Prune(want_rows, want_columns);
      size_t n = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (!kept.rows[i]) continue;
        if (n != i) {
          rows[n] = std::move(rows[i]);
          memory_rank[n] = memory_rank[i];
          solution.row[n] = solution.row[i];
        }
        ++n;
      }
      rows.resize(n);
      memory_rank.resize(n);
      solution.row.resize(n);
      n = 0;
      for (size_t j = 0; j < columns.size(); ++j) {
        if (!kept.columns[j]) continue;
        if (n != j) {
          columns[n] = std::move(columns[j]);
          solution.column[n] = solution.column[j];
        }
        ++n;
      }
      columns.resize(n);
      solution.column.resize(n);
    }
    // The chains' mix and the memory's prices against every partition: a bound, and the
    // partition that answers it.
    Row weighted{Coefficients(stages, {0.0, 0.0, 0.0, 0.0, 0.0}), 0.0};
    for (size_t i = 0; i < rows.size(); ++i) {
      if (solution.row[i] == 0) continue;
      if (memory_rank[i] >= 0) {
        memory.price[memory_rank[i]] = solution.row[i] / memory.Limit();
        continue;
      }
      for (int s = 0; s < stages; ++s) {
        for (int op = 0; op < kOps; ++op) weighted.c[s][op] += solution.row[i] * rows[i].c[s][op];
      }
      weighted.hops += solution.row[i] * rows[i].hops;
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      if (memory_rank[i] >= 0 && solution.row[i] == 0) memory.price[memory_rank[i]] = 0;
    }
    Column answer;
    const double least = LeastPriced(weighted.c, weighted.hops, times, memory, &ends, &answer.times, &answer.holds);
    if (least > best.bound || k == 0) best = Mix{least, weighted.c, weighted.hops};
    if (input.enough > 0 && best.bound >= input.enough) break;
    // The partitions' mix, and its longest path.
    std::vector<OpTimes> mixed(stages, {0.0, 0.0, 0.0, 0.0, 0.0});
    for (size_t j = 0; j < columns.size(); ++j) {
      if (solution.column[j] == 0) continue;
      for (int s = 0; s < stages; ++s) {
        for (int op = 0; op < kOps; ++op) mixed[s][op] += solution.column[j] * columns[j].times[s][op];
      }
    }
    const std::vector<GraphPath> longest_path = LongestPaths(graph, mixed, input.allreduce, false);
    if (longest_path.empty()) break;
    Row row = RowOf(longest_path.front(), stages);
    // (the game's value lies between the bound and that path's length)
    if (RowMs(row, mixed) <= best.bound * (1 + kGameTolerance)) break;
    // The path joins as a row (the game's basis stays optimal: the dual simplex), then the
    // partition as a column.
    std::vector<double> lengths;
    for (const Column& column : columns) lengths.push_back(RowMs(row, column.times));
    game.AddRow(lengths);
    rows.push_back(std::move(row));
    memory_rank.push_back(-1);
    columns.push_back(std::move(answer));
    game.AddColumn(entries(columns.back()));
  }
  return best;
}

}  // namespace

double PathLowerBound(const PathBoundInput& input) {
  const Schedule& schedule = *input.schedule;
  const int stages = schedule.num_stages();
  const int layers = input.table->num_layers();
  if (stages < 1 || layers < stages) return 0.0;
  const std::vector<std::array<double, kOps>> times = LayerTimes(*input.table);
  // Runs from several starts, the largest: the chains that start at a forward, from their
  // average; then from the average over the ranks of each one's whole order; then all chains,
  // from their average, and from the average over the ranks of each one's chain from its first
  // backward to its last action (its whole drain, which the average over all chains dilutes and
  // Frank-Wolfe's few steps need not find: zero-bubble schedules at small M); then the game; and
  // the best mix met with memory priced.
  const std::vector<Chain> forward_chains = ChainsOf(schedule, input.hop_ms, input.allreduce, false);
  if (forward_chains.empty()) return 0.0;
  Mix best;
  const auto enough = [&](Mix mix) {
    if (mix.bound > best.bound || best.c.empty()) best = std::move(mix);
    return input.enough > 0 && best.bound >= input.enough;
  };
  if (enough(FrankWolfe(forward_chains, {}, times, stages, input))) return best.bound;
  // Each rank's whole order, from its first forward to its last action and its all-reduce: their
  // average is the work and the all-reduces spread over the ranks (plus the average fill), which
  // the average over all chains dilutes with chains that end before the all-reduce.
  std::vector<size_t> wholes(schedule.num_ranks(), forward_chains.size());
  for (size_t c = 0; c < forward_chains.size(); ++c) {
    const Chain& chain = forward_chains[c];
    if (!chain.to_last || chain.reduced != !input.allreduce.empty()) continue;
    size_t& at = wholes[chain.rank];
    if (at == forward_chains.size() || chain.first_action < forward_chains[at].first_action) at = c;
  }
  wholes.erase(std::remove(wholes.begin(), wholes.end(), forward_chains.size()), wholes.end());
  if (!wholes.empty() && enough(FrankWolfe(forward_chains, wholes, times, stages, input))) return best.bound;
  if (input.game_iterations < 1) return best.bound;  // (a quick bound: the runs above only)
  const std::vector<Chain> chains = ChainsOf(schedule, input.hop_ms, input.allreduce, true);
  std::vector<size_t> drains(schedule.num_ranks(), chains.size());
  for (size_t c = 0; c < chains.size(); ++c) {
    const Chain& chain = chains[c];
    if (chain.back_from < 0 || !chain.to_last || chain.reduced) continue;
    size_t& at = drains[chain.rank];
    if (at == chains.size() || chain.first_action < chains[at].first_action) at = c;
  }
  drains.erase(std::remove(drains.begin(), drains.end(), chains.size()), drains.end());
  if (chains.size() > forward_chains.size() && enough(FrankWolfe(chains, {}, times, stages, input))) return best.bound;
  if (!drains.empty() && enough(FrankWolfe(chains, drains, times, stages, input))) return best.bound;
  const std::optional<PrecedenceGraph> graph = PrecedenceGraphOf(schedule, input.hop_ms, input.max_graph_nodes);
  if (graph) {
    std::vector<Row> rows = {RowOf(forward_chains, {}, stages), RowOf(chains, {}, stages)};
    if (!wholes.empty()) rows.push_back(RowOf(forward_chains, wholes, stages));
    if (!drains.empty()) rows.push_back(RowOf(chains, drains, stages));
    MemoryPrices memory;
    if (input.memory_limit_bytes > 0 && !input.static_bytes.empty() && schedule.num_ranks() <= kMemoryRows) {
      memory.input = &input;
      memory.stage_rank = &schedule.stage_rank;
      memory.held = HeldAtPeak(schedule);
      memory.price.assign(schedule.num_ranks(), 0.0);
    }
    enough(GameBound(std::move(rows), *graph, times, stages, input, std::move(memory)));
  }
  return best.bound;
}

}  // namespace gpipe
