// The planner on the benchmark families of bench/planner_families.py (uniform blocks, random
// uneven layers, heavy ends, bimodal, memory-tight), 64 / 256 / 1,024 layers on 8 / 16 / 32 /
// 64 devices in nodes of 8, global batch 512; each a full search, one thread:
//   build-core/bench/planner_bench --benchmark_filter=Family
// Arguments: family, layers, devices, target gap in parts per million (0: stop once proven
// optimal), remat policy (0: auto, by layer; 1: stages, a stage's layers all or none). Every search also stops after kTimeLimitS of CPU time. Counters: gap (best / lower bound - 1),
// proven (1 when the gap is 0), step_ms and lower_bound_ms, searched configurations, and the
// per-device budget in GiB (memory-tight: 1.05x the least memory any plan needs).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <string>
#include <utility>

#include "core/cluster.h"
#include "core/profile.h"
#include "planner/partition.h"
#include "planner/search.h"

namespace gpipe {
namespace {

// One core's time: the search's clock is this process's CPU time (one thread), so that the
// figures hold on a busy machine too.
constexpr double kTimeLimitS = 2;
const char* const kFamilies[] = {"uniform", "uneven", "heavy-ends", "bimodal", "memory-tight"};
constexpr int kMemoryTight = 4;

// The least per-device memory any plan needs, as `plan` computes it when nothing fits: K = the
// devices, M = the batch (one sample per micro-batch), 1F1B, remat where it saves memory, the
// partition of smallest largest peak. Whole-stage remat, so that the family's budget is the same
// for both remat policies (and as before remat by layer): by layer, plans may need less.
double LeastMemory(const Profile& profile, const Cluster& cluster, int64_t global_batch) {
  PartitionProblem smallest;
  smallest.profile = &profile;
  smallest.cluster = &cluster;
  smallest.schedule = ScheduleKind::k1F1B;
  smallest.ranks = std::min(cluster.devices, profile.num_layers());
  smallest.microbatches = static_cast<int>(global_batch);
  smallest.global_batch = global_batch;
  smallest.optimizer = DefaultOptimizer(profile);
  smallest.remat = RematPolicy::kStages;
  Expected<LeastMemoryResult> least = LeastMemoryPartition(smallest);
  return least.ok() ? least->peak_bytes : 0;
}

void BM_Family(benchmark::State& state) {
  const int family = static_cast<int>(state.range(0));
  const int layers = static_cast<int>(state.range(1));
  const int devices = static_cast<int>(state.range(2));
  const double target_gap = state.range(3) > 0 ? static_cast<double>(state.range(3)) * 1e-6 : 1e-12;
  const std::string dir = GPIPE_FAMILIES_DIR "/";
  const std::string profile_file = std::string(family == kMemoryTight ? "uneven" : kFamilies[family]) + "-" +
                                   std::to_string(layers) + ".json";
  Expected<Profile> profile = LoadProfile(dir + profile_file);
  Expected<Cluster> cluster = LoadCluster(dir + "cluster-" + std::to_string(devices) + ".json");
  if (!profile.ok() || !cluster.ok()) {
    state.SkipWithError(("run python3 bench/planner_families.py --out " + dir + " first: " +
                         (profile.ok() ? cluster.status() : profile.status()).message()).c_str());
    return;
  }
  SearchRequest request;
  request.profile = std::move(*profile);
  request.cluster = std::move(*cluster);
  request.global_batch = 512;
  request.optimizer = DefaultOptimizer(request.profile);
  request.time_limit_s = kTimeLimitS;
  request.clock = [] { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; };
  request.target_gap = target_gap;
  request.remat = state.range(4) == 0 ? RematPolicy::kAuto : RematPolicy::kStages;
  if (family == kMemoryTight) {
    request.cluster.device_memory_bytes =
        static_cast<int64_t>(1.05 * LeastMemory(request.profile, request.cluster, request.global_batch));
  }
  const std::string label = std::string(kFamilies[family]) + " L=" + std::to_string(layers) + " N=" + std::to_string(devices) +
                            " remat " + RematPolicyName(request.remat);
  SearchResult last;
  for (auto _ : state) {
    Expected<SearchResult> result = SearchPlans(request);
    if (!result.ok()) {
      state.SkipWithError(result.status().message().c_str());
      return;
    }
    last = std::move(*result);
  }
  state.SetLabel(label + (last.lower_bound_at.empty() ? "" : "; bound: " + last.lower_bound_at));
  state.counters["gap"] = last.best ? last.gap : -1;
  state.counters["proven"] = last.best && last.gap == 0 ? 1 : 0;
  state.counters["step_ms"] = last.best ? last.best->step_time_ms : 0;
  state.counters["lower_bound_ms"] = last.lower_bound_ms;
  state.counters["searched"] = static_cast<double>(last.searched);
  state.counters["budget_gib"] = static_cast<double>(request.cluster.device_memory_bytes) / (1 << 30);
}
BENCHMARK(BM_Family)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {64, 256, 1024}, {8, 16, 32, 64}, {0, 10'000}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
}  // namespace gpipe
