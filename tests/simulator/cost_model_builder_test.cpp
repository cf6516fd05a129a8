// The planner's leaves fill one cost model per search with each partition in turn
// (CostModelBuilder): after any sequence of partitions, the model is exactly what BuildCostModel
// makes of the last one, with tied parameters, a calibration (optimizer tails), replicas on
// several nodes and a split backward; and a split schedule still fails on a layer without its
// weight-gradient time.
#include "simulator/cost_model_builder.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/plan.h"

namespace gpipe {
namespace {

Plan SixLayersOnTwoReplicas() {
  Plan plan;
  plan.profile.model = "six";
  plan.profile.device = "test";
  plan.profile.input_bytes = 1000;
  for (int l = 0; l < 6; ++l) {
    LayerProfile layer;
    layer.name = "l" + std::to_string(l);
    layer.forward_ms = 1.0 + 0.3 * l;
    layer.backward_ms = 2.0 + 0.5 * l;
    layer.backward_weight_ms = 0.7 + 0.1 * l;
    layer.param_bytes = 100'000 * (l + 1);
    layer.activation_bytes = 50'000 * (l + 2);
    layer.output_bytes = 4'000 * (l + 1);
    plan.profile.layers.push_back(layer);
  }
  plan.profile.tied_parameters.push_back({{1, 4}, 64'000, "shared.weight"});
  plan.cluster.devices = 8;
  plan.cluster.devices_per_node = 2;
  plan.cluster.device_memory_bytes = int64_t{1} << 40;
  plan.cluster.link = Link{10e9, 0.01};
  plan.cluster.inter_node_link = Link{1e9, 0.1};
  Calibration calibration;
  calibration.compute_scale = {1.1};
  calibration.send_overhead_ms = 0.03;
  calibration.optimizer_ms_per_gib = 300;
  plan.cluster.calibration = calibration;
  plan.schedule = ScheduleKind::kZbV;  // two stages per rank: the first and last share rank 0
  plan.microbatches = 4;
  plan.replicas = 2;
  plan.sharded_optimizer = true;
  plan.global_batch = 8;
  plan.optimizer = Optimizer::kAdam;
  return plan;
}

// Stages ending at `ends` on the V of two ranks (0 1 1 0), the first `recomputed` layers of
// stage 1 recomputing.
std::vector<StagePlan> V(const std::vector<int>& ends, int recomputed) {
  const int rank[] = {0, 1, 1, 0};
  std::vector<StagePlan> stages;
  for (int s = 0, first = 0; s < 4; first = ends[s], ++s) {
    stages.push_back(StagePlan::Of(first, ends[s], rank[s], s == 1 ? recomputed : 0));
  }
  return stages;
}

void ExpectSame(const CostModel& filled, const CostModel& built, const std::string& label) {
  ASSERT_EQ(filled.stages.size(), built.stages.size()) << label;
  for (size_t s = 0; s < built.stages.size(); ++s) {
    const StageCost& a = filled.stages[s];
    const StageCost& b = built.stages[s];
    EXPECT_EQ(a.forward_ms, b.forward_ms) << label << " stage " << s;
    EXPECT_EQ(a.backward_ms, b.backward_ms) << label << " stage " << s;
    EXPECT_EQ(a.backward_input_ms, b.backward_input_ms) << label << " stage " << s;
    EXPECT_EQ(a.backward_weight_ms, b.backward_weight_ms) << label << " stage " << s;
    EXPECT_EQ(a.remat_forward_ms, b.remat_forward_ms) << label << " stage " << s;
    EXPECT_EQ(a.activation_bytes, b.activation_bytes) << label << " stage " << s;
    EXPECT_EQ(a.static_bytes, b.static_bytes) << label << " stage " << s;
    EXPECT_EQ(a.input_bytes, b.input_bytes) << label << " stage " << s;
    EXPECT_EQ(a.output_bytes, b.output_bytes) << label << " stage " << s;
  }
  EXPECT_EQ(filled.allreduce_ms, built.allreduce_ms) << label;
  EXPECT_EQ(filled.tail_ms, built.tail_ms) << label;
  EXPECT_EQ(filled.shared_static_bytes, built.shared_static_bytes) << label;
  EXPECT_EQ(filled.send_overhead_ms, built.send_overhead_ms) << label;
  EXPECT_EQ(filled.scale, built.scale) << label;
  EXPECT_EQ(filled.calibration_note, built.calibration_note) << label;
  ASSERT_EQ(filled.links.size(), built.links.size()) << label;
  for (size_t from = 0; from < built.links.size(); ++from) {
    for (size_t to = 0; to < built.links.size(); ++to) {
      EXPECT_EQ(filled.links[from][to].bandwidth_bytes_per_s, built.links[from][to].bandwidth_bytes_per_s) << label;
      EXPECT_EQ(filled.links[from][to].latency_ms, built.links[from][to].latency_ms) << label;
    }
  }
}

TEST(CostModelBuilder, AModelFilledWithPartitionsInTurnIsTheLastOnesBuiltAfresh) {
  Plan plan = SixLayersOnTwoReplicas();
  plan.stages = V({1, 3, 5, 6}, 0);
  Expected<CostModelBuilder> builder = CostModelBuilder::Of(plan);
  ASSERT_TRUE(builder.ok()) << builder.status().message();
  CostModel model = builder->Base();
  // Layers 1 and 4 share a parameter: rank 1 holds both in two stages (held once), then rank 0,
  // then neither holds both, then rank 1 again: shared bytes come and go, and the ranks'
  // parameters (all-reduce, tail) change each time.
  const std::vector<std::vector<StagePlan>> partitions = {
      V({1, 3, 5, 6}, 0), V({2, 3, 4, 6}, 1), V({1, 2, 3, 6}, 1), V({1, 4, 5, 6}, 3), V({1, 3, 5, 6}, 0)};
  int with_shared = 0;
  for (size_t i = 0; i < partitions.size(); ++i) {
    plan.stages = partitions[i];
    ASSERT_TRUE(builder->FillStages(plan, &model).ok());
    Expected<CostModel> built = BuildCostModel(plan);
    ASSERT_TRUE(built.ok()) << built.status().message();
    ExpectSame(model, *built, "partition " + std::to_string(i));
    with_shared += !built->shared_static_bytes.empty();
    EXPECT_EQ(built->allreduce_ms.size(), 2u);
    EXPECT_EQ(built->tail_ms.size(), 2u);
  }
  EXPECT_GE(with_shared, 2);
  EXPECT_LT(with_shared, static_cast<int>(partitions.size()));
}

TEST(CostModelBuilder, ASplitScheduleStillNeedsEveryStagesWeightTimes) {
  Plan plan = SixLayersOnTwoReplicas();
  plan.stages = V({1, 3, 5, 6}, 0);
  plan.profile.layers[4].backward_weight_ms.reset();
  Expected<CostModelBuilder> builder = CostModelBuilder::Of(plan);
  ASSERT_TRUE(builder.ok());
  CostModel model = builder->Base();
  const Status filled = builder->FillStages(plan, &model);
  ASSERT_FALSE(filled.ok());
  EXPECT_NE(filled.message().find("layers[4]"), std::string::npos) << filled.message();
  EXPECT_NE(filled.message().find("backward_weight_ms"), std::string::npos) << filled.message();
  EXPECT_EQ(filled.message(), BuildCostModel(plan).status().message());
}

}  // namespace
}  // namespace gpipe
