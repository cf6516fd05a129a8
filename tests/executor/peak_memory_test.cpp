// A rank's peak memory: the memory model, fed the profiler's own figures, against what the
// executor holds.
//
// A forward that keeps its activations: each layer's forward workspace comes on top of the
// layers before it only, not the whole stash; priced on top of the whole stash, the small CNN's
// first convolution (a workspace half its activations) put its one-rank runs 5-10% over.
//
// A zero-bubble rank: I keeps the graph for W, W frees parts of it as it runs, and on a first stage
// W runs the first layer's whole backward. Priced with the full backward's workspace for I and W
// (profiles without the split pass's figures), the small CNN's zb-h1 ranks were 10-17% off.
// Inside a stage, a layer's I frees the gradient it got from the layer above once used; the
// profiler's inner I peak prices that. Not covered here, and still off (docs/memory.md): a stage
// under remat whose W runs the first layer's backward.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/schedule/validate.h"
#include "executor/profiler.h"
#include "executor/worker.h"
#include "simulator/cost_model.h"
#include "simulator/memory_model.h"
#include "tests/executor/profile_settings.h"
#include "tests/executor/test_plans.h"

namespace gpipe::executor {
namespace {

constexpr int64_t kMicrobatch = 8;

// The small CNN's shape on 16x16 images: two conv blocks with pooling, then a classifier.
ModelSpec SmallCnn() {
  ModelSpec model = testing::ImageModel(/*size=*/16, /*classes=*/4, /*learning_rate=*/0.01);
  const auto layer = testing::ImageLayer;
  model.layers = {layer(LayerType::kConvBlock, 3, 8),  layer(LayerType::kMaxPool2d, 0, 1),
                  layer(LayerType::kConvBlock, 8, 16), layer(LayerType::kMaxPool2d, 0, 3),
                  layer(LayerType::kGlobalAvgPool, 0, 4), layer(LayerType::kLinear, 16, 4)};
  for (int i : {0, 2}) {
    model.layers[static_cast<size_t>(i)].kernel = 3;
    model.layers[static_cast<size_t>(i)].stride = 1;
    model.layers[static_cast<size_t>(i)].padding = 1;
  }
  return model;
}

Profile Profiled(const ModelSpec& model, const std::string& precision = "fp32") {
  ProfileSettings settings = testing::OneSizeSettings(kMicrobatch, 1);
  settings.precision = precision;
  Expected<std::vector<SizeMeasurement>> sizes = MeasureModel(model, settings);
  EXPECT_TRUE(sizes.ok()) << sizes.status().message();
  return ProfileFromMeasurements(model, settings, *sizes);
}

// The small CNN on `ranks` ranks (K = 2: stage 1 begins at layer `cut`), `microbatches` of
// kMicrobatch, Adam, priced with `profile`.
Plan CnnPlan(const Profile& profile, ScheduleKind schedule, int ranks, int microbatches, int cut, bool remat) {
  Plan plan = testing::EvenPlan(profile.num_layers(), schedule, ranks, 1, microbatches, 1, kMicrobatch * microbatches,
                                remat, Optimizer::kAdam);
  plan.profile = profile;
  if (ranks == 2) plan.stages[0].end_layer = plan.stages[1].first_layer = cut;
  return plan;
}

// Two steps of `plan`, its ranks in this process.
Expected<RunRecord> TwoSteps(const Plan& plan, const ModelSpec& model) {
  RunSettings settings;
  settings.steps = 2;
  return TrainInProcess(plan, model, settings);
}

// Each rank's predicted peak over its measured one, less one, in pipeline-rank order.
std::vector<double> PeakErrors(const Plan& plan, const RunRecord& record) {
  Expected<Schedule> schedule = BuildSchedule(plan);
  Expected<CostModel> costs = BuildCostModel(plan);
  EXPECT_TRUE(schedule.ok() && costs.ok());
  std::vector<double> errors(static_cast<size_t>(plan.num_ranks()), 0.0);
  for (const RankRecord& r : record.ranks) {
    const double predicted = RankMemoryPeak(*schedule, r.pipeline_rank, *costs).peak_bytes;
    errors[static_cast<size_t>(r.pipeline_rank)] = predicted / static_cast<double>(r.peak_memory_bytes) - 1.0;
  }
  return errors;
}

TEST(PeakMemoryTest, ARankThatKeepsItsActivationsPeaksWhereTheModelSays) {
  const ModelSpec model = SmallCnn();
  const Profile profile = Profiled(model);
  // The first convolution's forward peaks well above what it keeps, while none of the later
  // layers' activations are there yet.
  ASSERT_GT(profile.layers[0].forward_workspace_bytes, profile.layers[0].activation_bytes / 4);
  for (ScheduleKind schedule : {ScheduleKind::kGpipe, ScheduleKind::k1F1B}) {
    // The whole model on one rank; the first conv block and its pooling, whose output (the
    // stage's root) stays through the stage's backward (priced as freed with the pooling's
    // activations, the rank was 3.3% under with GPipe).
    for (int ranks : {1, 2}) {
      SCOPED_TRACE(std::string(ScheduleName(schedule)) + ", K=" + std::to_string(ranks));
      const Plan plan = CnnPlan(profile, schedule, ranks, 2 * ranks, /*cut=*/2, /*remat=*/false);
      Expected<RunRecord> record = TwoSteps(plan, model);
      ASSERT_TRUE(record.ok()) << record.status().message();
      // The first stage's rank. (With K = 2 the last stage of this model, the second conv block
      // to the classifier, read 6-9% off in-process at ce4f7e8, over under GPipe and under under
      // 1F1B; the small CNN of models/ is within 6% on every rank over Gloo: bench/RESULTS.md.)
      const double error = PeakErrors(plan, *record).front();
      EXPECT_LT(std::abs(error), 0.05) << error;
    }
  }
}

TEST(PeakMemoryTest, AZeroBubbleRanksPeakIsTheModelsFromTheProfilersFigures) {
  const ModelSpec model = SmallCnn();
  const Profile profile = Profiled(model);
  for (const LayerProfile& layer : profile.layers) ASSERT_TRUE(layer.split_backward.has_value()) << layer.name;
  // The first layer's W runs its whole backward below its output: more than one output at once.
  EXPECT_GT(profile.layers[0].split_backward->weight_peak, profile.layers[0].output_bytes);
  // The first stage's rank, whose W runs the first layer's whole backward: the whole model on one
  // rank; the first conv block and its pooling (the block is the stage's top layer with
  // parameters, so the pooling's graph holds its output through W); both blocks (the second's
  // cut lets go of the first's graph above it).
  struct Case {
    int ranks;
    int cut;  // K = 2: where stage 1 begins
  };
  double worst_before = 0;
  for (const Case& c : {Case{1, 0}, Case{2, 2}, Case{2, 4}}) {
    SCOPED_TRACE("K=" + std::to_string(c.ranks) + " cut " + std::to_string(c.cut));
    const Plan plan = CnnPlan(profile, ScheduleKind::kZbH1, c.ranks, 2 * c.ranks, c.cut, /*remat=*/false);
    Expected<RunRecord> record = TwoSteps(plan, model);
    ASSERT_TRUE(record.ok()) << record.status().message();
    const std::vector<double> errors = PeakErrors(plan, *record);
    // Every rank within 5%. (The in-process wire's mailbox copies are charged to no rank, as a
    // real wire's buffers are in neither rank's tensors; charged to the sender, they made its peak
    // depend on when the receiver took them: the cut-4 second stage was priced 23% under what it held.)
    for (double error : errors) EXPECT_LT(std::abs(error), 0.05) << error;
    if (c.cut == 2) {
      // The second stage begins with the second conv block, whose I gets the gradient of its
      // output from the pooling above and frees it once used: priced from the inner I peak;
      // priced as if it held that gradient (the stage's last layer's I), over by more than 8%.
      Plan held = plan;
      for (LayerProfile& layer : held.profile.layers) layer.inner_backward_input_peak_bytes.reset();
      EXPECT_GT(PeakErrors(held, *record).back(), 0.08);
    }
    // The same plan priced without the split pass's figures, as before the profiler had them.
    Plan before = plan;
    for (LayerProfile& layer : before.profile.layers) layer.split_backward.reset();
    worst_before = std::max(worst_before, std::abs(PeakErrors(before, *record).front()));
  }
  EXPECT_GT(worst_before, 0.10);
}

TEST(PeakMemoryTest, ARematRanksStashHoldsTheGeneratorStateItReplays) {
  // A remat stage saves the device generator's state at each forward (so that dropout repeats in
  // the recompute), and on a CPU that is 5,056 bytes a micro-batch in the rank's memory. The
  // small CNN of models/ put its classifier alone on a rank (K=2 D=2 GPipe M=3, remat): 41.98
  // KiB measured against 29.33 KiB priced without the state (-30.1%).
  const ModelSpec model = SmallCnn();
  const Profile profile = Profiled(model);
  if (profile.rng_state_bytes == 0) GTEST_SKIP() << "the device's generator state is not in its memory";
  for (ScheduleKind schedule : {ScheduleKind::kGpipe, ScheduleKind::k1F1B}) {
    SCOPED_TRACE(ScheduleName(schedule));
    // The second rank: the global pooling and the classifier, a few hundred bytes a micro-batch.
    const Plan plan = CnnPlan(profile, schedule, 2, /*microbatches=*/4, /*cut=*/4, /*remat=*/true);
    Expected<RunRecord> record = TwoSteps(plan, model);
    ASSERT_TRUE(record.ok()) << record.status().message();
    const std::vector<double> errors = PeakErrors(plan, *record);
    // Measured here: the small rank -0.4% under GPipe (-32.5% without the state), -0.9% under
    // 1F1B (-16.9%: it holds one micro-batch at a time).
    for (double error : errors) EXPECT_LT(std::abs(error), 0.05) << error;
    Plan without = plan;
    without.profile.rng_state_bytes = 0;
    EXPECT_LT(PeakErrors(without, *record).back(), -0.12) << errors.back();
  }
}

// A tiny GPT of 4 blocks (2 heads, MLP ratio 4) of width `dim`, vocabulary `vocab` and sequences
// of `seq_len`, on random tokens.
ModelSpec TinyGptOf(int64_t dim, int64_t vocab, int64_t seq_len) {
  ModelSpec model = testing::TinyGpt(/*blocks=*/4);
  model.input.vocab = vocab;
  model.input.seq_len = seq_len;
  for (LayerSpec& layer : model.layers) {
    layer.dim = dim;
    layer.vocab = vocab;
    layer.max_seq = seq_len;
    layer.mlp_ratio = 4;
  }
  return model;
}

// The tiny GPT of models/tiny-gpt.json (width 64, vocabulary 96, sequences of 64).
ModelSpec TinyGptOfModels() { return TinyGptOf(64, 96, 64); }

// bf16 (executor/precision.h): the tiny GPT profiled under autocast and run in bf16 with
// Adam, each rank's peak against the model fed that profile: fp32 weights, gradients and moments
// and one bf16 copy of the weights a step (18 bytes a parameter, core/plan.h), the activations as
// autocast leaves them. GPipe and 1F1B, K=1 and K=2, remat off and on: every rank within 10%.
// models/tiny-gpt.json run over Gloo (1F1B, M=4): +4.4% at K=1, +2.6% and +3.5% at K=2 (2026-12-06); GPT-2 (transformers) is
// within 10% too (tests/executor/run_cli_test.py, gpt2_bf16).
TEST(PeakMemoryTest, ABf16RankPeaksWhereTheModelSays) {
  const ModelSpec model = TinyGptOfModels();
  const Profile profile = Profiled(model, "bf16");
  ASSERT_EQ(profile.dtype, "bf16");
  // Parameters counted at 2 bytes: the embedding's 96 x 64 token and 64 x 64 position tables.
  EXPECT_EQ(profile.layers[0].param_bytes, (96 + 64) * 64 * 2);
  for (ScheduleKind schedule : {ScheduleKind::kGpipe, ScheduleKind::k1F1B}) {
    for (int ranks : {1, 2}) {
      for (bool remat : {false, true}) {
        SCOPED_TRACE(std::string(ScheduleName(schedule)) + ", K=" + std::to_string(ranks) + (remat ? ", remat" : ""));
        Plan plan = testing::EvenPlan(profile.num_layers(), schedule, ranks, 1, 4, 1, kMicrobatch * 4, remat,
                                      Optimizer::kAdamMixed);
        plan.profile = profile;
        Expected<RunRecord> record = TwoSteps(plan, model);
        ASSERT_TRUE(record.ok()) << record.status().message();
        EXPECT_EQ(record->precision, "bf16");
        for (double error : PeakErrors(plan, *record)) EXPECT_LT(std::abs(error), 0.10) << error;
      }
    }
  }
}

// ZeRO-1 (executor/optimizer_shard.h): each replica holds Adam's moments of its range of the
// parameters only, 4 + 4 + 8 / D bytes a parameter (core/plan.h). A tiny GPT wide and short
// enough for its model state to outweigh its activations (dim 128, 8 tokens), K = 1 and 2, D = 2
// and 4: every rank within 10% of the model (-2.2% at K=1 D=2, -0.0% at D=4, +0.0% and -5.3% at
// K=2 D=2, 2026-12-06), and more than 10% under the model's unsharded count.
TEST(PeakMemoryTest, AShardedOptimizerRankPeaksWhereTheModelSays) {
  const ModelSpec model = TinyGptOf(/*dim=*/128, /*vocab=*/512, /*seq_len=*/8);
  const Profile profile = Profiled(model);
  for (int ranks : {1, 2}) {
    for (int replicas : {2, 4}) {
      if (ranks * replicas > 4) continue;
      SCOPED_TRACE("K=" + std::to_string(ranks) + " D=" + std::to_string(replicas));
      Plan plan = testing::EvenPlan(profile.num_layers(), ScheduleKind::k1F1B, ranks, 1, 2, replicas,
                                    kMicrobatch * 2 * replicas, false, Optimizer::kAdam);
      plan.profile = profile;
      plan.sharded_optimizer = true;
      Expected<RunRecord> record = TwoSteps(plan, model);
      ASSERT_TRUE(record.ok()) << record.status().message();
      for (double error : PeakErrors(plan, *record)) EXPECT_LT(std::abs(error), 0.10) << error;
      Plan unsharded = plan;
      unsharded.sharded_optimizer = false;
      for (double error : PeakErrors(unsharded, *record)) EXPECT_GT(error, 0.10) << error;
    }
  }
}

}  // namespace
}  // namespace gpipe::executor
