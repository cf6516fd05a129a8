#include "planner/path_bound.h"

#include <algorithm>
#include <array>
#include <optional>

#include "planner/partition_program.h"
#include "planner/path_game.h"
#include "planner/precedence_graph.h"

namespace gpipe {
namespace {

using namespace path_internal;  // NOLINT: the op indices and the graph

// One chain: forwards of the stages before `head`, its rank's actions (`body`: stage, op, count),
// backwards (op `tail_op`) of the stages before `tail`, each with the message across the
// boundary it crosses (H), and the all-reduce's fixed time where it ends with one (`hops`).
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

  // Adds `share` x this chain's coefficients to `c`. (The boundaries crossed: those before head
  // and before tail, and with back_from those from it on; the last stage's H time is 0.)
  void AddTo(double share, Coefficients* c) const {
    for (int t = 0; t < head; ++t) {
      (*c)[t][kF] += share;
      (*c)[t][kH] += share;
    }
    for (int t = 0; t < tail; ++t) {
      (*c)[t][tail_op] += share;
      (*c)[t][kH] += share;
    }
    if (back_from >= 0) {
      for (int t = back_from + 1; t < static_cast<int>(c->size()); ++t) (*c)[t][back_op] += share;
      for (int t = back_from; t < static_cast<int>(c->size()); ++t) (*c)[t][kH] += share;
    }
    for (const auto& [stage, op, count] : body) (*c)[stage][op] += share * count;
  }
  // Its length for stages whose op times are `times` and prefix sums `prefix` ([s][op]: stages < s).
  double Ms(const std::vector<std::array<double, kOps>>& times, const std::vector<std::array<double, kOps>>& prefix) const {
    double ms = hops + prefix[head][kF] + prefix[head][kH] + prefix[tail][tail_op] + prefix[tail][kH];
    if (back_from >= 0) {
      ms += prefix.back()[back_op] - prefix[back_from + 1][back_op] + prefix.back()[kH] - prefix[back_from][kH];
    }
    for (const auto& [stage, op, count] : body) ms += count * times[stage][op];
    return ms;
  }
};

// The chains of the header comment, rank by rank.
// With `from_backwards`, also those that start at a backward.
std::vector<Chain> ChainsOf(const Schedule& schedule, const std::vector<AllReduceLine>& allreduce, bool from_backwards) {
  const int stages = schedule.num_stages();
  // Whether micro-batch m's backward at stage s is split (an I, its W apart) or whole (a B). A
  // chain's tail (or back_from run) counts one op at every stage: B only where every stage runs
  // a whole B, else I, which a B also takes at least (dualpipe-v mixes the two in a micro-batch).
  std::vector<std::vector<char>> split(stages, std::vector<char>(schedule.num_microbatches, 0));
  for (const std::vector<Action>& actions : schedule.ranks) {
    for (const Action& a : actions) {
      if (a.op == Op::kBackwardInput) split[a.stage][a.microbatch] = 1;
    }
  }
  // The op a run of stages [first, end) of micro-batch m counts, its last (or first) being `op`.
  const auto run_op = [&](Op op, int m, int first, int end) {
    bool whole = op == Op::kBackward;
    for (int t = first; t < end && whole; ++t) whole = !split[t][m];
    return whole ? kB : kI;
  };
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
          chain.back_op = run_op(actions[i].op, actions[i].microbatch, chain.back_from + 1, stages);
        } else {
          chain.head = actions[i].stage;
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
          chain.tail_op = run_op(last.op, last.microbatch, 0, last.stage);
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
    times[l] = {f, b, std::max(0.0, b - w), w, table.ParamBytes(l, l + 1), 0.0};
  }
  return times;
}

// The average of `chains[mix]` (`mix` empty: of all of them).
Row RowOf(const std::vector<Chain>& chains, const std::vector<size_t>& mix, int stages) {
  Row row{Coefficients(stages, OpTimes{}), 0.0};
  const size_t n = mix.empty() ? chains.size() : mix.size();
  for (size_t k = 0; k < n; ++k) {
    const Chain& chain = chains[mix.empty() ? k : mix[k]];
    chain.AddTo(1.0 / static_cast<double>(n), &row.c);
    row.hops += chain.hops / static_cast<double>(n);
  }
  return row;
}

// The bound from `chains` (not empty): Frank-Wolfe steps from the average of `start` (chains'
// indices; empty: all of them).
Mix FrankWolfe(const std::vector<Chain>& chains, const std::vector<size_t>& start,
               const std::vector<std::array<double, kOps>>& times, int stages, const PathBoundInput& input) {
  // Start from the average; each step moves a share 2 / (k + 2) of the weight onto the chain
  // that is longest for the partition the current average prefers.
  Row average = RowOf(chains, start, stages);
  Coefficients& weights = average.c;
  double& hops = average.hops;
  Mix best;
  std::vector<int> ends;
  std::vector<OpTimes> prefix(stages + 1);
  for (int k = 0; k < input.iterations; ++k) {
    const double least = LeastOverPartitions(weights, times, input.hops, &ends) + hops;
    if (least > best.bound || k == 0) best = Mix{least, weights, hops, {}};
    if ((input.enough > 0 && best.bound >= input.enough) || k + 1 == input.iterations) break;
    // (Each step is a dynamic program over layers x stages: a thousand of each take a tenth of a
    // second, which a time limit must see.)
    if (input.time_up && input.time_up()) break;
    // The partition's stage times, and its longest chain.
    const std::vector<OpTimes> stage_times = StageTimesOf(ends, times, input.hops);
    prefix[0] = OpTimes{};
    for (int s = 0; s < stages; ++s) {
      for (int op = 0; op < kOps; ++op) prefix[s + 1][op] = prefix[s][op] + stage_times[s][op];
    }
    const Chain* longest = nullptr;
    double longest_ms = -1;
    for (const Chain& chain : chains) {
      const double ms = chain.Ms(stage_times, prefix);
      if (ms > longest_ms) {
        longest_ms = ms;
        longest = &chain;
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

// Per rank (in rank order, ranks with none left out), the index of its chain that starts
// earliest among those `chosen` takes.
template <typename Chosen>
std::vector<size_t> EarliestPerRank(const std::vector<Chain>& chains, int ranks, const Chosen& chosen) {
  const size_t none = chains.size();
  std::vector<size_t> out(ranks, none);
  for (size_t c = 0; c < chains.size(); ++c) {
    if (!chosen(chains[c])) continue;
    size_t& at = out[chains[c].rank];
    if (at == none || chains[c].first_action < chains[at].first_action) at = c;
  }
  out.erase(std::remove(out.begin(), out.end(), none), out.end());
  return out;
}

}  // namespace

void BoundaryHops::Tabulate() {
  pair_.assign(crosses.size(), -1);
  table_.clear();
  if (bytes.empty()) return;
  const auto same = [](const Link& a, const Link& b) {
    return a.latency_ms == b.latency_ms && a.bandwidth_bytes_per_s == b.bandwidth_bytes_per_s;
  };
  std::vector<size_t> pairs;  // a boundary of each distinct pair
  for (size_t s = 0; s < crosses.size(); ++s) {
    if (!crosses[s]) continue;
    const auto it = std::find_if(pairs.begin(), pairs.end(), [&](size_t t) {
      return same(forward[t], forward[s]) && same(backward[t], backward[s]);
    });
    pair_[s] = static_cast<int>(it - pairs.begin());
    if (it != pairs.end()) continue;
    pairs.push_back(s);
    for (const double b : bytes) table_.push_back(std::min(forward[s].TransferMs(b), backward[s].TransferMs(b)));
  }
}

std::vector<int> LayerPrices::LeastPartition() const {
  std::vector<int> ends(stages_, layers_);
  for (int l = 0, s = 0; l + 1 < layers_ && s + 1 < stages_; ++l) {
    // Layer l + 1 opens stage s + 1 (stage s ending at layer l) where that is the cheaper way on.
    if (end_[Index(s, l)] + rest_[Index(s + 1, l + 1)] < rest_[Index(s, l + 1)]) ends[s++] = l + 1;
  }
  return ends;
}

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
  const std::vector<Chain> forward_chains = ChainsOf(schedule, input.allreduce, false);
  if (forward_chains.empty()) return 0.0;
  Mix best;
  const auto enough = [&](Mix mix) {
    if (mix.bound > best.bound || best.c.empty()) best = std::move(mix);
    return input.enough > 0 && best.bound >= input.enough;
  };
  // Memory as the game prices it (set where the game runs), and the bound with the best mix's
  // prices where asked for.
  MemoryPrices memory_model;
  const auto done = [&] {
    if (input.prices != nullptr && !best.c.empty() &&
        static_cast<size_t>(stages) * static_cast<size_t>(layers) <= kMaxLayerPrices) {
      MemoryPrices memory;
      double priced = 0;
      if (!best.price.empty()) {  // (a mix of the game's)
        memory = memory_model;
        memory.SetPrices(best.price);
        for (double u : best.price) priced += u * memory.Limit();
      }
      *input.prices = LayerPrices(
          stages, layers, best.hops - priced, [&](int s, int l) { return PricedLayerCost(best.c, times, memory, l, s); },
          [&](int s, int l) { return EndCost(best.c, input.hops, s, l); });
    }
    return best.bound;
  };
  const auto time_up = [&] { return input.time_up && input.time_up(); };
  if (enough(FrankWolfe(forward_chains, {}, times, stages, input)) || time_up()) return done();
  // Each rank's whole order, from its first forward to its last action and its all-reduce: their
  // average is the work and the all-reduces spread over the ranks (plus the average fill), which
  // the average over all chains dilutes with chains that end before the all-reduce.
  const std::vector<size_t> wholes = EarliestPerRank(forward_chains, schedule.num_ranks(), [&](const Chain& chain) {
    return chain.to_last && chain.reduced == !input.allreduce.empty();
  });
  if (!wholes.empty() && enough(FrankWolfe(forward_chains, wholes, times, stages, input))) return done();
  if (input.game_iterations < 1 || time_up()) return done();  // (a quick bound: the runs above only)
  const std::vector<Chain> chains = ChainsOf(schedule, input.allreduce, true);
  const std::vector<size_t> drains = EarliestPerRank(chains, schedule.num_ranks(), [](const Chain& chain) {
    return chain.back_from >= 0 && chain.to_last && !chain.reduced;
  });
  if (chains.size() > forward_chains.size() && enough(FrankWolfe(chains, {}, times, stages, input))) return done();
  if (time_up()) return done();
  if (!drains.empty() && enough(FrankWolfe(chains, drains, times, stages, input))) return done();
  if (time_up()) return done();
  const std::optional<PrecedenceGraph> graph = PrecedenceGraphOf(schedule, input.max_graph_nodes);
  if (graph) {
    std::vector<Row> rows = {RowOf(forward_chains, {}, stages), RowOf(chains, {}, stages)};
    if (!wholes.empty()) rows.push_back(RowOf(forward_chains, wholes, stages));
    if (!drains.empty()) rows.push_back(RowOf(chains, drains, stages));
    memory_model = MemoryPricesFor(schedule, input);
    enough(GameBound(std::move(rows), *graph, times, stages, input, memory_model));
  }
  return done();
}

}  // namespace gpipe
