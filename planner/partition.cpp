#include "planner/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "core/schedule/generators.h"
#include "core/suggest.h"
#include "simulator/cost_model.h"
#include "simulator/layer_table.h"
#include "simulator/memory_model.h"
#include "simulator/step_evaluator.h"
#include "planner/shape_cache.h"

namespace gpipe {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// Nodes whose bound comes within this fraction of the best step are pruned: they could at most
// tie it (bounds use prefix sums, which round differently from the exact stage sums).
constexpr double kTieFraction = 1e-12;

// The largest x in [lo, hi] with fits(x), for `fits` true up to some point and false after it;
// lo - 1 when fits(lo) is false. Gallops out from `guess`, so a close guess costs a few calls.
template <typename Fits>
int LargestTrue(int lo, int hi, int guess, const Fits& fits) {
  guess = std::clamp(guess, lo, hi);
  int below = lo - 1, above = hi + 1;  // fits(below) holds (or below < lo); fits(above) does not
  if (fits(guess)) {
    below = guess;
    for (int step = 1; below < hi; step *= 2) {
      const int x = std::min(hi, guess + step);
      if (!fits(x)) {
        above = x;
        break;
      }
      below = x;
    }
  } else {
    above = guess;
    for (int step = 1; above > lo; step *= 2) {
      const int x = std::max(lo, guess - step);
      if (fits(x)) {
        below = x;
        break;
      }
      above = x;
    }
  }
  while (above - below > 1) {
    const int mid = below + (above - below) / 2;
    if (fits(mid)) below = mid; else above = mid;
  }
  return below;
}

constexpr NameTable<RematPolicy, 3> kRematNames = {{
    {RematPolicy::kOff, "off"}, {RematPolicy::kOn, "on"}, {RematPolicy::kAuto, "auto"}}};

// Whether `policy` allows a stage with (`remat` true) or without remat.
bool Allows(RematPolicy policy, bool remat) {
  return remat ? policy != RematPolicy::kOff : policy != RematPolicy::kOn;
}

// The bracket [lo, hi] of the threshold of a predicate false below it and true from it on,
// `passes(x)` monotone in x >= 0: 60 bisection steps from [0, hi0], hi0 doubled from `start`
// until it passes. lo fails (or is 0); hi passes. nullopt when nothing up to 1e30 passes.
struct Bracket {
  double lo, hi;
};
template <typename Passes>
std::optional<Bracket> Threshold(double start, const Passes& passes) {
  double lo = 0, hi = start;
  while (!passes(hi)) {
    lo = hi;
    hi *= 2;
    if (hi > 1e30) return std::nullopt;
  }
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (passes(mid)) hi = mid; else lo = mid;
  }
  return Bracket{lo, hi};
}

class Search {
 public:
  explicit Search(const PartitionProblem& problem)
      : p_(problem),
        calibration_(EffectiveCalibration(*problem.profile, *problem.cluster, problem.optimizer)),
        table_(*problem.profile, static_cast<double>(problem.global_batch) /
                                     (static_cast<double>(problem.replicas) * problem.microbatches) /
                                     static_cast<double>(problem.profile->microbatch_size),
               problem.optimizer, calibration_ ? &*calibration_ : nullptr,
               RanksPerNode(*problem.cluster, problem.ranks * problem.replicas)),
        skeleton_(PlanSkeleton(problem)),
        layers_(table_.num_layers()),
        stages_(problem.ranks * problem.chunks),
        split_(problem.schedule == ScheduleKind::kZbH1) {
    const int ranks = p_.ranks;
    forwards_first_.assign(ranks, 0);
    in_flight_.assign(ranks, 0);
    if (p_.chunks == 1) {
      for (int r = 0; r < ranks; ++r) {
        forwards_first_[r] = ForwardsBeforeFirstBackward(p_.schedule, ranks, p_.microbatches, r);
        in_flight_[r] = MaxInFlight(p_.schedule, ranks, p_.microbatches, r);
      }
    }
    links_.assign(ranks, std::vector<Link>(ranks));
    for (int from = 0; from < ranks; ++from) {
      for (int to = 0; to < ranks; ++to) {
        links_[from][to] = p_.cluster->LinkBetween(Device(0, from), Device(0, to));
      }
    }
    rings_.resize(ranks);
    for (int r = 0; r < ranks; ++r) {
      std::vector<int> devices;
      for (int d = 0; d < p_.replicas; ++d) devices.push_back(Device(d, r));
      rings_[r] = RingOf(*p_.cluster, devices);
    }
    min_output_from_.assign(layers_ + 1, kInfinity);
    for (int l = layers_ - 2; l >= 0; --l) min_output_from_[l] = std::min(min_output_from_[l + 1], table_.OutputBytes(l));
    total_forward_ = table_.ForwardMs(0, layers_);
    total_backward_ = table_.BackwardMs(0, layers_);
    total_input_gradient_ = total_backward_ - table_.WeightMs(0, layers_);
    ends_.assign(stages_, 0);
    remat_.assign(stages_, false);
  }

  // The relaxed bound minimized over all partitions (binary search on the cutoff).
  double RootBound() const {
    if (p_.chunks > 1) {
      // The work spread evenly, and the rank that holds the heaviest layer runs it M times.
      double heaviest = 0;
      for (int l = 0; l < layers_; ++l) heaviest = std::max(heaviest, table_.ForwardMs(l, l + 1) + table_.BackwardMs(l, l + 1));
      return p_.microbatches * std::max((total_forward_ + total_backward_) / p_.ranks, heaviest);
    }
    // lo fails: every partition has a relaxed bound of at least lo.
    const std::optional<Bracket> b = RelaxedThreshold();
    return b ? b->lo : kInfinity;
  }

  // REQUIRES: as Run, and one stage per rank.
  LeastMemoryResult LeastMemory() {
    UseShape();
    const int ranks = p_.ranks;
    // need[q][a]: the least largest peak of ranks q.. holding layers [a, L); end/remat: the
    // stage of rank q that achieves it.
    std::vector<std::vector<double>> need(ranks + 1, std::vector<double>(layers_ + 1, kInfinity));
    std::vector<std::vector<int>> end(ranks, std::vector<int>(layers_ + 1, -1));
    std::vector<std::vector<char>> remat(ranks, std::vector<char>(layers_ + 1, 0));
    need[ranks][layers_] = 0;
    for (int q = ranks - 1; q >= 0; --q) {
      const int max_end = layers_ - (ranks - 1 - q);
      for (int a = q; a < max_end; ++a) {
        LayerTable::StageBuilder builder(table_, a);
        for (int e = a + 1; e <= max_end; ++e) {
          builder.Extend();
          if (q == ranks - 1 && e < layers_) continue;
          // Parameters only grow with the stage: once they alone reach the best, stop.
          if (table_.StaticBytes(a, e) * (1 - 1e-12) >= need[q][a]) break;
          const double rest = need[q + 1][e];
          if (rest >= need[q][a]) continue;
          for (bool with_remat : {false, true}) {
            if (!Allows(p_.remat, with_remat)) continue;
            const StageCost c = builder.Cost(with_remat);
            const StageCost* const only = &c;
            const double peak = std::max(rest, c.static_bytes + Peak(q, &only));
            if (peak < need[q][a]) {
              need[q][a] = peak;
              end[q][a] = e;
              remat[q][a] = with_remat;
            }
          }
        }
      }
    }
    LeastMemoryResult out;
    out.plan = skeleton_;
    out.peak_bytes = need[0][0];
    for (int q = 0, a = 0; q < ranks; ++q) {
      out.plan.stages.push_back({a, end[q][a], q, static_cast<bool>(remat[q][a])});
      a = end[q][a];
    }
    return out;
  }

  // REQUIRES: the problem passed CheckProblem and its schedule generates.
  Expected<PartitionResult> Run() {
    UseShape();
    best_ = p_.cutoff_ms;
    const double root = RootBound();
    if (p_.chunks == 1) {
      SeedIncumbent();
      Dfs(0, 0, 0.0, 0.0, 0.0);
    } else {
      SeedInterleaved();
      InterleavedDfs(0, 0);
    }
    if (!leaf_error_.ok()) return leaf_error_;
    result_.proven_optimal = !OutOfBudget();
    result_.stopped_by_deadline = stopped_;
    if (result_.proven_optimal) {
      // Every pruned node's bound reached Cutoff(); the plan found ties the rest.
      result_.lower_bound_ms = result_.plan ? best_ : Cutoff();
    } else {
      result_.lower_bound_ms = std::min(result_.plan ? best_ : Cutoff(), root);
    }
    return std::move(result_);
  }

 private:
  // ---- Shared pieces ----------------------------------------------------------------------

  double Limit() const { return p_.memory_limit_bytes; }
  int Device(int replica, int rank) const { return DeviceOf(p_.placement, p_.ranks, p_.replicas, replica, rank); }
  double Cutoff() const { return best_ * (1.0 - kTieFraction); }
  // Once the budget or the time is spent, every loop stops: the result is the best plan so far.
  bool OutOfBudget() const { return result_.nodes >= p_.max_nodes || stopped_; }
  // Counts a node; false when the budget or the time is spent (time_up is asked every 256).
  bool CountNode() {
    ++result_.nodes;
    if (result_.nodes % 256 == 0 && p_.time_up && p_.time_up()) stopped_ = true;
    return result_.nodes <= p_.max_nodes && !stopped_;
  }
  void UseShape() {
    shape_ = &(p_.shapes != nullptr ? *p_.shapes : own_shapes_).For(p_.schedule, p_.ranks, p_.chunks, p_.microbatches);
    evaluator_ = &shape_->evaluator();
  }
  // What rank `rank` does after its last action when it holds `param_bytes` of parameters: its
  // all-reduce, then its calibrated tail.
  double AfterLastActionMs(int rank, double param_bytes) const {
    const double tail = calibration_ ? calibration_->TailMs(param_bytes) : 0.0;
    return (p_.replicas > 1 ? rings_[rank].AllReduceMs(param_bytes) : 0.0) + tail;
  }
  // A rank's peak activations and buffers, `costs` pointing at one per stage on the rank.
  double Peak(int rank, const StageCost* const* costs) const {
    return shape_->Frontier(rank).PeakDynamicBytes(costs);
  }

  // Simulates a complete partition and keeps it when it is the best so far.
  void Leaf() {
    ++result_.leaves;
    // skeleton_ is reused (its profile is not copied per leaf); stages are rewritten in place.
    Plan& plan = skeleton_;
    plan.stages.clear();
    int first = 0;
    for (int s = 0; s < stages_; ++s) {
      plan.stages.push_back({first, ends_[s], s % p_.ranks, static_cast<bool>(remat_[s])});
      first = ends_[s];
    }
    Expected<CostModel> costs = BuildCostModel(plan);
    if (!costs.ok()) {
      // The search builds only valid plans: an error here is a bug, reported rather than lost.
      if (leaf_error_.ok()) leaf_error_ = costs.status().WithContext("the partition search's plan");
      return;
    }
    const double step = evaluator_->StepTimeMs(*costs);
    if (step < best_) {
      // Every stage was admitted by its memory frontier; confirm with the simulator's own walk
      // (the two may differ in the last bits).
      for (int r = 0; r < p_.ranks; ++r) {
        if (RankMemoryPeak(evaluator_->schedule(), r, *costs).peak_bytes > Limit()) return;
      }
      best_ = step;
      result_.step_time_ms = step;
      result_.plan = plan;
    }
  }

  // ---- One stage per rank (gpipe, 1f1b, zb-h1) --------------------------------------------

  // The cheapest remat choice that fits rank q, or nullopt.
  std::optional<StageCost> Fit(int q, const LayerTable::StageBuilder& builder) const {
    for (bool remat : {false, true}) {
      if (!Allows(p_.remat, remat)) continue;
      StageCost c = builder.Cost(remat);
      const StageCost* const only = &c;
      if (c.static_bytes + Peak(q, &only) <= Limit()) return c;
    }
    return std::nullopt;
  }

  // Lower bounds on the step given stage q's cost and what precedes it.
  double StageBound(int q, const StageCost& c, double head, double tail, double param_bytes) const {
    const double recompute = c.recompute_ms();
    const double m = p_.microbatches;
    if (split_) {
      const double work = c.forward_ms + recompute + c.backward_ms;
      // Micro-batch 0 must go all the way and its input gradient come back before rank q's
      // first I; then the rank still runs all its I and W and its forwards not yet run.
      // The input gradients of the stages after q: all of them less q's and those before it
      // (at most `tail`, which also counts their recompute and messages).
      const double after = std::max(0.0, total_input_gradient_ - c.backward_input_ms - tail);
      const double round_trip = total_forward_ + after + m * (recompute + c.backward_ms) +
                                (m - forwards_first_[q]) * c.forward_ms;
      return std::max({head + m * work + AfterLastActionMs(q, param_bytes),
                       head + m * (c.forward_ms + recompute + c.backward_input_ms) + tail, round_trip});
    }
    const double backward = c.backward_ms + recompute;
    const double work = c.forward_ms + backward;
    const double round_trip = total_forward_ + (total_backward_ - c.backward_ms) + m * backward +
                              (m - forwards_first_[q]) * c.forward_ms;
    return std::max({head + m * work + tail, head + m * work + AfterLastActionMs(q, param_bytes), round_trip});
  }

  // The relaxed bound for rank q holding [a, e): prefix sums, no buffers, remat's stash free.
  double RelaxedBound(int q, int a, int e, double head, double tail) const {
    const double forward = table_.ForwardMs(a, e);
    const double backward = table_.BackwardMs(a, e);
    const double activation = table_.ActivationBytes(a, e);
    const double static_bytes = table_.StaticBytes(a, e);
    const double stashed = static_bytes + in_flight_[q] * activation;
    bool remat = p_.remat == RematPolicy::kOn;
    if (!remat && stashed > Limit()) {
      if (p_.remat == RematPolicy::kOff) return kInfinity;
      remat = true;
    }
    if (remat && static_bytes + activation > Limit()) return kInfinity;
    StageCost c;
    c.forward_ms = forward;
    c.backward_ms = backward;
    c.backward_weight_ms = table_.WeightMs(a, e);
    c.backward_input_ms = backward - c.backward_weight_ms;
    c.remat = remat;
    return StageBound(q, c, head, tail, table_.ParamBytes(a, e));
  }

  // M x the work of layers [a, L) over the ranks from q on: the busiest of them has at least it.
  double RemainderAverage(int q, int a) const {
    return p_.microbatches * (table_.ForwardMs(a, layers_) + table_.BackwardMs(a, layers_)) / (p_.ranks - q);
  }

  // Can ranks q.. cover layers [a, L) with every relaxed bound below `cutoff`? Greedy: each
  // rank takes as many layers as it can (exact for this relaxation: a bound never rises when a
  // stage starts later or ends earlier). Fills `ends` with the greedy's boundaries.
  bool RemainderFits(int q, int a, double head, double tail, double cutoff, std::vector<int>* ends) const {
    const int first = a;  // every boundary still to place lies in [first, L - 1)
    for (; q < p_.ranks; ++q) {
      if (RemainderAverage(q, a) >= cutoff) return false;
      const int last_end = layers_ - (p_.ranks - 1 - q);
      if (a >= last_end) return false;
      const int lo = q == p_.ranks - 1 ? last_end : a + 1;
      // Start from this rank's length in the last greedy (the search asks about neighbouring
      // boundaries one after another), else from an even share of what is left.
      const int guess = a + (greedy_length_[q] > 0 ? greedy_length_[q] : (layers_ - a) / (p_.ranks - q));
      const int best = LargestTrue(lo, last_end, guess, [&](int e) { return RelaxedBound(q, a, e, head, tail) < cutoff; });
      if (best < lo) return false;
      greedy_length_[q] = best - a;
      if (ends != nullptr) (*ends)[q] = best;
      if (q + 1 < p_.ranks) {
        const double message = min_output_from_[first];
        head += table_.ForwardMs(a, best) + links_[q][q + 1].TransferMs(message);
        tail += (split_ ? table_.BackwardMs(a, best) - table_.WeightMs(a, best) : table_.BackwardMs(a, best)) +
                links_[q + 1][q].TransferMs(message);
      }
      a = best;
    }
    return true;
  }

  // A first incumbent: the partition that minimizes the relaxed bound (binary search on the
  // cutoff), simulated.
  void SeedIncumbent() {
    std::vector<int> ends(p_.ranks);
    const std::optional<Bracket> b = RelaxedThreshold();
    if (!b) return;  // nothing fits even relaxed
    RemainderFits(0, 0, 0, 0, b->hi, &ends);
    int a = 0;
    for (int q = 0; q < p_.ranks; ++q) {
      LayerTable::StageBuilder builder(table_, a);
      while (builder.end() < ends[q]) builder.Extend();
      const std::optional<StageCost> c = Fit(q, builder);
      if (!c) return;
      ends_[q] = ends[q];
      remat_[q] = c->remat;
      a = ends[q];
    }
    Leaf();
  }

  // The smallest cutoff below which some partition's relaxed bounds all fall.
  std::optional<Bracket> RelaxedThreshold() const {
    return Threshold(1.0, [&](double cutoff) { return RemainderFits(0, 0, 0, 0, cutoff, nullptr); });
  }

  void Dfs(int q, int a, double head, double tail, double bound) {
    if (!CountNode()) return;
    const bool last = q == p_.ranks - 1;
    const int max_end = layers_ - (p_.ranks - 1 - q);
    LayerTable::StageBuilder builder(table_, a);
    for (int e = a + 1; e <= max_end && !OutOfBudget(); ++e) {
      builder.Extend();
      if (last && e < max_end) continue;
      // The ranks after q share at least the work of layers [e, L): too much of it, and a
      // longer stage is needed (exact: RemainderFits would refuse it too, at more cost).
      if (!last && RemainderAverage(q + 1, e) >= Cutoff()) continue;
      const std::optional<StageCost> c = Fit(q, builder);
      if (!c) {
        // Memory only grows with the stage (up to its small buffers): stop once even the
        // relaxed memory test fails.
        if (RelaxedBound(q, a, e, 0, 0) == kInfinity) break;
        continue;
      }
      // Without remat the bound only grows with e: once it reaches the best, stop.
      const double params = table_.ParamBytes(a, e);
      if (StageBound(q, builder.Cost(false), head, tail, params) >= Cutoff()) break;
      const double node_bound = std::max({bound, StageBound(q, *c, head, tail, params), GpipeBound(q, *c, e)});
      if (node_bound >= Cutoff()) continue;
      ends_[q] = e;
      remat_[q] = c->remat;
      const double saved_max_forward = max_forward_, saved_max_backward = max_backward_, saved_recompute = recompute_;
      max_forward_ = std::max(max_forward_, c->forward_ms);
      max_backward_ = std::max(max_backward_, c->backward_ms + c->recompute_ms());
      recompute_ += c->recompute_ms();
      if (last) {
        Leaf();
        continue;
      }
      const double message = c->output_bytes;
      const double next_head = head + c->forward_ms + links_[q][q + 1].TransferMs(message);
      const double next_tail = tail + (split_ ? c->recompute_ms() + c->backward_input_ms : c->recompute_ms() + c->backward_ms) +
                               links_[q + 1][q].TransferMs(message);
      if (RemainderFits(q + 1, e, next_head, next_tail, Cutoff(), nullptr)) Dfs(q + 1, e, next_head, next_tail, node_bound);
      max_forward_ = saved_max_forward;
      max_backward_ = saved_max_backward;
      recompute_ = saved_recompute;
    }
  }

  // GPipe is two flow shops (all forwards, then all backwards), so its step is at least every
  // layer's forward and backward (and the placed stages' recompute) once plus (M-1) x (the
  // slowest stage's forward + the slowest stage's backward). Stages after q are at least as slow
  // as their average.
  double GpipeBound(int q, const StageCost& c, int e) const {
    if (p_.schedule != ScheduleKind::kGpipe) return 0.0;
    const int rest = p_.ranks - 1 - q;
    double forward = std::max(max_forward_, c.forward_ms);
    double backward = std::max(max_backward_, c.backward_ms + c.recompute_ms());
    if (rest > 0) {
      forward = std::max(forward, table_.ForwardMs(e, layers_) / rest);
      backward = std::max(backward, table_.BackwardMs(e, layers_) / rest);
    }
    return total_forward_ + total_backward_ + recompute_ + c.recompute_ms() + (p_.microbatches - 1) * (forward + backward);
  }

  // ---- Interleaved: v stages per rank ------------------------------------------------------

  // Places stage s on rank s mod K starting at layer a. Bounds, each times M: the busiest
  // rank's work so far plus the wait before its first forward (the stages of the first round
  // before it) and after its last backward (the same stages' backwards); and the average work.
  // Memory: a rank holds its chunks' static bytes throughout, and each chunk's activations at
  // some moment (stashed, or recomputed under remat), so a rank whose placed chunks already
  // exceed the limit that way is abandoned.
  void InterleavedDfs(int s, int a) {
    if (!CountNode()) return;
    const int rank = s % p_.ranks;
    const bool last = s == stages_ - 1;
    const int max_end = layers_ - (stages_ - 1 - s);
    const double m = p_.microbatches;
    const double average = m * (total_forward_ + total_backward_) / p_.ranks;
    for (int e = a + 1; e <= max_end && !OutOfBudget(); ++e) {
      if (last && e < max_end) continue;
      ends_[s] = e;
      const double work = table_.ForwardMs(a, e) + table_.BackwardMs(a, e);
      if (s + 1 < p_.ranks) {
        head_[s + 1] = head_[s] + table_.ForwardMs(a, e);
        tail_[s + 1] = tail_[s] + table_.BackwardMs(a, e);
      }
      const double static_bytes = table_.StaticBytes(a, e);
      const double activation = table_.ActivationBytes(a, e);
      // A tied parameter in this chunk and an earlier one of the rank is held once.
      const double shared = table_.has_tied_parameters() ? table_.SharedStaticBytes(RankLayers(rank, s, a, e)) : 0.0;
      // (prefix sums may round above the exact sums: allow for it before giving up)
      if (rank_static_[rank] + static_bytes - shared + std::max(rank_activation_[rank], activation) > Limit() * (1 + 1e-12)) {
        break;  // grows with e
      }
      rank_work_[rank] += work;
      rank_static_[rank] += static_bytes;
      const double previous_activation = rank_activation_[rank];
      rank_activation_[rank] = std::max(previous_activation, activation);
      double bound = average;
      for (int r = 0; r < p_.ranks && r <= s; ++r) bound = std::max(bound, head_[r] + m * rank_work_[r] + tail_[r]);
      if (bound < Cutoff()) {
        if (s >= stages_ - p_.ranks) {
          CompleteRank(rank, s, last);
        } else {
          InterleavedDfs(s + 1, e);
        }
      }
      rank_work_[rank] -= work;
      rank_static_[rank] -= static_bytes;
      rank_activation_[rank] = previous_activation;
      if (m * (rank_work_[rank] + work) >= Cutoff()) break;  // grows with e
    }
  }

  // The layers of `rank`'s chunks before stage s (as ends_ places them) and [a, e).
  LayerRanges RankLayers(int rank, int s, int a, int e) const {
    LayerRanges ranges;
    for (int t = rank; t < s; t += p_.ranks) ranges.emplace_back(t == 0 ? 0 : ends_[t - 1], ends_[t]);
    ranges.emplace_back(a, e);
    return ranges;
  }

  // A first incumbent for interleaved plans: the cut into S stages of most even work.
  void SeedInterleaved() {
    const auto split = [&](double cap, std::vector<int>* ends) {
      int a = 0;
      for (int t = 0; t < stages_; ++t) {
        const int last_end = layers_ - (stages_ - 1 - t);
        int e = a + 1;
        while (e < last_end && table_.ForwardMs(a, e + 1) + table_.BackwardMs(a, e + 1) <= cap) ++e;
        if (t == stages_ - 1) e = layers_;
        if (table_.ForwardMs(a, e) + table_.BackwardMs(a, e) > cap) return false;
        if (ends != nullptr) (*ends)[t] = e;
        a = e;
      }
      return true;
    };
    const std::optional<Bracket> b = Threshold(total_forward_ + total_backward_, [&](double cap) { return split(cap, nullptr); });
    std::vector<int> ends(stages_);
    if (!b || !split(b->hi, &ends)) return;
    ends_ = ends;
    for (int r = 0; r < p_.ranks; ++r) CompleteRank(r, stages_ - p_.ranks + r, false, /*seed=*/true);
    Leaf();
  }

  // Stage s completes `rank`'s chunks: choose its remat set (every set the policy allows that
  // fits and has no fitting subset), then go on.
  void CompleteRank(int rank, int s, bool last, bool seed = false) {
    std::vector<StageCost> costs(p_.chunks);
    std::vector<int> firsts(stages_, 0);
    for (int t = 1; t <= s; ++t) firsts[t] = ends_[t - 1];
    std::vector<int> fitting;
    for (int mask = 0; mask < (1 << p_.chunks); ++mask) {
      // off: no chunk rematerializes; on: every chunk; auto: any set.
      const int all = (1 << p_.chunks) - 1;
      if (p_.remat != RematPolicy::kAuto && mask != (p_.remat == RematPolicy::kOn ? all : 0)) continue;
      bool has_fitting_subset = false;
      for (int other : fitting) has_fitting_subset = has_fitting_subset || (other & mask) == other;
      if (has_fitting_subset) continue;
      std::vector<const StageCost*> pointers;
      double static_bytes = 0;
      LayerRanges ranges;
      for (int c = 0; c < p_.chunks; ++c) {
        const int t = c * p_.ranks + rank;
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
      if (OutOfBudget()) return;
      for (int c = 0; c < p_.chunks; ++c) remat_[c * p_.ranks + rank] = (mask >> c) & 1;
      if (seed) return;
      if (last) {
        Leaf();
      } else {
        InterleavedDfs(s + 1, ends_[s]);
      }
    }
  }

  const PartitionProblem& p_;
  std::optional<Calibration> calibration_;  // the cluster's, or the profile's measured step costs
  LayerTable table_;
  Plan skeleton_;
  // Set by UseShape (bounds need no schedule); own_shapes_ serves when the problem brings none.
  ShapeCache own_shapes_;
  ShapeData* shape_ = nullptr;
  const StepEvaluator* evaluator_ = nullptr;
  bool stopped_ = false;   // the deadline passed
  Status leaf_error_ = Status::Ok();
  int layers_;
  int stages_;
  bool split_;
  std::vector<int> forwards_first_;
  std::vector<int> in_flight_;
  std::vector<std::vector<Link>> links_;
  std::vector<Ring> rings_;  // each rank's all-reduce ring over the replicas
  // min_output_from_[l]: the smallest message a boundary after layer l or later can carry.
  std::vector<double> min_output_from_;
  double total_forward_ = 0;
  double total_backward_ = 0;
  double total_input_gradient_ = 0;
  std::vector<int> ends_;
  std::vector<char> remat_;
  // Each rank's stage length in the last RemainderFits (where its next call starts looking).
  mutable std::vector<int> greedy_length_ = std::vector<int>(p_.ranks, 0);
  // Interleaved search state: work, static bytes and the largest chunk activation placed per
  // rank; the first round's forwards and backwards before each rank (head_[r], tail_[r]).
  std::vector<double> rank_work_ = std::vector<double>(p_.ranks, 0.0);
  std::vector<double> rank_static_ = std::vector<double>(p_.ranks, 0.0);
  std::vector<double> rank_activation_ = std::vector<double>(p_.ranks, 0.0);
  std::vector<double> head_ = std::vector<double>(p_.ranks, 0.0);
  std::vector<double> tail_ = std::vector<double>(p_.ranks, 0.0);
  // GPipe search state: the slowest forward and backward (with recompute) of the placed stages,
  // and their recompute.
  double max_forward_ = 0;
  double max_backward_ = 0;
  double recompute_ = 0;
  double best_ = kInfinity;
  PartitionResult result_;
};

}  // namespace

const char* RematPolicyName(RematPolicy policy) { return NameOf(kRematNames, policy); }

Expected<RematPolicy> ParseRematPolicy(const std::string& name) { return ParseName(kRematNames, name, "remat policy"); }

Plan PlanSkeleton(const PartitionProblem& problem) {
  Plan plan;
  plan.profile = *problem.profile;
  plan.cluster = *problem.cluster;
  plan.schedule = problem.schedule;
  plan.microbatches = problem.microbatches;
  plan.global_batch = problem.global_batch;
  plan.replicas = problem.replicas;
  plan.placement = problem.placement;
  plan.optimizer = problem.optimizer;
  return plan;
}

namespace {

Status CheckProblem(const PartitionProblem& problem) {
  const int layers = problem.profile->num_layers();
  const int stages = problem.ranks * problem.chunks;
  if (problem.ranks < 1 || problem.chunks < 1) {
    return Status::Invalid("a plan needs at least one rank and one chunk per rank");
  }
  if (stages > layers) {
    return Status::Invalid(std::to_string(stages) + " stages (K=" + std::to_string(problem.ranks) +
                           (problem.chunks > 1 ? " x " + std::to_string(problem.chunks) + " chunks" : std::string()) +
                           ") is more than the profile's " + std::to_string(layers) +
                           " layers; every stage needs at least one layer, so use at most " + std::to_string(layers));
  }
  if (int64_t{problem.ranks} * problem.replicas > problem.cluster->devices) {
    return Status::Invalid(std::to_string(problem.ranks) + " ranks x " + std::to_string(problem.replicas) +
                           " replicas need more than the cluster's " + std::to_string(problem.cluster->devices) +
                           " devices");
  }
  const int64_t per_step = int64_t{problem.replicas} * problem.microbatches;
  if (problem.global_batch % per_step != 0) {
    return Status::Invalid("global batch " + std::to_string(problem.global_batch) + " does not split into " +
                           std::to_string(problem.replicas) + " replicas x " + std::to_string(problem.microbatches) +
                           " micro-batches of whole samples");
  }
  if (problem.schedule == ScheduleKind::kZbH1) {
    for (int l = 0; l < layers; ++l) {
      if (!problem.profile->layers[l].backward_weight_ms) {
        return Status::Invalid("zb-h1 needs backward_weight_ms for every layer; layers[" + std::to_string(l) +
                               "] (\"" + problem.profile->layers[l].name + "\") has none");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

double PartitionLowerBound(const PartitionProblem& problem) {
  if (!CheckProblem(problem).ok()) return kInfinity;
  return Search(problem).RootBound();
}

Expected<LeastMemoryResult> LeastMemoryPartition(const PartitionProblem& problem) {
  GPIPE_RETURN_IF_ERROR(CheckProblem(problem));
  if (problem.chunks != 1) return Status::Invalid("the least-memory partition takes one stage per rank");
  Expected<Schedule> compute = GenerateSchedule(problem.schedule, problem.ranks, problem.ranks, problem.microbatches);
  if (!compute.ok()) return compute.status();
  return Search(problem).LeastMemory();
}

Expected<PartitionResult> FindBestPartition(const PartitionProblem& problem) {
  GPIPE_RETURN_IF_ERROR(CheckProblem(problem));
  Expected<Schedule> compute = GenerateSchedule(problem.schedule, problem.ranks, problem.ranks * problem.chunks,
                                                problem.microbatches);
  if (!compute.ok()) return compute.status();
  return Search(problem).Run();
}

}  // namespace gpipe
