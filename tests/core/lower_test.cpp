#include "core/schedule/lower.h"

#include <gtest/gtest.h>

#include "core/schedule/generators.h"
#include "core/schedule/placement.h"
#include "core/schedule/validate.h"

namespace gpipe {
namespace {

TEST(AddCommunication, GpipeTwoRanks) {
  const Schedule lowered = AddCommunication(GenerateGpipe(2, 2));
  EXPECT_EQ(ScheduleToText(lowered),
            "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
            "rank 1: 1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1\n");
}

TEST(AddCommunication, SplitBackwardSendsAfterTheInputGradient) {
  const Schedule lowered = AddCommunication(GenerateZbH1(2, 2));
  EXPECT_EQ(ScheduleToText(lowered),
            "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0I0 0W0 0RECV_B1 0I1 0W1\n"
            "rank 1: 1RECV_F0 1F0 1I0 1SEND_B0 1RECV_F1 1F1 1I1 1SEND_B1 1W0 1W1\n");
}

TEST(AddCommunication, InterleavedWrapsFromLastRankToFirst) {
  const Schedule lowered = AddCommunication(GenerateInterleaved1F1B(2, 2, 2));
  // Stage 1 (rank 1) feeds stage 2 (rank 0, chunk 1): rank 0 receives before 2F0.
  const std::string text = ScheduleToText(lowered);
  EXPECT_NE(text.find("2RECV_F0 2F0"), std::string::npos) << text;
  EXPECT_NE(text.find("1F0 1SEND_F0"), std::string::npos) << text;
  EXPECT_TRUE(ValidateSchedule(lowered, Lowering::kWithCommunication).ok());
}

TEST(AddCommunication, StagesOnOneRankNeedNoMessages) {
  Schedule one = GenerateGpipe(1, 3);
  EXPECT_EQ(AddCommunication(one), one);
}

TEST(AddCommunication, EveryGeneratedShapeValidatesAndRuns) {
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int ranks : {1, 2, 4}) {
      for (int microbatches : {4, 8}) {
        if (!CheckMicrobatchCount(kind, ranks, microbatches).ok()) continue;
        Expected<Schedule> s = GenerateSchedule(kind, ranks, StageCount(kind, ranks, 2), microbatches);
        ASSERT_TRUE(s.ok());
        const Schedule lowered = AddCommunication(*s);
        EXPECT_EQ(ComputeOnly(lowered), *s);  // the inverse
        const Status valid = ValidateSchedule(lowered, Lowering::kWithCommunication);
        EXPECT_TRUE(valid.ok()) << valid.message();
        const Status ran = DryRun(lowered);
        EXPECT_TRUE(ran.ok()) << ran.message();
      }
    }
  }
}

}  // namespace
}  // namespace gpipe
