#include "planner/interleaved_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <utility>

#include "core/schedule/generators.h"
#include "planner/bisection.h"
#include "planner/rank_balance.h"
#include "planner/rank_load_bound.h"
#include "planner/remat_choices.h"

namespace gpipe::partition_internal {

double InterleavedSearch::RootBound(LayerPrices* prices) const {
  if (!MemoryCanFit()) return kInfinity;
  // The busiest rank runs its layers M times: at least the work spread evenly, and at least
  // what dealing whole layers, v or more to a rank, leaves on one (planner/rank_load_bound.h).
  const double busiest = BusiestRankLowerBound(LayerWorks(), p_.ranks, p_.chunks);
  const double spread = p_.microbatches * std::max((total_forward_ + total_backward_) / p_.ranks, busiest);
  // The chains of the schedule's own order (planner/path_bound.h): they see the waits of every
  // round, which the spread work does not.
  return std::max(spread, PathBound(prices));
}

bool InterleavedSearch::MemoryCanFit() const {
  // Dfs abandons a rank whose model state and largest chunk activation pass the limit. Two
  // necessary conditions for a partition to pass on every rank, whatever the cut:
  //  - summed over the ranks: each rank's largest chunk holds at least the mean of its v chunks,
  //    the chunks together every layer's activations once, and the ranks' model state every
  //    parameter at least once (a tied one too);
  //  - by count: a rank of n layers holds at least the n smallest layers' model state (less what
  //    the profile's tied parameters count twice) and has a chunk of ceil(n / v) layers or more,
  //    whose activations are at least the ceil(n / v) smallest layers'. The most layers N a rank
  //    can hold that way bounds them all: K x N must reach the layers. (It is what rules out a
  //    cut of whole transformer blocks that the mean would allow half-way through a block.)
  const double limit = Limit() * (1 + 1e-12);  // (prefix sums may round above the exact sums)
  const double held = table_.StaticBytes(0, layers_) + table_.ActivationBytes(0, layers_) / p_.chunks;
  if (held > p_.ranks * limit) return false;
  std::vector<double> statics(layers_), activations(layers_);
  double counted_twice = 0;
  for (int l = 0; l < layers_; ++l) {
    statics[l] = table_.StaticBytes(l, l + 1);
    activations[l] = table_.ActivationBytes(l, l + 1);
    counted_twice += statics[l];
  }
  counted_twice -= table_.StaticBytes(0, layers_);
  std::sort(statics.begin(), statics.end());
  std::sort(activations.begin(), activations.end());
  double least_static = -counted_twice, least_activation = 0;
  int most = 0;  // N
  for (int n = 1; n <= layers_; ++n) {
    least_static += statics[n - 1];
    if ((n - 1) % p_.chunks == 0) least_activation += activations[(n - 1) / p_.chunks];
    if (least_static + least_activation > limit) break;
    most = n;
  }
  return static_cast<int64_t>(most) * p_.ranks >= layers_;
}

Expected<PartitionResult> InterleavedSearch::Run() {
  UseShape();
  if (p_.whole_layer_level) {
    layer_work_ = LayerWorks();
    least_work_from_.assign(layers_, kInfinity);
    for (int l = layers_ - 2; l >= 0; --l) least_work_from_[l] = std::min(least_work_from_[l + 1], layer_work_[l]);
  }
  best_ = p_.cutoff_ms;
  if (!MemoryCanFit()) return Finish(kInfinity);  // proven: nothing fits
  // A caller's key stands for the root bound (a search of many configurations computes the full
  // one for few); without one, the full bound, whose prices also prune.
  const double root = std::isnan(p_.root_bound_ms) ? RootBound(&prices_) : p_.root_bound_ms;
  if (std::isinf(root)) return Finish(root);  // proven: nothing fits (the path bound's memory)
  const auto fit = [&] {
    for (int r = 0; r < p_.ranks; ++r) {
      if (TimeUp() || !CompleteRank(r, rank_stages_[r].back(), false, /*seed=*/true)) return false;
    }
    return true;
  };
  if (std::vector<int> even = EvenCut(); !even.empty()) {
    // The most even stages; then that cut, or the quota cut if it ends less busy, moved until
    // its ranks' sums are even too (rank_balance.h).
    const auto work = [this](int a, int e) { return StageWorkMs(a, e); };
    std::vector<int> balanced = BalanceRankLoads(even, stage_rank_, p_.ranks, work);
    if (std::vector<int> quota = QuotaCut(layers_, stage_rank_, p_.ranks, work); !quota.empty()) {
      std::vector<int> from_quota = BalanceRankLoads(std::move(quota), stage_rank_, p_.ranks, work);
      if (BusiestRankLoad(from_quota, stage_rank_, p_.ranks, work) < BusiestRankLoad(balanced, stage_rank_, p_.ranks, work)) {
        balanced = std::move(from_quota);
      }
    }
    const bool differs = balanced != even;
    SeedWith(std::move(even), fit);
    if (differs) SeedWith(std::move(balanced), fit);
  }
  if (!prices_.empty()) SeedWith(prices_.LeastPartition(), fit);
  Climb(fit);
  Dfs(0, 0);
  return Finish(root);
}

void InterleavedSearch::Dfs(int s, int a) {
  if (!CountNode()) return;
  const int rank = stage_rank_[s];
  const bool last = s == stages_ - 1;
  const int max_end = layers_ - (stages_ - 1 - s);
  const double m = p_.microbatches;
  const double average = m * (total_forward_ + total_backward_) / p_.ranks;
  for (int e = a + 1; e <= max_end && !OutOfBudget(); ++e) {
    if (last && e < max_end) continue;
    if (!PricesAdmit(s, a, e)) continue;
    ends_[s] = e;
    const double work = BoundForwardMs(a, e) + table_.BackwardMs(a, e);
    // Whole layers dealt to the ranks still to get stages (what the spread work does not see),
    // before the memory's recompute (which only adds). It grows with e while this rank gets
    // stages later (a layer it takes could have gone to any of them; the rest weigh no less).
    double level = 0;
    if (p_.whole_layer_level && s + 1 < stages_) {
      rank_work_[rank] += work;
      level = m * WholeLayerLevel(s, e);
      rank_work_[rank] -= work;
      if (level >= Cutoff()) {
        if (s < rank_stages_[rank].back()) break;
        continue;
      }
    }
    // Stages 0..K-1 are on ranks 0..K-1 in a loop and in a V alike. With split backwards the
    // tail is of input gradients (B - W, as the contiguous search bounds I), and it follows the
    // rank's forwards and input gradients only: its W passes may run meanwhile.
    const double input_work = BoundForwardMs(a, e) + table_.BackwardMs(a, e) - table_.WeightMs(a, e);
    if (s + 1 < p_.ranks) {
      head_[s + 1] = head_[s] + BoundForwardMs(a, e);
      tail_[s + 1] = tail_[s] + (split_ ? table_.BackwardMs(a, e) - table_.WeightMs(a, e) : table_.BackwardMs(a, e));
    }
    const double static_bytes = table_.StaticBytes(a, e);
    const double params = table_.ParamBytes(a, e);
    const double activation = table_.ActivationBytes(a, e);
    // A tied parameter in this chunk and an earlier one of the rank is held once.
    const double shared = table_.has_tied_parameters() ? table_.SharedStaticBytes(RankLayers(rank, s, a, e)) : 0.0;
    // (prefix sums may round above the exact sums: allow for it before giving up)
    if (rank_static_[rank] + static_bytes - shared + std::max(rank_activation_[rank], activation) > Limit() * (1 + 1e-12)) {
      break;  // grows with e
    }
    const double held = rank_static_[rank] + static_bytes - shared;
    floor_keep_[s] = MemoryFloor(a, e, false);
    floor_recompute_[s] = MemoryFloor(a, e, true);
    stage_forward_[s] = table_.ForwardMs(a, e);
    const double least_recompute = LeastRecomputeMs(rank, s, held);
    if (std::isinf(least_recompute)) break;  // no remat set fits: grows with e
    const double previous_recompute = rank_recompute_[rank];
    const double forced = least_recompute - previous_recompute;  // (adding a chunk only adds)
    rank_recompute_[rank] = least_recompute;
    rank_work_[rank] += work + forced;
    rank_input_work_[rank] += input_work + forced;
    rank_static_[rank] += static_bytes;
    rank_params_[rank] += params;
    const double previous_activation = rank_activation_[rank];
    rank_activation_[rank] = std::max(previous_activation, activation);
    double bound = average + m * std::accumulate(rank_recompute_.begin(), rank_recompute_.end(), 0.0) / p_.ranks;
    for (int r = 0; r < p_.ranks && r <= s; ++r) {
      // (A tied parameter may be held by several of the rank's chunks: none of its bytes counted.)
      const double after_last = AfterLastActionMs(r, table_.has_tied_parameters() ? 0.0 : rank_params_[r]);
      bound = std::max(bound, split_ ? std::max(head_[r] + m * rank_work_[r] + after_last,
                                                head_[r] + m * rank_input_work_[r] + tail_[r])
                                     : head_[r] + m * rank_work_[r] + std::max(tail_[r], after_last));
    }
    bound = std::max(bound, level);
    if (bound < Cutoff()) {
      const double priced = prices_.empty() ? 0.0 : prices_.StageCost(s, a, e);
      priced_ += priced;
      if (s == rank_stages_[rank].back()) {
        CompleteRank(rank, s, last);
      } else {
        Dfs(s + 1, e);
      }
      priced_ -= priced;
    }
    rank_work_[rank] -= work + forced;
    rank_input_work_[rank] -= input_work + forced;
    rank_recompute_[rank] = previous_recompute;
    rank_static_[rank] -= static_bytes;
    rank_params_[rank] -= params;
    rank_activation_[rank] = previous_activation;
    if (m * (rank_work_[rank] + work) >= Cutoff()) break;  // grows with e
  }
}

std::vector<double> InterleavedSearch::LayerWorks() const {
  std::vector<double> works(layers_);
  for (int l = 0; l < layers_; ++l) works[l] = BoundForwardMs(l, l + 1) + table_.BackwardMs(l, l + 1);
  return works;
}

double InterleavedSearch::WholeLayerLevel(int s, int e) const {
  const int last_rank = stage_rank_[stages_ - 1];
  const int free_layers = layers_ - 1 - e;  // [e, L - 1): the last layer is the last stage's
  const double least = free_layers > 0 ? least_work_from_[e] : 0.0;
  std::vector<double>& loads = level_scratch_;
  loads.clear();
  int left = free_layers;
  double highest = 0;
  for (int r = 0; r < p_.ranks; ++r) {
    const std::vector<int>& own = rank_stages_[r];  // (in stage order)
    const int stages = static_cast<int>(own.end() - std::upper_bound(own.begin(), own.end(), s));
    if (stages == 0) continue;  // its work is final: the per-rank terms count it
    // Each of its stages after s holds a layer: the last stage may hold only the last layer.
    const int must = stages - (r == last_rank ? 1 : 0);
    const double load = rank_work_[r] + (r == last_rank ? layer_work_[layers_ - 1] : 0.0) + must * least;
    left -= must;
    loads.push_back(load);
    highest = std::max(highest, load);
  }
  if (left <= 0 || least <= 0) return highest;
  // The least level T at which the ranks take the `left` layers of `least` work each: the
  // smallest T with sum over ranks of floor((T - load) / least) >= left.
  const auto taken = [&](double level) {
    int64_t n = 0;
    for (double load : loads) n += level >= load ? static_cast<int64_t>((level - load) / least * (1 + 1e-12)) : 0;
    return n;
  };
  double lo = highest, hi = highest + left * least;
  for (int i = 0; i < 60 && hi - lo > 1e-9 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (taken(mid) >= left ? hi : lo) = mid;
  }
  return lo;
}

StageCost InterleavedSearch::MemoryFloor(int a, int e, bool remat) const {
  StageCost c;
  c.activation_bytes = table_.ActivationBytes(a, e);
  c.input_bytes = table_.InputBytes(a);
  c.remat = remat;
  return c;
}

double InterleavedSearch::LeastRecomputeMs(int rank, int s, double static_bytes) const {
  // The rank's chunks placed so far, up to stage s (in stage order).
  const std::vector<int>& stages = rank_stages_[rank];
  int placed = 0;
  while (placed < static_cast<int>(stages.size()) && stages[placed] <= s) ++placed;
  std::vector<const StageCost*>& chosen = chosen_scratch_;
  chosen.assign(stages.size(), nullptr);
  // Whether the chunks in `mask` recomputing and the others keeping could fit.
  const auto fits = [&](int mask) {
    for (int c = 0; c < placed; ++c) chosen[c] = (mask >> c) & 1 ? &floor_recompute_[stages[c]] : &floor_keep_[stages[c]];
    // (prefix sums may round above the exact sums: allow for it before giving up)
    return static_bytes + shape_->Frontier(rank).LeastStashPeakBytes(chosen.data(), chosen.data()) <= Limit() * (1 + 1e-12);
  };
  const int all = (1 << placed) - 1;
  const auto cost = [&](int mask) {
    double ms = 0;
    for (int c = 0; c < placed; ++c) ms += (mask >> c) & 1 ? stage_forward_[stages[c]] : 0.0;
    return ms;
  };
  if (p_.remat == RematPolicy::kOff) return fits(0) ? 0.0 : kInfinity;
  if (p_.remat == RematPolicy::kOn) return fits(all) ? cost(all) : kInfinity;
  if (fits(0)) return 0.0;
  // The cheapest remat set that could fit (remat is by chunk here: CompleteRank's sets).
  double least = kInfinity;
  for (int mask = 1; mask <= all; ++mask) {
    const double ms = cost(mask);
    if (ms < least && fits(mask)) least = ms;
  }
  return least;
}

LayerRanges InterleavedSearch::RankLayers(int rank, int s, int a, int e) const {
  LayerRanges ranges;
  for (int t : rank_stages_[rank]) {
    if (t < s) ranges.emplace_back(t == 0 ? 0 : ends_[t - 1], ends_[t]);
  }
  ranges.emplace_back(a, e);
  return ranges;
}

bool InterleavedSearch::CompleteRank(int rank, int s, bool last, bool seed) {
  std::vector<StageCost> costs(p_.chunks);
  std::vector<int> firsts(stages_, 0);
  for (int t = 1; t <= s; ++t) firsts[t] = ends_[t - 1];
  std::vector<int> fitting;
  for (int mask = 0; mask < (1 << p_.chunks); ++mask) {
    if (!RematSetAllowed(p_.remat, mask, p_.chunks)) continue;
    bool has_fitting_subset = false;
    for (int other : fitting) has_fitting_subset = has_fitting_subset || (other & mask) == other;
    if (has_fitting_subset) continue;
    std::vector<const StageCost*> pointers;
    double static_bytes = 0;
    LayerRanges ranges;
    for (int c = 0; c < p_.chunks; ++c) {
      const int t = rank_stages_[rank][c];
      costs[c] = table_.Stage(firsts[t], ends_[t], (mask >> c) & 1);
      static_bytes += costs[c].static_bytes;
      pointers.push_back(&costs[c]);
      if (table_.has_tied_parameters()) ranges.emplace_back(firsts[t], ends_[t]);
    }
    // As BuildCostModel: a tied parameter in several chunks of the rank is held once.
    static_bytes -= table_.SharedStaticBytes(ranges);
    if (static_bytes + Peak(rank, pointers.data()) <= Limit()) fitting.push_back(mask);
  }
  if (seed && !fitting.empty()) fitting.resize(1);
  for (int mask : fitting) {
    if (OutOfBudget()) break;
    for (int c = 0; c < p_.chunks; ++c) {
      const int t = rank_stages_[rank][c];
      recomputed_[t] = ((mask >> c) & 1) != 0 ? ends_[t] - firsts[t] : 0;
    }
    if (seed) break;
    if (last) {
      Leaf();
    } else {
      Dfs(s + 1, ends_[s]);
    }
  }
  return !fitting.empty();
}

}  // namespace gpipe::partition_internal
