#include "planner/path_game.h"

#include <algorithm>
#include <cmath>

#include "planner/matrix_game.h"

namespace gpipe::path_internal {
namespace {

// Past this many chains (or partitions) the game drops those outside both mixes.
constexpr size_t kGameKept = 64;
// Memory is priced (a constraint row per rank) up to this many ranks.
constexpr int kMemoryRows = 64;
// The game stops once no path, for the partitions' mix, is longer than the bound by this share.
constexpr double kGameTolerance = 1e-3;

// Layer l in stage s, keeping its activations (`keep`) or recomputing its forward: what it adds
// to its rank's hold (model state, and the activations of HeldAtPeak's micro-batches) or to its
// stage's backwards (B and I).
void Place(const MemoryPrices& memory, const std::vector<OpTimes>& times, int l, int s, bool keep,
           std::vector<OpTimes>* stage_times, std::vector<double>* holds) {
  double& hold = (*holds)[(*memory.stage_rank)[s]];
  hold += memory.input->static_bytes[l];
  if (keep) {
    hold += memory.held[s] * memory.input->activation_bytes[l];
  } else {
    (*stage_times)[s][kB] += times[l][kF];
    (*stage_times)[s][kI] += times[l][kF];
  }
}

// The least over partitions of the mix's cost plus the memory's price (as above); `ends` gets the
// partition, `stage_times` its stage times with what it recomputes, `holds` what each rank holds.
double LeastPriced(const Coefficients& c, double hops, const std::vector<OpTimes>& times, const BoundaryHops& messages,
                   const MemoryPrices& memory, std::vector<int>* ends, std::vector<OpTimes>* stage_times,
                   std::vector<double>* holds) {
  const int stages = static_cast<int>(c.size()), layers = static_cast<int>(times.size());
  if (!memory.on()) {
    const double least = LeastOverPartitions(c, times, messages, ends) + hops;
    *stage_times = StageTimesOf(*ends, times, messages);
    return least;
  }
  const auto recompute = [&](int s) { return c[s][kB] + c[s][kI]; };
  const auto layer_cost = [&](int l, int s) { return PricedLayerCost(c, times, memory, l, s); };
  double priced = 0;
  for (double u : memory.price) priced += u * memory.Limit();
  const auto end_cost = [&](int s, int l) { return EndCost(c, messages, s, l); };
  const double least = LeastOverPartitionsOf(stages, layers, layer_cost, end_cost, ends) + hops - priced;
  *stage_times = StageTimesOf(*ends, times, messages);
  holds->assign(memory.price.size(), 0.0);
  for (int s = 0, l = 0; s < stages; ++s) {
    for (; l < (*ends)[s]; ++l) {
      Place(memory, times, l, s, memory.Keeps(l, s, recompute(s), times[l][kF]), stage_times, holds);
    }
  }
  return least;
}

}  // namespace

double PricedLayerCost(const Coefficients& c, const std::vector<OpTimes>& times, const MemoryPrices& memory, int l,
                       int s) {
  double x = 0;
  for (int op = 0; op < kOps; ++op) x += c[s][op] * times[l][op];
  if (!memory.on()) return x;
  const double u = memory.price[(*memory.stage_rank)[s]];
  const double recompute = c[s][kB] + c[s][kI];
  x += u * memory.input->static_bytes[l];
  x += memory.Keeps(l, s, recompute, times[l][kF]) ? u * memory.held[s] * memory.input->activation_bytes[l]
                                                     : recompute * times[l][kF];
  return x;
}

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

MemoryPrices MemoryPricesFor(const Schedule& schedule, const PathBoundInput& input) {
  MemoryPrices memory;
  if (input.memory_limit_bytes <= 0 || input.static_bytes.empty() || schedule.num_ranks() > kMemoryRows) return memory;
  memory.input = &input;
  memory.stage_rank = &schedule.stage_rank;
  memory.held = HeldAtPeak(schedule);
  memory.price.assign(schedule.num_ranks(), 0.0);
  return memory;
}

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
    Column column{StageTimesOf(ends, times, input.hops), std::vector<double>(ranks, 0.0)};
    for (int s = 0, l = 0; s < stages && ranks > 0; ++s) {
      for (; l < ends[s]; ++l) Place(memory, times, l, s, !recompute, &column.times, &column.holds);
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
  for (int k = 0; k < input.game_iterations && !(k > 0 && input.time_up && input.time_up()); ++k) {
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
    Row weighted{Coefficients(stages, OpTimes{}), 0.0};
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
    const double least = LeastPriced(weighted.c, weighted.hops, times, input.hops, memory, &ends, &answer.times, &answer.holds);
    if (least > best.bound || k == 0) best = Mix{least, weighted.c, weighted.hops, memory.price};
    if (input.enough > 0 && best.bound >= input.enough) break;
    // The partitions' mix, and its longest path.
    std::vector<OpTimes> mixed(stages, OpTimes{});
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

}  // namespace gpipe::path_internal
