// Synchronous training does not depend on the cut: for every schedule, K in {1,2,3,4}, M in
// {1,2,4,8}, remat on and off, the parameters after three pipelined steps (ranks as threads over
// the in-process wire) equal those of one process training the whole batch, in fp32. The same
// holds over the wire with NCCL's rules (K 2-4, M 1-8), where the design before lanes deadlocks.
// GPIPE_TEST_DEVICE=cuda runs the pipelined side on GPU 0 (scripts/gpu-check.sh). In bf16 and fp16
// (executor/precision.h) the one process computes under the same autocast.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <tuple>

#include "core/schedule/validate.h"
#include "executor/data.h"
#include "executor/layers.h"
#include "executor/precision.h"
#include "executor/trainer.h"
#include "executor/worker.h"
#include "tests/executor/test_plans.h"

namespace gpipe::executor {
namespace {

using testing::EvenPlan;
using testing::TinyGpt;

constexpr int kSteps = 3;

// The device of the pipelined runs: GPIPE_TEST_DEVICE (cpu unless set to cuda).
std::string TestDevice() {
  const char* device = std::getenv("GPIPE_TEST_DEVICE");
  return device != nullptr && std::string(device) == "cuda" ? "cuda" : "cpu";
}
// On GPU, cuDNN and cuBLAS sum in other orders than the CPU reference.
double Tolerance(double cpu_atol) { return TestDevice() == "cuda" ? std::max(cpu_atol, 1e-4) : cpu_atol; }

// Parameters of every layer after `steps` single-process steps on the whole batch, with the
// model's learning-rate schedule and torch::nn::utils::clip_grad_norm_ (the C++ twin of
// torch.nn.utils.clip_grad_norm_) when it clips; `norms` gets each step's gradient norm. In bf16
// and fp16 the one process runs under the same autocast and, since a 16-bit product rounds
// differently over a micro-batch than over the whole batch, on the plan's D x M micro-batches one
// after the other (gradient accumulation); in fp16 with each loss scaled by 2^16, the scale a run
// starts with (no step here overflows, so it stays).
std::vector<std::vector<torch::Tensor>> Reference(const Plan& plan, const ModelSpec& model, int steps,
                                                  std::vector<double>* norms = nullptr) {
  auto layers = BuildLayers(model, 0, model.num_layers(), torch::kCPU);
  EXPECT_TRUE(layers.ok());
  const std::vector<torch::Tensor> params = ParametersOf(*layers);
  auto optimizer = MakeOptimizer(plan, model, params);
  DataSource data = DataSource::Open(model).value();
  const bool mixed = plan.precision() != "fp32";
  const int64_t pieces = mixed ? int64_t{plan.microbatches} * plan.replicas : 1;
  const double loss_scale = plan.precision() == "fp16" ? LossScaler::ForFp16().scale() : 1.0;
  for (int step = 0; step < steps; ++step) {
    optimizer->zero_grad(true);
    Batch batch = data.GlobalBatch(step, plan.global_batch);
    const int64_t b = plan.global_batch / pieces;
    for (int64_t i = 0; i < pieces; ++i) {
      torch::Tensor x = batch.input.narrow(0, i * b, b);
      {
        const AutocastScope autocast(ComputeType(plan.precision()), torch::kCPU);
        for (auto& layer : *layers) x = layer->Forward(x);
      }
      (LossOf(model, x, batch.target.narrow(0, i * b, b)) * (loss_scale / static_cast<double>(pieces))).backward();
    }
    ClearWeightCopies();
    if (loss_scale != 1.0) {
      for (const torch::Tensor& p : params) p.grad().div_(loss_scale);
    }
    const double max_norm = model.training.clip_grad_norm > 0 ? model.training.clip_grad_norm : 1e30;
    const double norm = torch::nn::utils::clip_grad_norm_(params, max_norm);
    if (norms != nullptr) norms->push_back(norm);
    SetLearningRate(*optimizer, LearningRateAt(model.training, step));
    optimizer->step();
  }
  std::vector<std::vector<torch::Tensor>> by_layer;
  for (auto& layer : *layers) {
    by_layer.emplace_back();
    for (const torch::Tensor& p : layer->Parameters()) by_layer.back().push_back(p.detach().clone());
  }
  return by_layer;
}

// Checks every rank's parameters against the reference layers it holds.
void ExpectSameParameters(const Plan& plan, const std::vector<RankOutcome>& outcomes,
                          const std::vector<std::vector<torch::Tensor>>& reference, double atol) {
  for (const RankOutcome& o : outcomes) {
    std::vector<torch::Tensor> expected;
    for (int s : o.record.stages) {
      for (int l = plan.stages[s].first_layer; l < plan.stages[s].end_layer; ++l) {
        for (const torch::Tensor& p : reference[l]) expected.push_back(p);
      }
    }
    ASSERT_EQ(expected.size(), o.parameters.size()) << "rank " << o.record.rank;
    for (size_t i = 0; i < expected.size(); ++i) {
      const double diff = (expected[i] - o.parameters[i]).abs().max().item<double>();
      EXPECT_LE(diff, atol) << "rank " << o.record.rank << " parameter " << i;
    }
  }
}

// Trains `plan` for kSteps over the in-process wire and checks every rank's parameters against
// one process on the whole batch.
void ExpectMatchesOneProcess(const Plan& plan, const ModelSpec& model, double atol, const std::string& wire = "exact") {
  RunSettings settings;
  settings.steps = kSteps;
  settings.wire = wire;
  settings.device = TestDevice();
  std::vector<RankOutcome> outcomes;
  Expected<RunRecord> record = TrainInProcess(plan, model, settings, &outcomes);
  ASSERT_TRUE(record.ok()) << record.status().message();
  ASSERT_EQ(record->steps.size(), static_cast<size_t>(kSteps));
  ExpectSameParameters(plan, outcomes, Reference(plan, model, kSteps), Tolerance(atol));
}

using Case = std::tuple<ScheduleKind, int, int, bool>;  // schedule, K, M, remat

class EquivalenceTest : public ::testing::TestWithParam<Case> {};

// The case's plan of a 6-block tiny GPT cut evenly (interleaved: two chunks per rank; V-shaped:
// two stages per rank), or why it cannot be built (dualpipe-v needs M >= 2K).
Expected<Plan> CasePlan(const Case& c, const ModelSpec& model, int64_t global_batch) {
  const auto [schedule, ranks, microbatches, remat] = c;
  Plan plan = EvenPlan(model.num_layers(), schedule, ranks, /*chunks=*/2, microbatches, /*replicas=*/1, global_batch, remat,
                       Optimizer::kSgd);
  const Expected<Schedule> shape = BuildSchedule(plan);
  if (!shape.ok()) return shape.status();
  return plan;
}

TEST_P(EquivalenceTest, ParametersMatchOneProcessOnTheWholeBatch) {
  const ModelSpec model = TinyGpt(/*blocks=*/6);
  const Expected<Plan> plan = CasePlan(GetParam(), model, /*global_batch=*/8);
  if (!plan.ok()) GTEST_SKIP() << plan.status().message();
  ExpectMatchesOneProcess(*plan, model, 2e-6);
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name = ScheduleName(std::get<0>(info.param));
  for (char& c : name) c = c == '-' ? '_' : c;
  return name + "_K" + std::to_string(std::get<1>(info.param)) + "_M" + std::to_string(std::get<2>(info.param)) +
         (std::get<3>(info.param) ? "_remat" : "");
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, EquivalenceTest,
                         ::testing::Combine(::testing::ValuesIn(AllScheduleKinds()),
                                            ::testing::Values(1, 2, 3, 4), ::testing::Values(1, 2, 4, 8),
                                            ::testing::Bool()),
                         CaseName);

// Remat by layer: each stage recomputes only its first n layers (n from 1 to its length - 1,
// varying by stage), the rest keep their graph. Every schedule, K 1-4, M 1-8: the parameters of
// one process on the whole batch.
class ByLayerRematTest : public ::testing::TestWithParam<std::tuple<ScheduleKind, int, int>> {};

std::string ByLayerCaseName(const ::testing::TestParamInfo<std::tuple<ScheduleKind, int, int>>& param) {
  const auto [schedule, ranks, microbatches] = param.param;
  return CaseName({{schedule, ranks, microbatches, false}, param.index}) + "_by_layer";
}

TEST_P(ByLayerRematTest, ParametersMatchOneProcessOnTheWholeBatch) {
  const auto [schedule, ranks, microbatches] = GetParam();
  // 12 layers: every stage of interleaved K=4 (8 stages) but four has two layers.
  const ModelSpec model = TinyGpt(/*blocks=*/10);
  Expected<Plan> plan = CasePlan({schedule, ranks, microbatches, false}, model, /*global_batch=*/8);
  if (!plan.ok()) GTEST_SKIP() << plan.status().message();
  int partial = 0;
  for (size_t s = 0; s < plan->stages.size(); ++s) {
    StagePlan& stage = plan->stages[s];
    if (stage.num_layers() < 2) continue;
    stage.remat = true;
    stage.remat_layers = 1 + static_cast<int>(s) % (stage.num_layers() - 1);
    ++partial;
  }
  ASSERT_GT(partial, 0);
  ASSERT_TRUE(ValidatePlan(*plan, "plan").ok());
  ExpectMatchesOneProcess(*plan, model, 2e-6);
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, ByLayerRematTest,
                         ::testing::Combine(::testing::ValuesIn(AllScheduleKinds()),
                                            ::testing::Values(1, 2, 3, 4), ::testing::Values(1, 2, 4, 8)),
                         ByLayerCaseName);

// Over the in-process wire with NCCL's rules (executor/nccl_emulation.h): one ordered queue per
// pair and direction as the executor's two NCCL groups give, tags ignored, sends done only when
// received. No plan hangs, and the parameters are those of one process.
class NcclWireTest : public ::testing::TestWithParam<Case> {};

TEST_P(NcclWireTest, ParametersMatchOneProcessUnderNcclRules) {
  const ModelSpec model = TinyGpt(/*blocks=*/6);
  // Micro-batches of two samples: every M from 1 to 8 divides the batch.
  const Expected<Plan> plan = CasePlan(GetParam(), model, /*global_batch=*/2 * std::get<2>(GetParam()));
  if (!plan.ok()) GTEST_SKIP() << plan.status().message();
  ExpectMatchesOneProcess(*plan, model, 2e-6, "nccl");
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, NcclWireTest,
                         ::testing::Combine(::testing::ValuesIn(AllScheduleKinds()),
                                            ::testing::Values(2, 3, 4), ::testing::Range(1, 9), ::testing::Bool()),
                         CaseName);

// The design before lanes (one NCCL group: a pair's sends and receives in one queue, receives
// posted ahead in the receiver's own order) stops with "would deadlock on NCCL": 1F1B in its
// steady state (step 1), GPipe once shapes are known and receives are posted ahead (step 2).
TEST(NcclWireTest, TheDesignBeforeLanesWouldDeadlockOnNccl) {
  const ModelSpec model = TinyGpt(/*blocks=*/2);
  for (const auto& [schedule, microbatches] : {std::pair{ScheduleKind::k1F1B, 4}, std::pair{ScheduleKind::kGpipe, 2}}) {
    const Plan plan = EvenPlan(model.num_layers(), schedule, 2, 1, microbatches, 1, 8, false, Optimizer::kSgd);
    RunSettings settings;
    settings.steps = 2;
    settings.wire = "nccl";
    settings.nccl_queues = NcclQueues::kSharedByPair;
    settings.posting = WirePosting::kAheadInOwnOrder;
    Expected<RunRecord> before = TrainInProcess(plan, model, settings);
    ASSERT_FALSE(before.ok()) << ScheduleName(schedule);
    EXPECT_NE(before.status().message().find("would deadlock on NCCL (one queue per pair of ranks)"), std::string::npos)
        << before.status().message();
    EXPECT_NE(before.status().message().find(schedule == ScheduleKind::kGpipe ? "step 1" : "step 0"), std::string::npos)
        << before.status().message();
    // The executor's design over the same wire with a queue per direction completes.
    settings.nccl_queues = NcclQueues::kPerDirection;
    settings.posting = WirePosting::kAheadInSenderOrder;
    Expected<RunRecord> now = TrainInProcess(plan, model, settings);
    EXPECT_TRUE(now.ok()) << now.status().message();
  }
}

// bf16 mixed precision: every schedule, K 1-4, remat on and off, M=4: the parameters after three
// pipelined steps against one process running the same micro-batches under the same autocast
// (Reference). Each micro-batch's arithmetic is the same in both, 16-bit products included; what
// differs is the order of the fp32 sums (gradients accumulated over micro-batches, a zero-bubble W
// pass, gradients summed over tied ranks), rounding at fp32's 2^-24: the largest difference over
// every case here was 6e-8 (2026-12-06), and the bound is 1e-6. Running in fp32 instead lands
// about 6e-5 off (MixedPrecisionTest.Bf16IsNotFp32 asserts more than ten times the bound), so a run
// that ignored the plan's precision fails.
constexpr double kBf16Tolerance = 1e-6;

Plan InPrecision(Plan plan, const char* precision) {
  plan.profile.dtype = precision;
  return plan;
}

class MixedPrecisionTest : public ::testing::TestWithParam<std::tuple<ScheduleKind, int, bool>> {};

TEST_P(MixedPrecisionTest, Bf16ParametersMatchOneProcessInBf16) {
  const auto [schedule, ranks, remat] = GetParam();
  const ModelSpec model = TinyGpt(/*blocks=*/6);
  const Expected<Plan> plan = CasePlan({schedule, ranks, /*M=*/4, remat}, model, /*global_batch=*/8);
  if (!plan.ok()) GTEST_SKIP() << plan.status().message();
  ExpectMatchesOneProcess(InPrecision(*plan, "bf16"), model, kBf16Tolerance);
}

std::string PrecisionCaseName(const ::testing::TestParamInfo<std::tuple<ScheduleKind, int, bool>>& param) {
  const auto [schedule, ranks, remat] = param.param;
  return CaseName({{schedule, ranks, 4, remat}, param.index});
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, MixedPrecisionTest,
                         ::testing::Combine(::testing::ValuesIn(AllScheduleKinds()), ::testing::Values(1, 2, 3, 4),
                                            ::testing::Bool()),
                         PrecisionCaseName);

// The tolerance above tells bf16 from fp32: the one process's bf16 and fp32 runs differ by more
// than ten times it.
TEST(MixedPrecisionTest, Bf16IsNotFp32) {
  const ModelSpec model = TinyGpt(/*blocks=*/6);
  const Plan plan = InPrecision(EvenPlan(model.num_layers(), ScheduleKind::k1F1B, 2, 1, 4, 1, 8, false, Optimizer::kSgd), "bf16");
  Plan in_fp32 = InPrecision(plan, "fp32");
  const auto bf16 = Reference(plan, model, kSteps);
  const auto fp32 = Reference(in_fp32, model, kSteps);
  double most = 0;
  for (size_t l = 0; l < fp32.size(); ++l) {
    for (size_t i = 0; i < fp32[l].size(); ++i) most = std::max(most, (fp32[l][i] - bf16[l][i]).abs().max().item<double>());
  }
  EXPECT_GT(most, 10 * kBf16Tolerance);
}

// fp16 with its loss scale: the parameters of one process that scales its loss alike, and every
// step's record says the scale it used.
TEST(MixedPrecisionTest, Fp16MatchesOneProcessWithItsLossScale) {
  const ModelSpec model = TinyGpt(/*blocks=*/2);
  for (ScheduleKind schedule : {ScheduleKind::k1F1B, ScheduleKind::kZbH1}) {
    SCOPED_TRACE(ScheduleName(schedule));
    const Plan plan = InPrecision(EvenPlan(model.num_layers(), schedule, 2, 1, 4, 1, 8, false, Optimizer::kSgd), "fp16");
    ExpectMatchesOneProcess(plan, model, kBf16Tolerance);
  }
}

// An inf in one rank's gradients (an fp16 overflow, injected after step 1's backward, before the
// sums between replicas) skips step 1 on every rank: after two steps each rank holds what it held
// after one, the record marks the step skipped, and the scale is halved from the next step on.
// One pipeline (the inf on either rank) and two replicas (on the second replica's last rank).
TEST(MixedPrecisionTest, AnInfOnOneRankSkipsTheStepOnEveryRank) {
  const ModelSpec model = TinyGpt(/*blocks=*/2);
  struct Inf {
    int replicas;
    int rank;
  };
  for (const Inf& c : {Inf{1, 0}, Inf{1, 1}, Inf{2, 3}}) {
    SCOPED_TRACE("D=" + std::to_string(c.replicas) + ", inf on rank " + std::to_string(c.rank));
    const Plan plan = InPrecision(
        EvenPlan(model.num_layers(), ScheduleKind::k1F1B, 2, 1, 2, c.replicas, 8 * c.replicas, false, Optimizer::kSgd), "fp16");
    RunSettings settings;
    settings.steps = 1;
    std::vector<RankOutcome> one_step;
    ASSERT_TRUE(TrainInProcess(plan, model, settings, &one_step).ok());
    settings.steps = 3;
    settings.inject_inf = std::pair{1, c.rank};
    Expected<RunRecord> record = TrainInProcess(plan, model, settings);
    ASSERT_TRUE(record.ok()) << record.status().message();
    ASSERT_EQ(record->steps.size(), 3u);
    EXPECT_FALSE(record->steps[0].skipped);
    EXPECT_TRUE(record->steps[1].skipped);
    EXPECT_FALSE(record->steps[2].skipped);
    EXPECT_EQ(record->steps[0].loss_scale, 65536.0);
    EXPECT_EQ(record->steps[1].loss_scale, 65536.0);
    EXPECT_EQ(record->steps[2].loss_scale, 32768.0);
    EXPECT_TRUE(std::isfinite(record->steps[2].loss));
    // Two steps with the second skipped: what one step left, on every rank.
    settings.steps = 2;
    std::vector<RankOutcome> outcomes;
    ASSERT_TRUE(TrainInProcess(plan, model, settings, &outcomes).ok());
    ASSERT_EQ(outcomes.size(), one_step.size());
    for (const RankOutcome& o : outcomes) {
      const auto same_rank = [&o](const RankOutcome& b) { return b.record.rank == o.record.rank; };
      const RankOutcome& before = *std::find_if(one_step.begin(), one_step.end(), same_rank);
      ASSERT_EQ(o.parameters.size(), before.parameters.size());
      for (size_t i = 0; i < o.parameters.size(); ++i) {
        EXPECT_TRUE(torch::equal(o.parameters[i], before.parameters[i])) << "rank " << o.record.rank << " parameter " << i;
      }
    }
  }
}

// Replicas: two pipelines of two stages each, summing gradients, match one process.
TEST(EquivalenceTest, ReplicasMatchOneProcess) {
  const ModelSpec model = TinyGpt(/*blocks=*/2);
  for (ScheduleKind schedule : {ScheduleKind::k1F1B, ScheduleKind::kZbH1}) {
    for (Placement placement : {Placement::kPipelineMajor, Placement::kReplicaMajor}) {
      Plan plan = EvenPlan(model.num_layers(), schedule, 2, 1, 4, /*replicas=*/2, /*global_batch=*/16, false,
                           Optimizer::kMomentum);
      plan.placement = placement;
      ExpectMatchesOneProcess(plan, model, 2e-6);
    }
  }
}

// Adam divides by the gradient's running magnitude, so where a gradient is zero analytically
// (the attention key bias: softmax ignores a per-row constant) rounding noise of 1e-9 becomes a
// step of up to the learning rate in either run. The bound is a tenth of the learning rate.
TEST(EquivalenceTest, AdamMatchesOneProcessWithinATenthOfAStep) {
  const double lr = 1e-3;
  const ModelSpec model = TinyGpt(/*blocks=*/2, lr);
  const Plan plan = EvenPlan(model.num_layers(), ScheduleKind::k1F1B, 2, 1, 4, 1, 8, false, Optimizer::kAdam);
  ExpectMatchesOneProcess(plan, model, 0.1 * lr);
}

// The optimizer people train with: a learning-rate schedule (warm-up, then cosine or linear
// decay), weight decay on matrices only, and clipping by the global gradient norm over every
// stage and replica. Every schedule, K 1-4 (and two replicas): the parameters of one process with
// torch's own clip_grad_norm_, and each step's recorded norm equal to the one it computed. The
// clip is below every step's norm, so every step clips.
ModelSpec RecipeModel(Optimizer optimizer) {
  ModelSpec model = TinyGpt(/*blocks=*/6, /*learning_rate=*/optimizer == Optimizer::kAdam ? 1e-2 : 0.1);
  TrainingSpec& t = model.training;
  t.betas = {0.9, 0.95};
  t.weight_decay = 0.1;
  t.momentum = 0.8;
  t.clip_grad_norm = 0.05;
  t.schedule = {1, optimizer == Optimizer::kAdam ? LrDecay::kCosine : LrDecay::kLinear, kSteps, t.learning_rate / 10};
  return model;
}

using RecipeCase = std::tuple<Optimizer, ScheduleKind, int, int>;  // optimizer, schedule, K, D

class TrainingRecipeTest : public ::testing::TestWithParam<RecipeCase> {};

TEST_P(TrainingRecipeTest, ClippedScheduledUpdatesMatchOneProcess) {
  const auto [optimizer, schedule, ranks, replicas] = GetParam();
  const ModelSpec model = RecipeModel(optimizer);
  const Plan plan = EvenPlan(model.num_layers(), schedule, ranks, /*chunks=*/2, /*microbatches=*/4, replicas,
                             /*global_batch=*/8 * replicas, /*remat=*/false, optimizer);
  if (!BuildSchedule(plan).ok()) GTEST_SKIP() << BuildSchedule(plan).status().message();
  RunSettings settings;
  settings.steps = kSteps;
  settings.device = TestDevice();
  std::vector<RankOutcome> outcomes;
  Expected<RunRecord> record = TrainInProcess(plan, model, settings, &outcomes);
  ASSERT_TRUE(record.ok()) << record.status().message();
  std::vector<double> norms;
  const auto reference = Reference(plan, model, kSteps, &norms);
  ASSERT_EQ(record->steps.size(), norms.size());
  for (size_t i = 0; i < norms.size(); ++i) {
    const StepRecord& step = record->steps[i];
    ASSERT_TRUE(step.grad_norm && step.learning_rate);
    EXPECT_NEAR(*step.grad_norm, norms[i], 1e-5 * norms[i]) << "step " << i;
    EXPECT_GT(*step.grad_norm, model.training.clip_grad_norm) << "step " << i << " did not clip";
    EXPECT_DOUBLE_EQ(*step.learning_rate, LearningRateAt(model.training, static_cast<int64_t>(i)));
  }
  // AdamW: a tenth of a step, as AdamMatchesOneProcessWithinATenthOfAStep explains.
  const double atol = optimizer == Optimizer::kAdam ? 0.1 * model.training.learning_rate : 2e-6;
  ExpectSameParameters(plan, outcomes, reference, Tolerance(atol));
}

std::string RecipeCaseName(const ::testing::TestParamInfo<RecipeCase>& info) {
  const auto [optimizer, schedule, ranks, replicas] = info.param;
  std::string name = std::string(OptimizerName(optimizer)) + "_" + ScheduleName(schedule);
  for (char& c : name) c = c == '-' ? '_' : c;
  return name + "_K" + std::to_string(ranks) + "_D" + std::to_string(replicas);
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, TrainingRecipeTest,
                         ::testing::Combine(::testing::Values(Optimizer::kAdam, Optimizer::kMomentum),
                                            ::testing::ValuesIn(AllScheduleKinds()), ::testing::Values(1, 2, 4),
                                            ::testing::Values(1)),
                         RecipeCaseName);
INSTANTIATE_TEST_SUITE_P(Replicas, TrainingRecipeTest,
                         ::testing::Combine(::testing::Values(Optimizer::kAdam, Optimizer::kMomentum),
                                            ::testing::Values(ScheduleKind::kGpipe, ScheduleKind::kZbH1),
                                            ::testing::Values(1, 2), ::testing::Values(2)),
                         RecipeCaseName);

// ZeRO-1 (executor/optimizer_shard.h): each replica updates its range of the rank's parameters,
// with that range's optimizer state, and the ranges are gathered back. With clipping by the global
// norm (summed from the ranges), a learning-rate schedule and weight decay on matrices only, the
// parameters after three steps equal the unsharded run's (SGD with momentum within 1e-6, AdamW
// within a hundredth of a step), and each step's norm is the same; D = 2 and 4, K = 1 and 2.
TEST(ShardedOptimizerTest, ParametersMatchTheUnshardedRun) {
  struct Shape {
    int ranks, replicas;
  };
  for (Optimizer optimizer : {Optimizer::kMomentum, Optimizer::kAdam}) {
    for (Shape shape : {Shape{1, 2}, Shape{2, 2}, Shape{1, 4}}) {
      for (ScheduleKind schedule : {ScheduleKind::k1F1B, ScheduleKind::kZbH1}) {
        SCOPED_TRACE(std::string(OptimizerName(optimizer)) + " " + ScheduleName(schedule) + " K=" +
                     std::to_string(shape.ranks) + " D=" + std::to_string(shape.replicas));
        const ModelSpec model = RecipeModel(optimizer);
        Plan plan = EvenPlan(model.num_layers(), schedule, shape.ranks, 1, 4, shape.replicas, 8 * shape.replicas, false,
                             optimizer);
        RunSettings settings;
        settings.steps = kSteps;
        settings.device = TestDevice();
        std::vector<RankOutcome> plain, sharded;
        Expected<RunRecord> unsharded_record = TrainInProcess(plan, model, settings, &plain);
        plan.sharded_optimizer = true;
        Expected<RunRecord> sharded_record = TrainInProcess(plan, model, settings, &sharded);
        ASSERT_TRUE(unsharded_record.ok() && sharded_record.ok()) << sharded_record.status().message();
        for (int step = 0; step < kSteps; ++step) {
          const double a = *unsharded_record->steps[step].grad_norm, b = *sharded_record->steps[step].grad_norm;
          // (fp32 sums in another grouping: the norms and losses agree to float rounding)
          EXPECT_NEAR(a, b, 1e-6 * a) << "step " << step;
          EXPECT_NEAR(unsharded_record->steps[step].loss, sharded_record->steps[step].loss, 1e-6) << "step " << step;
        }
        // AdamW turns a rounding difference in a near-zero gradient into a visible step (its update is
        // about lr x sign): a hundredth of a step there; a misplaced range would move whole steps.
        const double atol = optimizer == Optimizer::kAdam ? 0.01 * model.training.learning_rate : 1e-6;
        ASSERT_EQ(plain.size(), sharded.size());
        for (size_t r = 0; r < plain.size(); ++r) {
          ASSERT_EQ(plain[r].parameters.size(), sharded[r].parameters.size());
          for (size_t i = 0; i < plain[r].parameters.size(); ++i) {
            const double diff = (plain[r].parameters[i] - sharded[r].parameters[i]).abs().max().item<double>();
            EXPECT_LE(diff, Tolerance(atol)) << "rank " << r << " parameter " << i;
          }
        }
      }
    }
  }
}

// Weight decay skips biases and norms unless decay_1d: with a zero gradient (learning rate on,
// no data effect: a step of SGD on a zero loss), a matrix shrinks by lr x decay and a vector
// keeps its value; with decay_1d both shrink.
TEST(TrainingRecipeTest, WeightDecaySkipsOneDimensionalParametersByDefault) {
  ModelSpec model = TinyGpt(/*blocks=*/1, /*learning_rate=*/0.5);
  model.training.weight_decay = 0.2;
  const Plan plan = EvenPlan(model.num_layers(), ScheduleKind::kGpipe, 1, 1, 1, 1, 2, false, Optimizer::kSgd);
  for (bool decay_1d : {false, true}) {
    model.training.decay_1d = decay_1d;
    auto layers = BuildLayers(model, 0, model.num_layers(), torch::kCPU).value();
    const std::vector<torch::Tensor> params = ParametersOf(layers);
    auto optimizer = MakeOptimizer(plan, model, params);
    std::vector<torch::Tensor> before;
    for (const torch::Tensor& p : params) {
      before.push_back(p.detach().clone());
      p.mutable_grad() = torch::zeros_like(p);
    }
    optimizer->step();
    int vectors = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const bool decayed = params[i].dim() >= 2 || decay_1d;
      vectors += params[i].dim() < 2 ? 1 : 0;
      EXPECT_TRUE(torch::allclose(params[i].detach(), before[i] * (decayed ? 1 - 0.5 * 0.2 : 1.0))) << i;
    }
    EXPECT_GT(vectors, 0);
  }
}

// Images through convolutions (no batch norm: its statistics are per micro-batch, the known
// exception), cut into three stages.
TEST(EquivalenceTest, ConvolutionsOnImagesMatchOneProcess) {
  ModelSpec model = testing::ImageModel(/*size=*/8, /*classes=*/4, /*learning_rate=*/0.1);
  const auto layer = testing::ImageLayer;
  model.layers = {layer(LayerType::kConv2d, 3, 8), layer(LayerType::kActivation, 0, 1),
                  layer(LayerType::kMaxPool2d, 0, 2), layer(LayerType::kConv2d, 8, 8),
                  layer(LayerType::kGlobalAvgPool, 0, 3), layer(LayerType::kLinear, 8, 4)};
  const Plan plan = EvenPlan(model.num_layers(), ScheduleKind::k1F1B, 3, 1, 4, 1, 8, true, Optimizer::kSgd);
  ExpectMatchesOneProcess(plan, model, 2e-6);
  // Remat by layer, the kept layers starting at the activation (which may work in place on the
  // recomputed convolution's output) and at the second convolution; zb-h1 splits both parts.
  for (ScheduleKind schedule : {ScheduleKind::k1F1B, ScheduleKind::kZbH1}) {
    Plan by_layer = EvenPlan(model.num_layers(), schedule, 2, 1, 4, 1, 8, false, Optimizer::kSgd);
    by_layer.stages[0].remat = by_layer.stages[1].remat = true;
    by_layer.stages[0].remat_layers = 1;
    by_layer.stages[1].remat_layers = 2;
    ExpectMatchesOneProcess(by_layer, model, 2e-6);
  }
}

// The loss a pipelined run reports is the whole batch's mean loss.
TEST(EquivalenceTest, ReportedLossIsTheBatchMean) {
  const ModelSpec model = TinyGpt(2);
  const Plan plan = EvenPlan(model.num_layers(), ScheduleKind::kGpipe, 2, 1, 4, 1, 8, false, Optimizer::kSgd);
  RunSettings settings;
  settings.steps = 1;
  Expected<RunRecord> record = TrainInProcess(plan, model, settings);
  ASSERT_TRUE(record.ok()) << record.status().message();
  auto layers = BuildLayers(model, 0, model.num_layers(), torch::kCPU).value();
  Batch batch = DataSource::Open(model).value().GlobalBatch(0, 8);
  torch::Tensor x = batch.input;
  for (auto& layer : layers) x = layer->Forward(x);
  EXPECT_NEAR(record->steps[0].loss, LossOf(model, x, batch.target).item<double>(), 1e-5);
}

}  // namespace
}  // namespace gpipe::executor
