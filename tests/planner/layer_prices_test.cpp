// The path bound's LayerPrices (planner/path_bound.h) against every partition of small random
// profiles, for every schedule kind: their least over the partitions is the bound they came from,
// LeastPartition attains it, Rest is the least over every suffix of stages, and (memory not
// priced) no partition is priced above its schedule's longest path, which is its step on the
// links the bound assumes (precedence_graph_test.cpp). With memory priced, the least and the bound
// agree the same way; that plans which fit stay at or above their prices is what the searches'
// brute-force tests check (partition_test.cpp: the searches prune by these prices and must still
// find every optimum).
#include "planner/path_bound.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/schedule/generators.h"
#include "core/schedule/placement.h"
#include "planner/partition_program.h"
#include "planner/precedence_graph.h"
#include "simulator/layer_table.h"

namespace gpipe::path_internal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Profile RandomProfile(std::mt19937& rng, int layers) {
  Profile profile;
  profile.model = "random";
  profile.device = "test";
  profile.microbatch_size = 1;
  for (int l = 0; l < layers; ++l) {
    LayerProfile layer;
    layer.name = "l" + std::to_string(l);
    layer.forward_ms = 0.3 + (rng() % 100) / 30.0;
    layer.backward_ms = layer.forward_ms * (1.5 + (rng() % 10) / 10.0);
    layer.backward_weight_ms = layer.backward_ms * (0.2 + (rng() % 6) / 10.0);
    layer.param_bytes = 1'000'000 * (1 + static_cast<int64_t>(rng() % 8));
    layer.activation_bytes = 4'000'000 * (1 + static_cast<int64_t>(rng() % 8));
    layer.output_bytes = 250'000 * (1 + static_cast<int64_t>(rng() % 8));
    profile.layers.push_back(layer);
  }
  return profile;
}

// Calls `visit` with the stage ends of every partition of layers [first, layers) into `stages`
// stages, none empty.
void ForEachPartition(int first, int layers, int stages, const std::function<void(const std::vector<int>&)>& visit) {
  std::vector<int> ends(stages);
  std::function<void(int, int)> place = [&](int s, int a) {
    if (s == stages - 1) {
      ends[s] = layers;
      visit(ends);
      return;
    }
    for (int e = a + 1; e <= layers - (stages - 1 - s); ++e) {
      ends[s] = e;
      place(s + 1, e);
    }
  };
  place(0, first);
}

// What `prices` charge for stages `first_stage`, ... ending at `ends`, from layer `first` on.
double Price(const LayerPrices& prices, int first_stage, int first, const std::vector<int>& ends) {
  double price = 0;
  for (size_t s = 0; s < ends.size(); ++s) {
    price += prices.StageCost(first_stage + static_cast<int>(s), first, ends[s]);
    first = ends[s];
  }
  return price;
}

TEST(LayerPrices, PriceEveryPartitionAtOrBelowItsLongestPath) {
  std::mt19937 rng(5);
  int partitions = 0, cases = 0;
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int ranks : {2, 3}) {
      const int chunks = LayoutOf(kind) == StageLayout::kOnePerRank ? 1 : 2;
      const int stages = ranks * chunks;
      for (int microbatches : {2, 4, 6}) {
        if (!CheckMicrobatchCount(kind, ranks, microbatches).ok()) continue;
        const int layers = stages + 2 + static_cast<int>(rng() % 3);
        const Profile profile = RandomProfile(rng, layers);
        const LayerTable table(profile, 1.0, Optimizer::kAdam);
        Expected<Schedule> schedule = GenerateSchedule(kind, ranks, stages, microbatches);
        ASSERT_TRUE(schedule.ok()) << schedule.status().message();
        PathBoundInput input;
        input.schedule = &*schedule;
        input.table = &table;
        // Messages whose time depends on the layer that ends the stage: a latency per boundary and
        // a bandwidth each way, over each layer's output.
        for (int s = 0; s + 1 < stages; ++s) {
          input.hops.crosses.push_back(schedule->stage_rank[s] != schedule->stage_rank[s + 1]);
          const double latency = 0.05 + 0.1 * static_cast<double>(rng() % 5);
          input.hops.forward.push_back(Link{1e6 * static_cast<double>(1 + rng() % 4), latency});
          input.hops.backward.push_back(Link{1e6 * static_cast<double>(1 + rng() % 4), latency + 0.01});
        }
        for (int l = 0; l < layers; ++l) input.hops.bytes.push_back(table.OutputBytes(l));
        std::vector<OpTimes> times(layers);
        for (int l = 0; l < layers; ++l) {
          const double b = table.BackwardMs(l, l + 1), w = table.WeightMs(l, l + 1);
          times[l] = {table.LeastForwardMs(l, l + 1), b, b - w, w, table.ParamBytes(l, l + 1)};
        }
        const std::optional<PrecedenceGraph> graph = PrecedenceGraphOf(*schedule, size_t{1} << 20);
        ASSERT_TRUE(graph.has_value());
        for (int variant = 0; variant < 3; ++variant) {
          // 0: no all-reduce; 1: one after each rank's last action, affine in its bytes; 2: memory
          // priced as well, at a limit that forces recompute.
          const std::string label = std::string(ScheduleName(kind)) + " K=" + std::to_string(ranks) +
                                    " M=" + std::to_string(microbatches) + " variant " + std::to_string(variant);
          input.allreduce.clear();
          if (variant >= 1) input.allreduce.assign(ranks, AllReduceLine{1.5, 2e-7});
          input.static_bytes.clear();
          input.activation_bytes.clear();
          input.memory_limit_bytes = 0;
          if (variant == 2) {
            double total = 0;
            for (int l = 0; l < layers; ++l) {
              input.static_bytes.push_back(table.StaticBytes(l, l + 1));
              input.activation_bytes.push_back(table.ActivationBytes(l, l + 1));
              total += input.static_bytes.back() + 2 * input.activation_bytes.back();
            }
            input.memory_limit_bytes = total / ranks;
          }
          LayerPrices prices;
          input.prices = &prices;
          const double bound = PathLowerBound(input);
          ASSERT_FALSE(prices.empty()) << label;
          ++cases;
          // The least price is the bound, and LeastPartition has it.
          EXPECT_NEAR(prices.constant() + prices.Rest(0, 0), bound, 1e-9 * bound) << label;
          EXPECT_NEAR(Price(prices, 0, 0, prices.LeastPartition()), prices.Rest(0, 0), 1e-9 * bound) << label;
          double least = kInf;
          ForEachPartition(0, layers, stages, [&](const std::vector<int>& ends) {
            const double price = prices.constant() + Price(prices, 0, 0, ends);
            least = std::min(least, price);
            if (variant == 2) return;  // (the longest path knows no memory)
            const std::vector<GraphPath> paths = LongestPaths(*graph, StageTimesOf(ends, times, input.hops), input.allreduce, false);
            ASSERT_EQ(paths.size(), 1u);
            double longest = paths[0].hops;
            const std::vector<OpTimes> stage_times = StageTimesOf(ends, times, input.hops);
            for (const PathTerm& term : paths[0].body) longest += term.count * stage_times[term.stage][term.op];
            EXPECT_LE(price, longest * (1 + 1e-9)) << label;
            ++partitions;
          });
          EXPECT_NEAR(least, bound, 1e-9 * bound) << label;
          // Rest(s, a): the least over the ways to place layers [a, L) in stages s, s + 1, ...
          for (int s = 1; s < stages; ++s) {
            for (int a = s; a <= layers - (stages - s); ++a) {
              double rest = kInf;
              ForEachPartition(a, layers, stages - s,
                               [&](const std::vector<int>& ends) { rest = std::min(rest, Price(prices, s, a, ends)); });
              EXPECT_NEAR(prices.Rest(s, a), rest, 1e-9 * bound) << label << " Rest(" << s << ", " << a << ")";
            }
            EXPECT_EQ(prices.Rest(s, layers), kInf) << label;
          }
          EXPECT_EQ(prices.Rest(stages, layers), 0.0) << label;
        }
      }
    }
  }
  EXPECT_GT(cases, 40);
  EXPECT_GT(partitions, 1500);
}

}  // namespace
}  // namespace gpipe::path_internal
