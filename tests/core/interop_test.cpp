// Plans in other tools' terms: PyTorch's schedule CSV (both ways) and Megatron-Core's layout.
#include <gtest/gtest.h>

#include "core/megatron_layout.h"
#include "core/schedule/generators.h"
#include "core/schedule/lower.h"
#include "core/schedule/placement.h"
#include "core/schedule/pytorch_csv.h"
#include "core/schedule/validate.h"

namespace gpipe {
namespace {

// A plan of `layers` layers ("embedding", "block..", "head") cut evenly for `kind`.
Plan GptPlan(ScheduleKind kind, int ranks, int chunks, int microbatches, int layers = 12) {
  Plan plan;
  for (int l = 0; l < layers; ++l) {
    LayerProfile layer;
    layer.name = l == 0 ? "embedding" : l == layers - 1 ? "head" : "block" + std::to_string(l);
    layer.forward_ms = 1;
    layer.backward_ms = 2;
    layer.backward_weight_ms = 1;
    plan.profile.layers.push_back(layer);
  }
  plan.cluster.devices = ranks;
  plan.cluster.device_memory_bytes = int64_t{1} << 33;
  plan.cluster.link = {1e9, 0.01};
  plan.schedule = kind;
  plan.microbatches = microbatches;
  plan.global_batch = microbatches;
  const int stages = StageCount(kind, ranks, chunks);
  const std::vector<int> placed = PlaceStages(kind, ranks, stages);
  for (int s = 0; s < stages; ++s) plan.stages.push_back(StagePlan::Of(layers * s / stages, layers * (s + 1) / stages, placed[s], 0));
  return plan;
}

TEST(PytorchCsv, EveryKindRoundTripsComputeOnlyAndWithCommunication) {
  for (ScheduleKind kind : AllScheduleKinds()) {
    const Plan plan = GptPlan(kind, 3, 2, 6);
    Expected<Schedule> compute = GenerateSchedule(kind, 3, plan.num_stages(), 6);
    ASSERT_TRUE(compute.ok()) << compute.status().message();
    // Compute-only, lowered, and lowered with the receives in the senders' order (what `export
    // --with-communication` writes): each reads back as written and builds (lowered, the first).
    const Schedule lowered = AddCommunication(*compute);
    for (const Schedule& schedule : {*compute, lowered, PostReceivesInSendOrder(lowered)}) {
      const std::string csv = ScheduleToPytorchCsv(schedule);
      Expected<PytorchCsvSchedule> back = ScheduleFromPytorchCsv(csv, plan.num_stages(), 6, "s.csv");
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_EQ(back->schedule, schedule) << ScheduleName(kind);
      EXPECT_EQ(back->with_communication, schedule.num_actions() != compute->num_actions());
      Expected<Schedule> built = BuildSchedule(plan, back->schedule);
      ASSERT_TRUE(built.ok()) << built.status().message();
      EXPECT_EQ(*built, schedule.num_actions() == compute->num_actions() ? *BuildSchedule(plan) : schedule)
          << ScheduleName(kind);
    }
  }
}

TEST(PytorchCsv, ReadsWhatPytorchWritesBesidesOurActions) {
  // Idle slots, an OVERLAP_F_B pair, FSDP's and DDP's markers, Windows line ends, quotes.
  const std::string csv =
      "0F0,,0UNSHARD,(0F1;0B0)OVERLAP_F_B,0B1,0REDUCE_GRAD\r\n"
      "\"1F0\", 1B0 ,1F1,1B1,1RESHARD\r\n";
  Expected<PytorchCsvSchedule> read = ScheduleFromPytorchCsv(csv, 2, 2, "s.csv");
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->left_out, 3);
  EXPECT_FALSE(read->with_communication);
  EXPECT_EQ(ScheduleToText(read->schedule), "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1\n");
  EXPECT_EQ(read->schedule.stage_rank, (std::vector<int>{0, 1}));
}

TEST(PytorchCsv, BadCellsAreNamedByRowAndColumn) {
  const auto error = [](const std::string& csv, int stages = 2, int microbatches = 2) {
    Expected<PytorchCsvSchedule> read = ScheduleFromPytorchCsv(csv, stages, microbatches, "s.csv");
    return read.ok() ? std::string("ok") : read.status().message();
  };
  EXPECT_NE(error("0F0,0X1\n").find("s.csv: row 1 (rank 0), column 2 \"0X1\""), std::string::npos) << error("0F0,0X1\n");
  EXPECT_NE(error("0F0\n1F0,1F2\n").find("row 2 (rank 1), column 2 \"1F2\": the plan has stages 0..1 and micro-batches 0..1"),
            std::string::npos)
      << error("0F0\n1F0,1F2\n");
  EXPECT_NE(error("(0F0;0B0)\n").find("a group of actions is written \"(0F3;1B2)OVERLAP_F_B\""), std::string::npos);
  EXPECT_NE(error("0F0,1F0\n1B0\n").find("stage 1 has actions on rank 0 and on rank 1"), std::string::npos)
      << error("0F0,1F0\n1B0\n");
  EXPECT_NE(error("\n\n").find("no rows"), std::string::npos);
}

TEST(PytorchCsv, AnOrderOnOtherRanksOrWithAnotherMIsRefusedAgainstThePlan) {
  const Plan plan = GptPlan(ScheduleKind::k1F1B, 2, 1, 2);
  const auto error = [&](const std::string& csv, int microbatches = 2) {
    Expected<PytorchCsvSchedule> read = ScheduleFromPytorchCsv(csv, 2, microbatches, "s.csv");
    if (!read.ok()) return read.status().message();
    Expected<Schedule> built = BuildSchedule(plan, read->schedule);
    return built.ok() ? std::string("ok") : built.status().message();
  };
  EXPECT_EQ(error("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"), "ok");
  EXPECT_EQ(error("1F0,1B0,1F1,1B1\n0F0,0F1,0B0,0B1\n"), "schedule: stage 0 runs on rank 1, the plan puts it on rank 0");
  EXPECT_NE(error("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n").find("deadlock"), std::string::npos)
      << error("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n");
  EXPECT_NE(error("0F0,0F1,0B0,0B1\n1F0,1B0,1F1\n").find("1B1 is missing"), std::string::npos);
}

TEST(MegatronLayout, StagesInOrderWithEmbeddingAndLoss) {
  EXPECT_EQ(*MegatronLayout(GptPlan(ScheduleKind::k1F1B, 2, 1, 4)), "Et*5|t*5L");
  EXPECT_EQ(*MegatronLayout(GptPlan(ScheduleKind::kInterleaved1F1B, 2, 2, 4)), "Ett|t*3|t*3|ttL");
  EXPECT_EQ(*MegatronFlags(GptPlan(ScheduleKind::kGpipe, 3, 1, 4, 7)),
            "--pipeline-model-parallel-size 3 --pipeline-model-parallel-layout \"Et|tt|ttL\"");
  // Tensor parallelism and the sharded optimizer, as a GPT-3 175B plan on 1,024 GPUs writes them.
  Plan sharded = GptPlan(ScheduleKind::k1F1B, 2, 1, 4);
  sharded.tensor_parallel = 8;
  sharded.replicas = 2;
  sharded.sharded_optimizer = true;
  EXPECT_EQ(*MegatronFlags(sharded),
            "--tensor-model-parallel-size 8 --sequence-parallel --pipeline-model-parallel-size 2 "
            "--pipeline-model-parallel-layout \"Et*5|t*5L\" --use-distributed-optimizer");
}

TEST(MegatronLayout, RefusesWhatMegatronCannotSay) {
  Expected<std::string> v = MegatronLayout(GptPlan(ScheduleKind::kZbV, 2, 2, 4));
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("zb-v places its stages in a V"), std::string::npos);
  Plan cnn = GptPlan(ScheduleKind::k1F1B, 2, 1, 4);
  cnn.profile.layers[0].name = "conv1";
  Expected<std::string> no_embedding = MegatronLayout(cnn);
  ASSERT_FALSE(no_embedding.ok());
  EXPECT_NE(no_embedding.status().message().find("layers[0] is \"conv1\""), std::string::npos);
  cnn.profile.layers[0].name = "embedding";
  cnn.profile.layers[11].name = "fc";
  Expected<std::string> no_head = MegatronLayout(cnn);
  ASSERT_FALSE(no_head.ok());
  EXPECT_NE(no_head.status().message().find("layers[11] is \"fc\""), std::string::npos);
}

}  // namespace
}  // namespace gpipe
