#include "planner/contiguous_search.h"

#include <algorithm>
#include <cmath>

#include "planner/remat_choices.h"

namespace gpipe::partition_internal {

double ContiguousSearch::RootBound() const { return RootBound(RelaxedThreshold(), nullptr); }

double ContiguousSearch::RootBound(const std::optional<Bracket>& threshold, LayerPrices* prices) const {
  // lo fails: every partition has a relaxed bound of at least lo. The chains of the schedule's
  // own order (planner/path_bound.h) see the fill, the drain and the all-reduces together.
  if (!threshold) return kInfinity;
  return p_.quick_bound || threshold->lo >= p_.cutoff_ms ? threshold->lo : std::max(threshold->lo, PathBound(prices));
}

Expected<PartitionResult> ContiguousSearch::Run() {
  UseShape();
  best_ = p_.cutoff_ms;
  // The root bound and the first incumbent come from the same threshold. A caller's key stands
  // for the path bound (a search of many configurations computes the full one for few); without
  // one, the full bound, whose prices also prune.
  const std::optional<Bracket> threshold = RelaxedThreshold();
  double root = kInfinity;
  if (threshold) root = std::isnan(p_.root_bound_ms) ? RootBound(threshold, &prices_) : std::max(threshold->lo, p_.root_bound_ms);
  if (threshold && std::isinf(root)) return Finish(root);  // proven: nothing fits (the path bound's memory)
  if (threshold) {
    // Seeds: the partition of the least relaxed bound, the most even one and the one the path
    // bound's prices like best.
    const auto fit = [this] { return FitAll(); };
    std::vector<int> relaxed(p_.ranks);
    RemainderFits(0, 0, 0, 0, threshold->hi, &relaxed);
    SeedWith(std::move(relaxed), fit);
    if (std::vector<int> even = EvenCut(); !even.empty()) SeedWith(std::move(even), fit);
    if (!prices_.empty()) SeedWith(prices_.LeastPartition(), fit);
  }
  Dfs(0, 0, 0.0, 0.0, 0.0);
  return Finish(root);
}

std::optional<ContiguousSearch::Fitted> ContiguousSearch::Fit(int q, const LayerTable::StageBuilder& builder) const {
  // Recompute what memory demands: the fewest layers that fit (the fastest choice unless forwards
  // under no_grad are cheaper: partition.h).
  const int length = builder.end() - builder.first();
  for (int layers = 0; layers <= length; ++layers) {
    if (!RecomputeAllowed(p_.remat, layers, length)) continue;
    StageCost c = builder.CostRecomputing(layers);
    const StageCost* const only = &c;
    if (c.static_bytes + Peak(q, &only) <= Limit()) return Fitted{c, layers};
  }
  return std::nullopt;
}

double ContiguousSearch::StageBound(int q, const StageCost& c, double head, double tail, double param_bytes) const {
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

double ContiguousSearch::RelaxedBound(int q, int a, int e, double head, double tail) const {
  if (a == e) return 0.0;  // an empty stage (the relaxation allows them; see RemainderFits)
  const double forward = BoundForwardMs(a, e);
  const double backward = table_.BackwardMs(a, e);
  const double activation = table_.ActivationBytes(a, e);
  const double static_bytes = table_.StaticBytes(a, e);
  const double stashed = static_bytes + in_flight_[q] * activation;
  // As Fit chooses: without remat where the policy allows it and the stash fits, else with.
  bool remat = !RematAllowed(p_.remat, false);
  if (!remat && stashed > Limit()) {
    if (!RematAllowed(p_.remat, true)) return kInfinity;
    remat = true;
  }
  // Whatever recomputes, a backward holds one micro-batch's activations at its start (those kept
  // and those recomputed).
  if (remat && static_bytes + activation > Limit()) return kInfinity;
  StageCost c;
  c.forward_ms = forward;
  c.backward_ms = backward;
  c.backward_weight_ms = table_.WeightMs(a, e);
  c.backward_input_ms = backward - c.backward_weight_ms;
  c.remat = remat;
  c.remat_forward_ms = remat ? table_.ForwardMs(a, e) : 0.0;
  if (remat && p_.remat == RematPolicy::kAuto) {
    // By layer: at least the first layers up to the first boundary p after which the layers'
    // activations, stashed by every micro-batch in flight, fit (what a stage recomputing its
    // first n layers stashes includes the activations of the rest). Bisection: they only shrink
    // as p grows, and p = e always passes once static_bytes + activation fits.
    int lo = a, hi = e;  // the layers [a, lo] do not pass; p = hi passes
    while (hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      if (static_bytes + in_flight_[q] * table_.ActivationBytes(mid, e) <= Limit()) hi = mid; else lo = mid;
    }
    c.partial_remat = true;
    c.remat_forward_ms = table_.ForwardMs(a, hi);
  }
  return StageBound(q, c, head, tail, table_.ParamBytes(a, e));
}

double ContiguousSearch::RemainderAverage(int q, int a) const {
  return p_.microbatches * (BoundForwardMs(a, layers_) + table_.BackwardMs(a, layers_)) / (p_.ranks - q);
}

bool ContiguousSearch::RemainderFits(int q, int a, double head, double tail, double cutoff, std::vector<int>* ends) const {
  const int first = a;  // every boundary still to place lies in [first, L - 1)
  for (; q < p_.ranks; ++q) {
    if (RemainderAverage(q, a) >= cutoff) return false;
    // A rank may hold no layer here: with one layer at least per rank, a rank that took as much as
    // it could would push a layer onto the next rank that a better partition gives to a later
    // one (ranks differ in micro-batches in flight and in waits), and the greedy would miss
    // partitions that pass. With empty stages allowed, the greedy's boundaries stay at or beyond
    // those of any passing partition, rank by rank, and it is exact for the relaxation.
    const int last_end = layers_;
    const int lo = q == p_.ranks - 1 ? last_end : a;
    // Start from this rank's length in the last greedy (the search asks about neighbouring
    // boundaries one after another), else from an even share of what is left.
    const int guess = a + (greedy_length_[q] > 0 ? greedy_length_[q] : (layers_ - a) / (p_.ranks - q));
    const int best = LargestTrue(lo, last_end, guess, [&](int e) { return RelaxedBound(q, a, e, head, tail) < cutoff; });
    if (best < lo) return false;
    greedy_length_[q] = best - a;
    if (ends != nullptr) (*ends)[q] = best;
    if (q + 1 < p_.ranks) {
      const double message = min_output_from_[first];
      head += BoundForwardMs(a, best) + forward_link_[q].TransferMs(message);
      tail += (split_ ? table_.BackwardMs(a, best) - table_.WeightMs(a, best) : table_.BackwardMs(a, best)) +
              backward_link_[q].TransferMs(message);
    }
    a = best;
  }
  return true;
}

bool ContiguousSearch::FitAll() {
  for (int q = 0, a = 0; q < p_.ranks; a = ends_[q++]) {
    if (TimeUp()) return false;
    LayerTable::StageBuilder builder(table_, a);
    while (builder.end() < ends_[q]) builder.Extend();
    const std::optional<Fitted> c = Fit(q, builder);
    if (!c) return false;
    recomputed_[q] = c->layers;
  }
  return true;
}

std::optional<Bracket> ContiguousSearch::RelaxedThreshold() const {
  return Threshold(1.0, [&](double cutoff) { return RemainderFits(0, 0, 0, 0, cutoff, nullptr); });
}

void ContiguousSearch::Dfs(int q, int a, double head, double tail, double bound) {
  if (!CountNode()) return;
  const bool last = q == p_.ranks - 1;
  const int max_end = layers_ - (p_.ranks - 1 - q);
  LayerTable::StageBuilder builder(table_, a);
  for (int e = a + 1; e <= max_end && !OutOfBudget(); ++e) {
    builder.Extend();
    if (last && e < max_end) continue;
    if (!PricesAdmit(q, a, e)) continue;
    // The ranks after q share at least the work of layers [e, L): too much of it, and a
    // longer stage is needed (exact: RemainderFits would refuse it too, at more cost).
    if (!last && RemainderAverage(q + 1, e) >= Cutoff()) continue;
    const std::optional<Fitted> fitted = Fit(q, builder);
    if (!fitted) {
      // Memory only grows with the stage (up to its small buffers): stop once even the
      // relaxed memory test fails.
      if (RelaxedBound(q, a, e, 0, 0) == kInfinity) break;
      continue;
    }
    // Without remat (its forward at the least any F of these layers costs) the bound only grows
    // with e and lies below every remat choice's: once it reaches the best, stop.
    const StageCost* const c = &fitted->cost;
    const double params = table_.ParamBytes(a, e);
    StageCost least = builder.Cost(false);
    if (p_.remat != RematPolicy::kOff && table_.no_grad_forward_differs()) least.forward_ms = BoundForwardMs(a, e);
    if (StageBound(q, least, head, tail, params) >= Cutoff()) break;
    const double node_bound = std::max({bound, StageBound(q, *c, head, tail, params), GpipeBound(q, *c, e)});
    if (node_bound >= Cutoff()) continue;
    ends_[q] = e;
    recomputed_[q] = fitted->layers;
    const double saved_max_forward = max_forward_, saved_max_backward = max_backward_, saved_recompute = recompute_;
    max_forward_ = std::max(max_forward_, c->forward_ms);
    max_backward_ = std::max(max_backward_, c->backward_ms + c->recompute_ms());
    recompute_ += c->recompute_ms();
    if (last) {
      Leaf();
      continue;
    }
    const double message = c->output_bytes;
    const double next_head = head + c->forward_ms + forward_link_[q].TransferMs(message);
    const double next_tail = tail + (split_ ? c->recompute_ms() + c->backward_input_ms : c->recompute_ms() + c->backward_ms) +
                             backward_link_[q].TransferMs(message);
    const double priced = prices_.empty() ? 0.0 : prices_.StageCost(q, a, e);
    priced_ += priced;
    if (RemainderFits(q + 1, e, next_head, next_tail, Cutoff(), nullptr)) Dfs(q + 1, e, next_head, next_tail, node_bound);
    priced_ -= priced;
    max_forward_ = saved_max_forward;
    max_backward_ = saved_max_backward;
    recompute_ = saved_recompute;
  }
}

double ContiguousSearch::GpipeBound(int q, const StageCost& c, int e) const {
  if (p_.schedule != ScheduleKind::kGpipe) return 0.0;
  const int rest = p_.ranks - 1 - q;
  double forward = std::max(max_forward_, c.forward_ms);
  double backward = std::max(max_backward_, c.backward_ms + c.recompute_ms());
  if (rest > 0) {
    forward = std::max(forward, BoundForwardMs(e, layers_) / rest);
    backward = std::max(backward, table_.BackwardMs(e, layers_) / rest);
  }
  return total_forward_ + total_backward_ + recompute_ + c.recompute_ms() + (p_.microbatches - 1) * (forward + backward);
}

}  // namespace gpipe::partition_internal
