// What a rank holds of the batch: the memory model counts a micro-batch's input from its forward
// to its backward on the first stage, the targets nowhere, and nothing of the batch on the other
// ranks; the executor must hold no more (the small CNN's last rank, with a 38 KiB classifier,
// once measured 1.30 MiB: the step kept the whole global batch alive on every rank).
#include <gtest/gtest.h>

#include "executor/trainer.h"
#include "executor/worker.h"
#include "tests/executor/test_plans.h"

namespace gpipe::executor {
namespace {

// Convolutions on 16x16 images and a small classifier: the batch's images are far larger than
// anything the classifier's rank computes.
ModelSpec ClassifiedImages() {
  ModelSpec model = testing::ImageModel(/*size=*/16, /*classes=*/4, /*learning_rate=*/0.01);
  const auto layer = testing::ImageLayer;
  model.layers = {layer(LayerType::kConv2d, 3, 8), layer(LayerType::kActivation, 0, 1),
                  layer(LayerType::kGlobalAvgPool, 0, 2), layer(LayerType::kLinear, 8, 4)};
  return model;
}

TEST(MemoryHeldTest, RanksHoldTheirMicroBatchesNotTheGlobalBatch) {
  const ModelSpec model = ClassifiedImages();
  constexpr int64_t kBatch = 32;
  constexpr int64_t kImageBytes = 3 * 16 * 16 * 4;
  for (ScheduleKind schedule : {ScheduleKind::kGpipe, ScheduleKind::k1F1B}) {
    // Stage 0: the convolution, activation and pooling; stage 1: the classifier alone. Adam: a
    // rank's model state between steps is its parameters and two moments.
    Plan plan = testing::EvenPlan(model.num_layers(), schedule, 2, 1, /*microbatches=*/4, 1, kBatch, false, Optimizer::kAdam);
    plan.stages[0].end_layer = plan.stages[1].first_layer = 3;
    RunSettings settings;
    settings.steps = 3;
    Expected<RunRecord> record = TrainInProcess(plan, model, settings);
    ASSERT_TRUE(record.ok()) << record.status().message();
    ASSERT_EQ(record->ranks.size(), 2u);
    for (const RankRecord& r : record->ranks) {
      SCOPED_TRACE("rank " + std::to_string(r.rank) + ", " + ScheduleName(schedule));
      ASSERT_GE(r.step_start_memory_bytes.size(), 2u);
      // Between steps: the model state (and the last step's 8-byte loss), no batch and no data.
      EXPECT_LE(r.step_start_memory_bytes[1], 3 * r.parameter_bytes + 64);
    }
    // The classifier's rank computes on 8 floats a sample; the global batch's images would be
    // 3 KiB a sample.
    const RankRecord& last = record->ranks[1];
    for (size_t step = 0; step < last.step_peak_memory_bytes.size(); ++step) {
      EXPECT_LT(last.step_peak_memory_bytes[step] - last.step_start_memory_bytes[step], kBatch * kImageBytes / 8)
          << "step " << step;
    }
  }
}

}  // namespace
}  // namespace gpipe::executor
