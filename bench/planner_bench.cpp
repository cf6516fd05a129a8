// How fast the planner runs.
//   build/bench/planner_bench --benchmark_filter=Exact       # one (K, M, schedule), shipped GPT-3 13B
//   build/bench/planner_bench --benchmark_filter=Layers      # growth with the number of layers
//   build/bench/planner_bench --benchmark_filter=FullSearch  # every dimension: 8 and 32 A100s, a
//                                                            # 1,024-layer model on 64 devices, and
//                                                            # growth with layers and devices
// Counters: nodes of the branch and bound, and proven = 1 when it finished within its budget.
#include <benchmark/benchmark.h>

#include <string>

#include "planner/partition.h"
#include "planner/search.h"

namespace gpipe {
namespace {

const std::string kProfiles = GPIPE_SOURCE_DIR "/profiles/";

const Profile& Gpt3() {
  static const Profile profile = *LoadProfile(kProfiles + "gpt3-13b-a100-80gb.json");
  return profile;
}

// A GPT-like profile of `layers` layers: GPT-3 13B's embedding and head around identical
// blocks, each 1/40 of a 13B block, so that models of every depth fit the same cluster.
Profile Deep(int layers) {
  Profile profile = Gpt3();
  LayerProfile block = profile.layers[1];
  block.param_bytes /= 40;
  block.activation_bytes /= 40;
  block.forward_ms /= 40;
  block.backward_ms /= 40;
  *block.backward_weight_ms /= 40;
  std::vector<LayerProfile> all = {profile.layers.front()};
  for (int l = 0; l < layers - 2; ++l) {
    block.name = "block" + std::to_string(l);
    all.push_back(block);
  }
  all.push_back(profile.layers.back());
  profile.layers = all;
  return profile;
}

void RunPartition(benchmark::State& state, const Profile& profile, const Cluster& cluster, ScheduleKind kind) {
  PartitionProblem problem;
  problem.profile = &profile;
  problem.cluster = &cluster;
  problem.schedule = kind;
  problem.ranks = static_cast<int>(state.range(0));
  problem.microbatches = static_cast<int>(state.range(1));
  problem.global_batch = problem.microbatches;
  problem.optimizer = Optimizer::kAdamMixed;
  problem.memory_limit_bytes = static_cast<double>(cluster.device_memory_bytes);
  PartitionResult last;
  for (auto _ : state) {
    Expected<PartitionResult> result = FindBestPartition(problem);
    if (!result.ok()) {
      state.SkipWithError(result.status().message().c_str());
      return;
    }
    last = *result;
  }
  state.counters["nodes"] = static_cast<double>(last.nodes);
  state.counters["proven"] = last.proven_optimal ? 1 : 0;
  state.counters["step_ms"] = last.step_time_ms;
}

const Cluster& Cluster8() {
  static const Cluster cluster = *LoadCluster(kProfiles + "clusters/a100-80gb-8.json");
  return cluster;
}
const Cluster& Cluster32() {
  static const Cluster cluster = *LoadCluster(kProfiles + "clusters/a100-80gb-32.json");
  return cluster;
}

void BM_Exact1F1B(benchmark::State& state) { RunPartition(state, Gpt3(), Cluster32(), ScheduleKind::k1F1B); }
void BM_ExactGpipe(benchmark::State& state) { RunPartition(state, Gpt3(), Cluster32(), ScheduleKind::kGpipe); }
void BM_ExactZbH1(benchmark::State& state) { RunPartition(state, Gpt3(), Cluster32(), ScheduleKind::kZbH1); }
BENCHMARK(BM_Exact1F1B)->Args({4, 16})->Args({8, 32})->Args({8, 128})->Args({16, 64})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExactGpipe)->Args({4, 16})->Args({8, 32})->Args({8, 128})->Args({16, 64})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExactZbH1)->Args({4, 16})->Args({8, 32})->Args({8, 128})->Args({16, 64})->Unit(benchmark::kMillisecond);

void BM_Layers1F1B(benchmark::State& state) {
  const Profile profile = Deep(static_cast<int>(state.range(2)));
  RunPartition(state, profile, Cluster32(), ScheduleKind::k1F1B);
}
BENCHMARK(BM_Layers1F1B)
    ->Args({8, 32, 64})->Args({8, 32, 128})->Args({8, 32, 256})->Args({8, 32, 512})->Args({8, 32, 1024})
    ->Unit(benchmark::kMillisecond)->Iterations(1);

void FullSearch(benchmark::State& state, const Cluster& cluster, const Profile& profile = Gpt3(),
                int64_t max_nodes = 0) {
  SearchRequest request;
  request.profile = profile;
  request.cluster = cluster;
  request.global_batch = 512;
  request.optimizer = Optimizer::kAdamMixed;
  request.max_nodes = max_nodes > 0 ? max_nodes : state.range(0);
  SearchResult last;
  for (auto _ : state) last = *SearchPlans(request);
  state.counters["configurations"] = static_cast<double>(last.configurations);
  state.counters["searched"] = static_cast<double>(last.searched);
  state.counters["proven"] = last.proven_optimal ? 1 : 0;
  state.counters["step_ms"] = last.best ? last.best->step_time_ms : 0;
}
void BM_FullSearch8(benchmark::State& state) { FullSearch(state, Cluster8()); }
void BM_FullSearch32(benchmark::State& state) { FullSearch(state, Cluster32()); }
BENCHMARK(BM_FullSearch8)->Arg(20'000)->Arg(200'000)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_FullSearch32)->Arg(20'000)->Arg(200'000)->Unit(benchmark::kMillisecond)->Iterations(1);
// The target case: a 1,024-layer GPT-like profile on 64 devices (8 nodes of 8).
void BM_FullSearchDeep64(benchmark::State& state) {
  Cluster cluster = Cluster32();
  cluster.devices = 64;
  static const Profile deep = Deep(1024);
  FullSearch(state, cluster, deep);
}
BENCHMARK(BM_FullSearchDeep64)->Arg(2'000)->Arg(200'000)->Unit(benchmark::kMillisecond)->Iterations(1);

// Growth: the full search (default budget) over GPT-like profiles of `layers` layers on
// `devices` A100s in nodes of 8.
void BM_FullSearchGrowth(benchmark::State& state) {
  Cluster cluster = Cluster32();
  cluster.devices = static_cast<int>(state.range(1));
  const Profile profile = Deep(static_cast<int>(state.range(0)));
  state.SetLabel(std::to_string(state.range(0)) + " layers, " + std::to_string(state.range(1)) + " devices");
  FullSearch(state, cluster, profile, 200'000);
}
BENCHMARK(BM_FullSearchGrowth)
    ->ArgsProduct({{64, 256, 1024}, {8, 16, 32, 64}})
    ->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace gpipe

BENCHMARK_MAIN();
