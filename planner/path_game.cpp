#include "planner/path_game.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "planner/matrix_game.h"

namespace gpipe::path_internal {
namespace {

// Past this many chains (or partitions) the game drops those outside both mixes.
constexpr size_t kGameKept = 64;
// Memory is priced (a constraint row per instant, up to two per rank) up to this many ranks.
constexpr int kMemoryRanks = 64;
// The game stops once no path, for the partitions' mix, is longer than the bound by this share.
constexpr double kGameTolerance = 1e-3;

// What layer l in stage s holds at instant `at`: its model state and the activations of the
// instant's micro-batches, kept (`keep`) or recomputed.
double Held(const MemoryPrices& memory, const MemoryInstant& at, int s, int l, bool keep) {
  return memory.input->static_bytes[l] + (keep ? at.kept[s] : at.recomputed[s]) * memory.input->activation_bytes[l];
}

// Layer l in stage s, keeping its activations (`keep`) or recomputing its forward: what it adds
// to what its rank holds at each of its instants (Held) and, recomputed, to its stage's backwards
// (B and I).
void Place(const MemoryPrices& memory, const std::vector<OpTimes>& times, int l, int s, bool keep,
           std::vector<OpTimes>* stage_times, std::vector<double>* holds) {
  for (int i : memory.by_rank[(*memory.stage_rank)[s]]) (*holds)[i] += Held(memory, memory.instants[i], s, l, keep);
  if (!keep) {
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

// The least a layer in stage s holds at instant `at`: recomputed where it may (no instant holds
// more of a recomputed layer than of a kept one).
double LeastHeld(const MemoryPrices& memory, const MemoryInstant& at, int s, int l) {
  return Held(memory, at, s, l, !memory.input->may_recompute);
}

// What each instant's rank holds at least under the partition ending its stages at `ends`.
std::vector<double> LeastHolds(const MemoryPrices& memory, const std::vector<int>& ends) {
  std::vector<double> holds(memory.instants.size(), 0.0);
  for (int s = 0, l = 0; s < static_cast<int>(ends.size()); ++s) {
    for (; l < ends[s]; ++l) {
      for (int i : memory.by_rank[(*memory.stage_rank)[s]]) holds[i] += LeastHeld(memory, memory.instants[i], s, l);
    }
  }
  return holds;
}

// Whether any partition keeps every instant's rank within the limit, its layers holding the
// least (LeastHolds): a game of the instants (the row player, a mix of them) against partitions
// (the column player), by double oracle as GameBound's, each partition holding (what its rank
// holds - limit) / limit at an instant. The least over every partition of the instants' mix (a
// dynamic program) above 0 proves that none fits: every plan holds more than the limit at one
// of them. Returns the partitions (stage ends) of a mix of the game's met partitions that keeps
// every instant within the limit on average; none where it proves that nothing fits
// (`fits` false) or settles neither in `rounds` (`fits` true).
std::vector<std::vector<int>> FittingMix(const MemoryPrices& memory, int stages, std::vector<int> ends, int rounds,
                                         const std::function<bool()>& time_up, bool* fits) {
  *fits = true;
  const int layers = static_cast<int>(memory.input->static_bytes.size());
  const double limit = memory.Limit();
  const size_t instants = memory.instants.size();
  MatrixGame game(2.0);  // (entries are at least -1: a rank that holds nothing)
  for (size_t i = 0; i < instants; ++i) game.AddRow({});
  std::vector<std::vector<int>> met;
  const auto join = [&] {
    const std::vector<double> holds = LeastHolds(memory, ends);
    std::vector<double> entries(instants);
    for (size_t i = 0; i < instants; ++i) entries[i] = (holds[i] - limit) / limit;
    game.AddColumn(entries);
    met.push_back(ends);
  };
  join();
  for (int k = 0; k < rounds && !(time_up && time_up()); ++k) {
    const MatrixGameSolution solution = game.Solve();
    if (solution.value <= 0) {
      std::vector<std::vector<int>> mix;
      for (size_t j = 0; j < met.size(); ++j) {
        if (solution.column[j] > 0) mix.push_back(met[j]);
      }
      return mix;
    }
    // The partition that holds the least at the instants' mix (its prices sum to 1).
    const auto layer_cost = [&](int l, int s) {
      double x = 0;
      for (int i : memory.by_rank[(*memory.stage_rank)[s]]) {
        if (solution.row[i] != 0) x += solution.row[i] * LeastHeld(memory, memory.instants[i], s, l);
      }
      return x / limit;
    };
    const double least = LeastOverPartitionsOf(stages, layers, layer_cost, [](int, int) { return 0.0; }, &ends) - 1.0;
    // (relative to the limit; the sums round within far less)
    if (least > 1e-9) {
      *fits = false;
      return {};
    }
    join();
  }
  return {};
}

}  // namespace

double PricedLayerCost(const Coefficients& c, const std::vector<OpTimes>& times, const MemoryPrices& memory, int l,
                       int s) {
  double x = 0;
  for (int op = 0; op < kOps; ++op) x += c[s][op] * times[l][op];
  if (!memory.on()) return x;
  const double recompute = c[s][kB] + c[s][kI];
  const double activation = memory.input->activation_bytes[l];
  x += memory.static_price[s] * memory.input->static_bytes[l];
  x += memory.Keeps(l, s, recompute, times[l][kF]) ? memory.keep_price[s] * activation
                                                     : recompute * times[l][kF] + memory.recompute_price[s] * activation;
  return x;
}

std::vector<MemoryInstant> MemoryInstants(const Schedule& schedule) {
  const int stages = schedule.num_stages();
  // With full backwards a layer recomputes one micro-batch at a time, for its B only: the first
  // instant is right after a forward's start, where it holds none, and the late one right after a
  // B's start (GameBound prices it once converged without it). With split backwards the
  // recomputed activations wait for W, often for many micro-batches.
  bool split = false;
  for (const std::vector<Action>& actions : schedule.ranks) {
    for (const Action& a : actions) split = split || a.op == Op::kBackwardWeight;
  }
  std::vector<MemoryInstant> instants;
  for (int r = 0; r < schedule.num_ranks(); ++r) {
    // The counts right after each compute action's start (what it adds then: a forward its stash,
    // a B or I its recomputed activations), the most of each kind; a B or W ends both.
    std::vector<double> kept(stages, 0.0), recomputed(stages, 0.0);
    std::pair<double, double> totals{0, 0}, most_kept{0, 0}, most_recomputed{0, 0};
    MemoryInstant by_kept{r, kept, recomputed}, by_recomputed{r, kept, recomputed};
    for (const Action& a : schedule.ranks[r]) {
      const int s = a.stage;
      if (a.op == Op::kForward) {
        kept[s] += 1;
        totals.first += 1;
      } else if (a.op == Op::kBackward || a.op == Op::kBackwardInput) {
        recomputed[s] += 1;
        totals.second += 1;
      } else if (a.op != Op::kBackwardWeight) {
        continue;  // (communication)
      }
      if ((split || a.op == Op::kForward) && totals > most_kept) {
        most_kept = totals;
        by_kept.kept = kept;
        by_kept.recomputed = recomputed;
      }
      // (split: the most recomputed, then kept; full backwards: at a B, the most kept)
      const std::pair<double, double> order = split ? std::make_pair(totals.second, totals.first) : totals;
      if ((split || a.op == Op::kBackward) && order > most_recomputed) {
        most_recomputed = order;
        by_recomputed.kept = kept;
        by_recomputed.recomputed = recomputed;
      }
      if (a.op == Op::kBackward || a.op == Op::kBackwardWeight) {
        kept[s] -= 1;
        recomputed[s] -= 1;
        totals.first -= 1;
        totals.second -= 1;
      }
    }
    if (most_kept == std::pair<double, double>{0, 0}) continue;  // (a rank with no forwards)
    const bool same = by_kept.kept == by_recomputed.kept && by_kept.recomputed == by_recomputed.recomputed;
    by_recomputed.late = !split;
    instants.push_back(std::move(by_kept));
    if (!same && most_recomputed != std::pair<double, double>{0, 0}) instants.push_back(std::move(by_recomputed));
  }
  return instants;
}

void MemoryPrices::SetPrices(std::vector<double> prices) {
  price = std::move(prices);
  const size_t stages = stage_rank->size();
  static_price.assign(stages, 0.0);
  keep_price.assign(stages, 0.0);
  recompute_price.assign(stages, 0.0);
  for (size_t s = 0; s < stages; ++s) {
    for (int i : by_rank[(*stage_rank)[s]]) {
      static_price[s] += price[i];
      keep_price[s] += price[i] * instants[i].kept[s];
      recompute_price[s] += price[i] * instants[i].recomputed[s];
    }
  }
}

MemoryPrices MemoryPricesFor(const Schedule& schedule, const PathBoundInput& input) {
  MemoryPrices memory;
  if (input.memory_limit_bytes <= 0 || input.static_bytes.empty() || schedule.num_ranks() > kMemoryRanks) return memory;
  memory.input = &input;
  memory.stage_rank = &schedule.stage_rank;
  memory.instants = MemoryInstants(schedule);
  memory.by_rank.assign(schedule.num_ranks(), {});
  for (size_t i = 0; i < memory.instants.size(); ++i) memory.by_rank[memory.instants[i].rank].push_back(static_cast<int>(i));
  memory.SetPrices(std::vector<double>(memory.instants.size(), 0.0));
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
    std::vector<double> holds;   // per instant, with memory priced
  };
  std::vector<Column> columns;
  const int instants = memory.on() ? static_cast<int>(memory.price.size()) : 0;
  const auto column_of = [&](const std::vector<int>& stage_ends, bool recompute) {
    Column column{StageTimesOf(stage_ends, times, input.hops), std::vector<double>(instants, 0.0)};
    for (int s = 0, l = 0; s < stages && instants > 0; ++s) {
      for (; l < stage_ends[s]; ++l) Place(memory, times, l, s, !recompute, &column.times, &column.holds);
    }
    return column;
  };
  columns.push_back(column_of(ends, false));
  for (const GraphPath& path : LongestPaths(graph, columns[0].times, input.allreduce, true)) {
    chains.push_back(RowOf(path, stages));
  }
  if (memory.on() && memory.input->may_recompute) columns.push_back(column_of(ends, true));
  double scale = 0;
  for (const Row& row : chains) scale = std::max(scale, RowMs(row, columns[0].times));
  // The game's rows: the chains (memory_row -1), then, with memory priced, one constraint per
  // instant (what its rank holds then less the limit, over the limit: at most 0 on average over
  // the partitions' mix), whose prices are the memory's multipliers; then each path found.
  std::vector<Row> rows = std::move(chains);
  std::vector<int> memory_row(rows.size(), -1);
  MatrixGame game(scale);
  for (size_t i = 0; i < rows.size(); ++i) game.AddRow({});
  for (int i = 0; i < instants; ++i) {
    if (memory.instants[i].late) continue;
    game.AddRow({}, /*constraint=*/true);
    rows.emplace_back();
    memory_row.push_back(i);
  }
  const auto entries = [&](const Column& column) {
    std::vector<double> out;
    for (size_t i = 0; i < rows.size(); ++i) {
      out.push_back(memory_row[i] < 0 ? RowMs(rows[i], column.times)
                                       : (column.holds[memory_row[i]] - memory.Limit()) / memory.Limit());
    }
    return out;
  };
  for (const Column& column : columns) game.AddColumn(entries(column));
  Mix best;
  bool sought_fitting = false, late_joined = false;
  for (int k = 0; k < input.game_iterations && !(k > 0 && input.time_up && input.time_up()); ++k) {
    MatrixGameSolution solution = game.Solve();
    if (!solution.bounded) {
      // No mix of the partitions met keeps memory: find partitions that do, or prove that none
      // does (no plan fits: the bound is infinite). Where neither is found, or the partitions
      // found still do not (rounding), the bound stands without memory.
      if (sought_fitting) break;
      sought_fitting = true;
      bool fits = true;
      const std::vector<std::vector<int>> fitting = FittingMix(memory, stages, ends, input.game_iterations, input.time_up, &fits);
      if (!fits) return Mix{std::numeric_limits<double>::infinity(), {}, 0.0, {}};
      if (fitting.empty()) break;
      for (const std::vector<int>& stage_ends : fitting) {
        columns.push_back(column_of(stage_ends, memory.input->may_recompute));
        game.AddColumn(entries(columns.back()));
      }
      continue;
    }
    // The chains and partitions outside both mixes are dropped once there are many (the
    // program's pivots grow with its size); the oracles bring back any that matter.
    if (rows.size() > kGameKept + instants || columns.size() > kGameKept) {
      std::vector<char> want_rows(rows.size()), want_columns(columns.size());
      for (size_t i = 0; i < rows.size(); ++i) {
        want_rows[i] = memory_row[i] >= 0 || rows.size() <= kGameKept + instants || solution.row[i] > 0;
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
          memory_row[n] = memory_row[i];
          solution.row[n] = solution.row[i];
        }
        ++n;
      }
      rows.resize(n);
      memory_row.resize(n);
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
    std::vector<double> prices(instants, 0.0);
    for (size_t i = 0; i < rows.size(); ++i) {
      if (solution.row[i] == 0) continue;
      if (memory_row[i] >= 0) {
        prices[memory_row[i]] = solution.row[i] / memory.Limit();
        continue;
      }
      for (int s = 0; s < stages; ++s) {
        for (int op = 0; op < kOps; ++op) weighted.c[s][op] += solution.row[i] * rows[i].c[s][op];
      }
      weighted.hops += solution.row[i] * rows[i].hops;
    }
    if (memory.on()) memory.SetPrices(std::move(prices));
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
    if (RowMs(row, mixed) <= best.bound * (1 + kGameTolerance)) {
      // Converged: the late instants that the partitions' mix holds more than the limit at join
      // (each column's holds there are kept), and it goes on; where it holds none of them over,
      // the mix stands with them, and so does the bound.
      if (late_joined) break;
      late_joined = true;
      bool any = false;
      for (int i = 0; i < instants; ++i) {
        if (!memory.instants[i].late) continue;
        std::vector<double> holds;
        double mixed_hold = 0;
        for (size_t j = 0; j < columns.size(); ++j) {
          holds.push_back((columns[j].holds[i] - memory.Limit()) / memory.Limit());
          mixed_hold += solution.column[j] * holds.back();
        }
        if (mixed_hold <= 1e-9) continue;
        game.AddRow(holds, /*constraint=*/true);
        rows.emplace_back();
        memory_row.push_back(i);
        any = true;
      }
      if (!any) break;
      continue;
    }
    // The path joins as a row (the game's basis stays optimal: the dual simplex), then the
    // partition as a column.
    std::vector<double> lengths;
    for (const Column& column : columns) lengths.push_back(RowMs(row, column.times));
    game.AddRow(lengths);
    rows.push_back(std::move(row));
    memory_row.push_back(-1);
    columns.push_back(std::move(answer));
    game.AddColumn(entries(columns.back()));
  }
  return best;
}

}  // namespace gpipe::path_internal
