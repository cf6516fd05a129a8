#include "planner/search.h"

#include "core/profile_sizes.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <string>
#include <tuple>

#include "core/schedule/placement.h"
#include "core/schedule/validate.h"
#include "planner/cheap_bound.h"
#include "planner/min_devices.h"
#include "planner/shape_cache.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"
#include "simulator/tensor_parallel.h"

namespace gpipe {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// Configurations are searched for plans up to this factor slower than the best so far, so that
// the Pareto list shows what trading some speed buys in memory.
constexpr double kAlternatives = 1.25;
// The share of the time limit the searches of configurations get; the rest raises the least
// lower bounds.
constexpr double kSearchShare = 0.9;
// With no plan found by kDiveAfter of the time limit (search.h), configurations' seeds are tried
// by CheapBounds::Estimate (each schedule's best first), until kDives plans or this share of the
// limit.
constexpr size_t kDives = 8;
constexpr double kDiveUntil = 0.3;
// A stopped search of a configuration with up to this many layers is searched again pruning by
// the whole layers the ranks still to get stages must take (PartitionProblem::whole_layer_level).
constexpr size_t kWholeLayerLevelUpTo = 256;

std::vector<int> Divisors(int64_t n) {
  std::vector<int> out;
  for (int64_t d = 1; d <= n && d <= (1 << 20); ++d) {
    if (n % d == 0) out.push_back(static_cast<int>(d));
  }
  return out;
}

// "interleaved-1f1b K=8 v=2 D=1 M=64", "1f1b t=8 K=12 D=4 (ZeRO-1) M=96".
std::string ConfigurationName(const PartitionProblem& problem) {
  return std::string(ScheduleName(problem.schedule)) +
         (problem.tensor_parallel > 1 ? " t=" + std::to_string(problem.tensor_parallel) : std::string()) +
         " K=" + std::to_string(problem.ranks) +
         (problem.chunks > 1 ? " v=" + std::to_string(problem.chunks) : std::string()) +
         " D=" + std::to_string(problem.replicas) + (problem.sharded_optimizer ? " (ZeRO-1)" : "") +
         " M=" + std::to_string(problem.microbatches) +
         (problem.placement == Placement::kReplicaMajor ? " replica-major" : "");
}

}  // namespace

double Gap(double best_ms, double lower_bound_ms) {
  if (!std::isfinite(best_ms)) return kInfinity;
  // Bounds and steps are sums in different orders: a relative difference of 1e-9 is rounding.
  if (best_ms <= lower_bound_ms * (1 + 1e-9)) return 0.0;
  return lower_bound_ms > 0 ? best_ms / lower_bound_ms - 1.0 : kInfinity;
}

namespace {
// The configurations at one t, `profile` being the profile at t.
void ConfigurationsAt(const SearchRequest& request, int t, const Profile& profile, ProfileStore* profiles,
                      size_t* oversubscribed, std::vector<PartitionProblem>& problems);
}  // namespace

int OversubscriptionCap(const SearchRequest& request) {
  if (request.oversubscribe || (request.ranks && request.replicas) || !request.profile.step_costs) return 0;
  return request.profile.step_costs->concurrent_ranks;
}

std::vector<PartitionProblem> Configurations(const SearchRequest& request, ProfileStore* profiles,
                                             size_t* oversubscribed) {
  std::vector<PartitionProblem> problems;
  for (int t : request.profile.TensorParallelSizes()) {
    if (request.tensor_parallel && t != *request.tensor_parallel) continue;
    if (!CheckTensorParallel(t, request.profile, request.cluster).ok()) continue;
    const Profile* at_t = &request.profile;
    if (t != request.profile.tensor_parallel && profiles != nullptr) {
      Expected<Profile> derived = ProfileAtTensorParallel(request.profile, t, request.cluster);
      if (!derived.ok()) continue;
      at_t = &profiles->emplace(std::make_pair(t, int64_t{0}), std::move(*derived)).first->second;
    }
    ConfigurationsAt(request, t, *at_t, profiles, oversubscribed, problems);
  }
  return problems;
}

namespace {
void ConfigurationsAt(const SearchRequest& request, int t, const Profile& profile, ProfileStore* profiles,
                      size_t* oversubscribed, std::vector<PartitionProblem>& problems) {
  const int cap = OversubscriptionCap(request);
  const bool several_sizes = MeasuredMicrobatchSizes(profile).size() > 1 && profiles != nullptr;
  const int devices = request.cluster.devices / t;
  const int layers = request.profile.num_layers();
  const bool multi_node = request.cluster.devices_per_node && *request.cluster.devices_per_node < devices;
  std::vector<ScheduleKind> kinds;
  if (request.schedule) {
    kinds = {*request.schedule};
  } else {
    for (ScheduleKind kind : AllScheduleKinds()) {
      if (!SplitsBackward(kind) || profile.HasWeightTimes()) kinds.push_back(kind);
    }
  }
  for (int replicas = 1; replicas <= devices; ++replicas) {
    if (request.replicas && replicas != *request.replicas) continue;
    if (request.global_batch % replicas != 0) continue;
    if (replicas == 1 && request.sharded_optimizer.value_or(false)) continue;  // ZeRO-1 shards over D >= 2
    for (int ranks = 1; ranks * replicas <= devices && ranks <= layers; ++ranks) {
      if (request.ranks && ranks != *request.ranks) continue;
      const bool too_many = cap > 0 && RanksPerNode(request.cluster, ranks, replicas, t) > cap;
      for (int microbatches : Divisors(request.global_batch / replicas)) {
        if (request.microbatches && microbatches != *request.microbatches) continue;
        for (ScheduleKind kind : kinds) {
          if (!CheckMicrobatchCount(kind, ranks, microbatches).ok()) continue;
          std::vector<int> chunk_options = {1};
          switch (LayoutOf(kind)) {
            case StageLayout::kLoop:
              if (ranks < 2) continue;
              chunk_options = request.chunks ? std::vector<int>{*request.chunks} : std::vector<int>{2, 4};
              break;
            case StageLayout::kV:
              chunk_options = {2};  // 2K stages
              if (request.chunks && *request.chunks != 2) continue;
              break;
            case StageLayout::kOnePerRank:
              if (request.chunks && *request.chunks != 1) continue;
              break;
          }
          // One rank has no bubble whatever the schedule; 1F1B (forward, backward, forward, ...)
          // holds one micro-batch's activations where GPipe holds all M. Keep it alone.
          if (ranks == 1 && kind != ScheduleKind::k1F1B && !request.schedule) continue;
          for (int chunks : chunk_options) {
            if (ranks * chunks > layers) continue;
            std::vector<Placement> placements = {Placement::kPipelineMajor};
            if (request.placement) {
              placements = {*request.placement};
            } else if (multi_node && replicas > 1 && ranks > 1) {
              placements.push_back(Placement::kReplicaMajor);
            }
            for (Placement placement : placements) {
              if (too_many) {
                if (oversubscribed != nullptr) ++*oversubscribed;
                continue;
              }
              PartitionProblem p;
              p.profile = &profile;
              if (several_sizes) {
                const int64_t size = request.global_batch / (int64_t{replicas} * microbatches);
                auto it = profiles->find({t, size});
                if (it == profiles->end()) it = profiles->emplace(std::make_pair(t, size), ProfileAtMicrobatch(profile, size)).first;
                p.profile = &it->second;
              }
              p.tensor_parallel = t;
              p.sharded_optimizer = replicas > 1 && request.sharded_optimizer.value_or(true);
              p.cluster = &request.cluster;
              p.schedule = kind;
              p.ranks = ranks;
              p.chunks = chunks;
              p.microbatches = microbatches;
              p.replicas = replicas;
              p.global_batch = request.global_batch;
              p.placement = placement;
              p.optimizer = request.optimizer;
              p.remat = request.remat;
              p.memory_limit_bytes = static_cast<double>(request.cluster.device_memory_bytes);
              p.max_nodes = request.max_nodes;
              problems.push_back(p);
            }
          }
        }
      }
    }
  }
}
}  // namespace

Expected<Candidate> Evaluate(const Plan& plan, bool proven_optimal) {
  Expected<SimResult> result = SimulatePlan(plan, SimOptions{false});
  if (!result.ok()) return result.status();
  Candidate c;
  c.plan = plan;
  c.step_time_ms = result->step_time_ms;
  c.throughput_samples_per_s = result->throughput_samples_per_s;
  c.bubble_fraction = result->bubble_fraction;
  for (const RankResult& rank : result->ranks) c.peak_memory_bytes = std::max(c.peak_memory_bytes, rank.peak_memory_bytes);
  c.proven_optimal = proven_optimal;
  return c;
}

std::function<double()> ClockOf(const SearchRequest& request) {
  if (request.clock) return request.clock;
  return [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
}

std::function<bool()> DeadlineOf(const SearchRequest& request, double share, const double* reserve_s) {
  std::function<double()> clock = ClockOf(request);
  const double origin = std::isnan(request.started_at_s) ? clock() : request.started_at_s;
  const double stop_at = origin + share * request.time_limit_s;  // infinity without a limit
  return [clock = std::move(clock), stop_at, stop = request.stop, reserve_s] {
    return (std::isfinite(stop_at) && clock() >= stop_at - (reserve_s != nullptr ? *reserve_s : 0.0)) ||
           (stop && stop());
  };
}

Expected<SearchResult> SearchPlans(const SearchRequest& request) {
  const int layers = request.profile.num_layers();
  const int devices = request.cluster.devices;
  // The pins' faults are the caller's (Usage); they name K, D, M and the batch, and a CLI adds
  // the flags that set them.
  if (request.ranks && *request.ranks > layers) {
    return Status::Usage("K = " + std::to_string(*request.ranks) + " ranks is more than the profile's " +
                         std::to_string(layers) + " layers; every stage needs at least one layer, so K can be at most " +
                         std::to_string(layers));
  }
  // An unpinned D or M is checked as 1 (the D and M searched divide the batch anyway); K x D
  // against the devices only when K is pinned (the configurations searched fit them anyway).
  if (request.tensor_parallel) {
    GPIPE_RETURN_IF_ERROR(CheckTensorParallel(*request.tensor_parallel, request.profile, request.cluster).AsUsage());
  }
  GPIPE_RETURN_IF_ERROR(CheckPipelineShape(request.global_batch, request.ranks.value_or(1),
                                           request.replicas.value_or(1), request.microbatches.value_or(1),
                                           request.ranks ? devices : 0, request.tensor_parallel.value_or(1))
                            .AsUsage());
  if (request.sharded_optimizer.value_or(false) && request.replicas.value_or(2) < 2) {
    return Status::Usage("a sharded optimizer shards its state over the D replicas; D = 1 has nothing to shard with");
  }
  if (request.schedule && SplitsBackward(*request.schedule) && !request.profile.HasWeightTimes()) {
    return Status::Usage("the schedule " + std::string(ScheduleName(*request.schedule)) +
                         " needs backward_weight_ms for every layer of the profile");
  }
  ProfileStore profiles;  // outlives `problems`, which point into it
  size_t oversubscribed = 0;
  std::vector<PartitionProblem> problems = Configurations(request, &profiles, &oversubscribed);
  if (problems.empty()) {
    if (oversubscribed > 0) {
      return Status::Usage("every configuration of the pinned dimensions puts more ranks on a node than it computes at "
                           "once (" + std::to_string(OversubscriptionCap(request)) + ", as profiled); pin both K and D, "
                           "or search them with --oversubscribe");
    }
    return Status::Usage("no configuration satisfies the pinned dimensions (the interleaved schedules need K >= 2 and "
                         "M in max(1, M/K) equal rounds, dualpipe-v M >= 2K; every stage needs a layer, so S <= layers; "
                         "M must divide the batch per replica)");
  }
  // Best-first over the configurations: each is queued under its cheap bound; popped, it gets
  // its partition's quick lower bound and is queued again under that; popped again, it is
  // searched. Both keys are lower bounds, so the configurations most likely to win are searched
  // first (the best plan found early prunes the rest), and once the smallest key reaches what the
  // alternatives allow, nothing left can matter. Then, in what time is left, the least bounds
  // are raised (after the loop below).
  struct Entry {
    double bound;
    // The key: 0 CheapBounds::Of, 1 PartitionLowerBound's quick bound, 2 final (its full bound, or
    // a search's result that no bound can raise).
    int level;
    size_t index;
    int how = 0;  // index into `hows`: how the bound was found
    bool stopped = false;  // its search stopped (level 1): what raises it is a search again
    bool operator>(const Entry& other) const {
      return bound != other.bound ? bound > other.bound : index > other.index;
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  CheapBounds cheap;
  for (size_t i = 0; i < problems.size(); ++i) queue.push({cheap.Of(problems[i]), 0, i});
  std::vector<std::string> hows = {" (not searched yet)"};

  // Every configuration's share of the lower bound: what its search proved, or, while it waits in
  // the queue, its key. `done` holds those no longer queued, least first.
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> done;
  const auto lower = [&](double bound, size_t index, const std::string& how, bool final, bool stopped = false) {
    if (bound >= kInfinity) return;
    hows.push_back(how);
    done.push({bound, final ? 2 : 1, index, static_cast<int>(hows.size()) - 1, stopped && !final});
  };
  // The searches stop at a share of the time limit; what is left raises the least bounds.
  // (While no search has found a plan, the searches have the whole time, a plan mattering more
  // than a bound, unless by half of it neither they nor the least-memory plan below have one: then
  // most likely none fits, and the other half is the report's of what would, which shares the
  // limit where `started_at_s` is set.)
  // The report simulates the best plan again: the search leaves it the time that simulation took
  // (a thousand ranks: a second or two).
  double report_s = 0;
  const std::function<double()> clock = ClockOf(request);
  const std::function<bool()> time_up = DeadlineOf(request, 1.0, &report_s);
  const std::function<bool()> share_up = DeadlineOf(request, kSearchShare, &report_s);
  const std::function<bool()> half_time_up = DeadlineOf(request, 0.5);
  double best = kInfinity;
  bool searches_found = false;
  const std::function<bool()> search_time_up = [&] {
    if (searches_found) return share_up();
    return std::isfinite(best) ? time_up() : half_time_up();  // (no plan evaluated: no report reserve yet)
  };
  ShapeCache shapes;
  for (PartitionProblem& problem : problems) {
    problem.time_up = search_time_up;
    problem.shapes = &shapes;
    problem.whole_layer_level = false;  // (its second search, below, prunes with it)
  }

  SearchResult out;
  out.configurations = problems.size();
  out.oversubscribed = oversubscribed;
  out.concurrent_ranks = oversubscribed > 0 ? OversubscriptionCap(request) : 0;
  // The older schedules' configurations are pruned against the best plan among them, so that
  // when a newer schedule wins, the report can say by how much (their search costs what it did
  // before the newer ones existed); the newer ones against the best of all.
  double best_older = kInfinity;
  const auto cutoff = [&](const PartitionProblem& problem) { return IsNewerSchedule(problem.schedule) ? best : best_older; };
  std::vector<Candidate> found;
  // Evaluate, and when the plan is the best so far, what that took (the report's reserve).
  const auto evaluate = [&](const Plan& plan, bool proven_optimal) {
    const double evaluated_at = clock();
    Expected<Candidate> candidate = Evaluate(plan, proven_optimal);
    if (candidate.ok() && candidate->step_time_ms < best) report_s = clock() - evaluated_at;
    return candidate;
  };
  const auto keep = [&](const PartitionResult& result) -> Status {
    if (!result.plan) return Status::Ok();
    searches_found = true;
    Expected<Candidate> candidate = evaluate(*result.plan, result.proven_optimal);
    if (!candidate.ok()) return candidate.status();
    best = std::min(best, candidate->step_time_ms);
    if (!IsNewerSchedule(candidate->plan.schedule) && candidate->step_time_ms < best_older) {
      best_older = candidate->step_time_ms;
      out.best_older = *candidate;
    }
    found.push_back(std::move(*candidate));
    return Status::Ok();
  };
  // When no plan is found in time (memory so tight that the searches' first plans do not fit):
  // the least-memory plan, found exactly by a dynamic program, fits when any one-stage-per-rank
  // plan does. It is kept when the request's pins allow it. With whole-stage remat: its program
  // is the faster by far (by layer it prices every n, which on a thousand layers takes longer
  // than a time limit allows). Under auto that plan is one the search could return too. Offered
  // once half the time limit has passed with no plan (its program and simulation take seconds
  // with a thousand ranks: a time limit must hold them), else when the search stops without one.
  bool least_memory_tried = false;
  double least_memory_ms = kInfinity;
  const auto OfferLeastMemory = [&] {
    least_memory_tried = true;
    SearchRequest whole = request;
    if (request.remat == RematPolicy::kAuto) whole.remat = RematPolicy::kStages;
    const double least_started = clock();
    Expected<LeastMemory> least = LeastMemoryOn(whole, devices);
    if (least.ok()) {
      out.least_memory = std::make_shared<const LeastMemory>(*least);
      out.least_memory_remat = whole.remat;
      out.least_memory_s = clock() - least_started;
    }
    const double limit = static_cast<double>(request.cluster.device_memory_bytes);
    if (least.ok() && least->peak_bytes <= limit && (!request.schedule || *request.schedule == least->plan.schedule)) {
      Expected<Candidate> candidate = evaluate(least->plan, false);
      if (candidate.ok()) {
        least_memory_ms = candidate->step_time_ms;
        best = std::min(best, least_memory_ms);
        found.push_back(std::move(*candidate));
      }
    }
  };
  // When the queue's order has found no plan by a share of the limit (thousands of
  // configurations whose bounds are weak, each bound a second at a thousand layers): the first
  // plans of the few configurations CheapBounds::Estimate likes best, each its search's seed
  // alone (no bound computed), so that what is left has a plan to prune against and the user a
  // plan of the right shape.
  const std::function<bool()> dive_time_up = DeadlineOf(request, kDiveAfter);
  const std::function<bool()> dive_over = DeadlineOf(request, kDiveUntil);
  bool dived = false;
  const auto Dive = [&]() -> Status {
    dived = true;
    std::vector<std::pair<double, size_t>> guesses;
    for (size_t i = 0; i < problems.size(); ++i) {
      const double guess = cheap.Estimate(problems[i]);
      if (std::isfinite(guess)) guesses.emplace_back(guess, i);
    }
    // By the estimate, but each schedule's best before any schedule's second (and so on): where
    // memory is tight, the kinds that hold fewer activations have the seeds that fit.
    std::sort(guesses.begin(), guesses.end());
    std::map<ScheduleKind, size_t> taken;
    std::vector<std::tuple<size_t, double, size_t>> order;  // (its rank in its schedule, guess, index)
    for (const auto& [guess, i] : guesses) order.emplace_back(taken[problems[i].schedule]++, guess, i);
    std::sort(order.begin(), order.end());
    size_t plans = 0;
    for (size_t k = 0; k < order.size() && plans < kDives && !dive_over(); ++k) {
      PartitionProblem& problem = problems[std::get<2>(order[k])];
      const PartitionProblem saved = problem;
      problem.root_bound_ms = cheap.Of(problem);  // (any bound: the seed does not need it)
      problem.max_nodes = 1;
      problem.cutoff_ms = kInfinity;
      problem.quick_bound = false;
      Expected<PartitionResult> seed = FindBestPartition(problem);
      problem = saved;
      ++out.dives;
      if (!seed.ok() || !seed->plan) continue;
      ++plans;
      GPIPE_RETURN_IF_ERROR(keep(*seed));
    }
    return Status::Ok();
  };
  auto last_report = std::chrono::steady_clock::now();
  while (!queue.empty()) {
    if (!dived && !std::isfinite(best) && dive_time_up()) GPIPE_RETURN_IF_ERROR(Dive());
    if (!least_memory_tried && !std::isfinite(best) && half_time_up()) OfferLeastMemory();
    const Entry entry = queue.top();
    if (request.target_gap > 0 && Gap(best, std::min(done.empty() ? kInfinity : done.top().bound, entry.bound)) <=
                                      request.target_gap) {
      out.stopped_by_gap = true;
      break;
    }
    if (search_time_up()) {
      out.stopped_by_time = true;
      break;
    }
    queue.pop();
    PartitionProblem& problem = problems[entry.index];
    if (request.progress && std::chrono::steady_clock::now() - last_report > std::chrono::milliseconds(500)) {
      request.progress(problems.size() - queue.size() - 1, problems.size(), best);
      last_report = std::chrono::steady_clock::now();
    }
    if (entry.bound >= std::max(best, best_older) * kAlternatives) {
      out.skipped_by_bound += queue.size() + 1;
      queue = {};  // none can beat the best
      break;
    }
    if (entry.bound >= cutoff(problem) * kAlternatives) {
      ++out.skipped_by_bound;  // a newer schedule that cannot come near the best
      lower(entry.bound, entry.index, " (its lower bound)", true);
      continue;
    }
    if (entry.level == 0) {
      problem.cutoff_ms = cutoff(problem);  // a bound need not be computed past the best step found
      problem.quick_bound = true;
      const double bound = PartitionLowerBound(problem);
      problem.quick_bound = false;
      problem.root_bound_ms = bound;  // (its search starts from it)
      problem.cutoff_ms = kInfinity;  // (a search of it for the alternatives below seeks any plan)
      queue.push({std::max(entry.bound, bound), 1, entry.index});
      continue;
    }
    if (entry.bound >= cutoff(problem)) {
      // It cannot win, but its first plan (the search's seed, one node) may trade speed for
      // memory: keep it for the alternatives.
      problem.max_nodes = 1;
      Expected<PartitionResult> seed = FindBestPartition(problem);
      if (seed.ok()) GPIPE_RETURN_IF_ERROR(keep(*seed));
      lower(entry.bound, entry.index, " (its lower bound)", true);
      ++out.skipped_by_bound;
      continue;
    }
    // Searches with several stages per rank have weaker bounds; they get a hundredth of the
    // budget, and the newer schedules, unless pinned, a thousandth (their memory frontiers cost
    // more per node: 1,024 layers on 32 devices took 39 s with a hundredth, against 1 s without them).
    if (problem.chunks > 1) {
      const int64_t share = IsNewerSchedule(problem.schedule) && !request.schedule ? 1000 : 100;
      problem.max_nodes = std::max<int64_t>(1, request.max_nodes / share);
    }
    problem.cutoff_ms = cutoff(problem);
    Expected<PartitionResult> result = FindBestPartition(problem);
    ++out.searched;
    if (!result.ok()) {
      // A shape the schedule cannot take has no plans; still, only its key is certain.
      lower(entry.bound, entry.index, " (its search failed: " + result.status().message() + ")", true);
      continue;
    }
    // Its key is a lower bound too (the cheap bound can pass the root bound the search had).
    lower(std::max(entry.bound, result->lower_bound_ms), entry.index,
          result->proven_optimal                 ? " (searched to the end)"
          : entry.bound > result->lower_bound_ms ? " (its lower bound: its search stopped)"
                                                 : " (its root bound: its search stopped)",
          result->proven_optimal, /*stopped=*/true);
    out.nodes += result->nodes;
    out.proven_optimal = out.proven_optimal && result->proven_optimal;
    if (!result->proven_optimal) {
      out.unproven.push_back(ConfigurationName(problem) + (result->stopped_by_deadline ? " (time limit)" : ""));
    }
    GPIPE_RETURN_IF_ERROR(keep(*result));
  }
  if (!least_memory_tried && !std::isfinite(best) && (out.stopped_by_time || !out.proven_optimal)) OfferLeastMemory();
  out.best_is_least_memory = std::isfinite(least_memory_ms) && least_memory_ms <= best;
  if (request.progress) request.progress(problems.size(), problems.size(), best);
  // What is still queued (stopped early) counts with its key; what was ruled out by
  // kAlternatives has keys of at least best. In the time left, the least bound is raised while it
  // can be: a configuration's quick bound, then its full one (with its game over the schedule's
  // longest paths, planner/path_bound.h), until the least is final, reaches the best plan or the
  // target gap, or time runs out. A configuration whose search stopped is searched again from its
  // full bound, whose prices prune its branches: that may prove it, or find a faster plan. (With
  // no plan, none: the time left is the report's of what would fit.)
  const auto least = [&]() -> const Entry* {
    if (done.empty()) return queue.empty() ? nullptr : &queue.top();
    return queue.empty() || done.top().bound <= queue.top().bound ? &done.top() : &queue.top();
  };
  for (const Entry* top = least(); top != nullptr && std::isfinite(best) && top->level < 2 && top->bound < best && !time_up();
       top = least()) {
    if (request.target_gap > 0 && Gap(best, top->bound) <= request.target_gap) break;
    Entry entry = *top;
    (top == &done.top() ? done : queue).pop();
    PartitionProblem& problem = problems[entry.index];
    problem.cutoff_ms = best;  // (past the best, a bound no longer holds the gap)
    problem.time_up = time_up;  // (the searches' share is spent: the whole limit now)
    ++out.bounds_raised;
    if (entry.stopped) {
      problem.root_bound_ms = std::numeric_limits<double>::quiet_NaN();
      problem.max_nodes = std::max<int64_t>(1, request.max_nodes / 100);
      // (Past a few hundred layers a search that prunes by it reaches nodes whose memory
      // frontiers cost milliseconds: there the time goes to raising other bounds.)
      problem.whole_layer_level = problem.profile->layers.size() <= kWholeLayerLevelUpTo;
      Expected<PartitionResult> result = FindBestPartition(problem);
      entry.level = 2;  // (searched again once at most)
      if (result.ok()) {
        entry.bound = std::max(entry.bound, result->lower_bound_ms);
        if (result->proven_optimal) {
          hows.push_back(" (searched to the end)");
          entry.how = static_cast<int>(hows.size()) - 1;
          const std::string name = ConfigurationName(problem);
          out.unproven.erase(std::remove_if(out.unproven.begin(), out.unproven.end(),
                                            [&](const std::string& u) { return u == name || u == name + " (time limit)"; }),
                             out.unproven.end());
          out.proven_optimal = out.unproven.empty() && !out.stopped_by_time && !out.stopped_by_gap;
        }
        GPIPE_RETURN_IF_ERROR(keep(*result));
      }
      done.push(entry);
      continue;
    }
    problem.quick_bound = entry.level == 0;
    entry.bound = std::max(entry.bound, PartitionLowerBound(problem));
    problem.quick_bound = false;
    ++entry.level;
    done.push(entry);
  }
  const Entry* top = least();
  out.lower_bound_ms = std::min(best, top != nullptr ? top->bound : kInfinity);
  out.gap = Gap(best, out.lower_bound_ms);
  if (out.gap == 0) {
    out.lower_bound_ms = best;
  } else if (top != nullptr) {
    out.lower_bound_at = ConfigurationName(problems[top->index]) + hows[top->how];
  }
  if (out.stopped_by_time || out.stopped_by_gap) out.proven_optimal = out.proven_optimal && out.gap == 0;
  found.erase(std::remove_if(found.begin(), found.end(),
                             [&](const Candidate& c) { return c.step_time_ms > best * kAlternatives; }),
              found.end());
  std::sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) {
    return a.step_time_ms != b.step_time_ms ? a.step_time_ms < b.step_time_ms : a.peak_memory_bytes < b.peak_memory_bytes;
  });
  if (!found.empty()) out.best = found.front();
  if (!out.best || !IsNewerSchedule(out.best->plan.schedule)) out.best_older.reset();
  double least_memory = kInfinity;
  for (Candidate& c : found) {
    if (c.peak_memory_bytes < least_memory) {
      least_memory = c.peak_memory_bytes;
      out.pareto.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace gpipe
