// How fast the simulator runs: simulated actions per second, for GPipe over a grid of K and M
// (cost grows with the number of actions), and the other schedules at one size; and the step
// evaluator the planner prices its leaves with (simulator/step_evaluator.h), and its memory
// frontiers (simulator/memory_model.h): built for every rank of a schedule, then priced.
//   build/bench/simulator_bench --benchmark_filter=Gpipe
// Each iteration generates nothing: the lowered schedule and costs are built once per size.
#include <benchmark/benchmark.h>

#include <optional>
#include <vector>

#include "core/schedule/generators.h"
#include "core/schedule/lower.h"
#include "simulator/memory_model.h"
#include "simulator/simulator.h"
#include "simulator/step_evaluator.h"

namespace gpipe {
namespace {

// The lowered schedule of `kind` at the state's K and M (chunks stages per rank), and costs of
// equal stages (F 1 ms, B 2 ms, W 1 ms, 1 MiB messages, 16 MiB activations) over 10 GB/s links;
// none (the benchmark skipped) where the schedule cannot take that shape.
struct Bench {
  Schedule schedule;
  CostModel costs;
};
std::optional<Bench> Setup(benchmark::State& state, ScheduleKind kind, int chunks) {
  const int ranks = static_cast<int>(state.range(0));
  const int microbatches = static_cast<int>(state.range(1));
  Expected<Schedule> compute = GenerateSchedule(kind, ranks, ranks * chunks, microbatches);
  if (!compute.ok()) {
    state.SkipWithError(compute.status().message().c_str());
    return std::nullopt;
  }
  Bench out{AddCommunication(*compute), UniformCostModel(ranks, ranks * chunks, 1.0, 2.0, 1.0)};
  for (auto& stage : out.costs.stages) {
    stage.output_bytes = stage.input_bytes = 1 << 20;
    stage.activation_bytes = 1 << 24;
  }
  for (auto& row : out.costs.links) {
    for (Link& link : row) link = Link{1e10, 0.01};
  }
  return out;
}

void Simulate(benchmark::State& state, ScheduleKind kind, int chunks) {
  const std::optional<Bench> bench = Setup(state, kind, chunks);
  if (!bench) return;
  SimOptions options;
  options.record_timeline = false;
  for (auto _ : state) {
    Expected<SimResult> result = gpipe::Simulate(bench->schedule, bench->costs, options);
    benchmark::DoNotOptimize(result);
  }
  const double actions = static_cast<double>(bench->schedule.num_actions());
  state.counters["actions"] = actions;
  state.counters["actions_per_s"] = benchmark::Counter(actions, benchmark::Counter::kIsIterationInvariantRate);
  state.SetComplexityN(static_cast<int64_t>(actions));
}

// The same schedules' step time by the planner's StepEvaluator, compiled once.
void Evaluate(benchmark::State& state, ScheduleKind kind, int chunks) {
  const std::optional<Bench> bench = Setup(state, kind, chunks);
  if (!bench) return;
  const StepEvaluator evaluator(bench->schedule);
  for (auto _ : state) benchmark::DoNotOptimize(evaluator.StepTimeMs(bench->costs));
  const double actions = static_cast<double>(bench->schedule.num_actions());
  state.counters["actions_per_s"] = benchmark::Counter(actions, benchmark::Counter::kIsIterationInvariantRate);
}

// Every rank's MemoryFrontier of a schedule built, then priced 20 times each way (as a search
// prices a configuration's ranks), so that each builds its sets of maximal vectors where they
// pay.
void Frontiers(benchmark::State& state, ScheduleKind kind, int chunks) {
  const std::optional<Bench> bench = Setup(state, kind, chunks);
  if (!bench) return;
  const ReceivePosting posting = ReceivesPostedAt(bench->schedule);
  for (auto _ : state) {
    double peak = 0;
    for (int r = 0; r < bench->schedule.num_ranks(); ++r) {
      const MemoryFrontier frontier(bench->schedule, r, &posting);
      std::vector<const StageCost*> kept;
      for (int s : frontier.stages()) kept.push_back(&bench->costs.stages[s]);
      for (int price = 0; price < 20; ++price) {
        peak += frontier.LeastStashPeakBytes(kept.data(), kept.data()) + frontier.PeakDynamicBytes(kept);
      }
    }
    benchmark::DoNotOptimize(peak);
  }
}

void BM_Gpipe(benchmark::State& state) { Simulate(state, ScheduleKind::kGpipe, 1); }
void BM_1F1B(benchmark::State& state) { Simulate(state, ScheduleKind::k1F1B, 1); }
void BM_Interleaved(benchmark::State& state) { Simulate(state, ScheduleKind::kInterleaved1F1B, 2); }
void BM_ZbH1(benchmark::State& state) { Simulate(state, ScheduleKind::kZbH1, 1); }

BENCHMARK(BM_Gpipe)
    ->Args({8, 32})->Args({8, 128})->Args({16, 256})->Args({32, 256})->Args({64, 256})->Args({64, 512})
    ->Args({64, 1024})
    ->Unit(benchmark::kMillisecond)->Complexity(benchmark::oN);
BENCHMARK(BM_1F1B)->Args({64, 1024})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Interleaved)->Args({64, 1024})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ZbH1)->Args({64, 1024})->Unit(benchmark::kMillisecond);

void BM_Evaluate1F1B(benchmark::State& state) { Evaluate(state, ScheduleKind::k1F1B, 1); }
void BM_EvaluateZbV(benchmark::State& state) { Evaluate(state, ScheduleKind::kZbV, 2); }
BENCHMARK(BM_Evaluate1F1B)->Args({8, 512})->Args({64, 1024})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EvaluateZbV)->Args({16, 32})->Args({8, 512})->Unit(benchmark::kMicrosecond);

void BM_FrontiersInterleavedZb(benchmark::State& state) { Frontiers(state, ScheduleKind::kInterleavedZb, 4); }
void BM_FrontiersZbV(benchmark::State& state) { Frontiers(state, ScheduleKind::kZbV, 2); }
BENCHMARK(BM_FrontiersInterleavedZb)->Args({8, 512})->Args({32, 512})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FrontiersZbV)->Args({8, 512})->Args({32, 512})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpipe

BENCHMARK_MAIN();
