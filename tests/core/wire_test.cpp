// The wire under NCCL's rules: every schedule's program, as the executor posts it, completes with
// one queue per pair and direction; the design before lanes (one queue per pair, receives posted
// ahead in the receiver's own order) deadlocks in 1F1B's steady state and in GPipe once shapes are
// known; a receiver that posts in its own order where the sender's differs gets the wrong message.
#include "core/schedule/wire.h"

#include <gtest/gtest.h>

#include <set>

#include "core/schedule/generators.h"
#include "core/schedule/lower.h"
#include "core/schedule/placement.h"
#include "core/schedule/validate.h"

namespace gpipe {
namespace {

Schedule Lowered(ScheduleKind kind, int ranks, int stages, int microbatches) {
  Expected<Schedule> s = GenerateSchedule(kind, ranks, stages, microbatches);
  EXPECT_TRUE(s.ok()) << s.status().message();
  Schedule lowered = AddCommunication(*s);
  EXPECT_TRUE(ValidateSchedule(lowered, Lowering::kWithCommunication).ok());
  return lowered;
}

TEST(Wire, EveryScheduleCompletesUnderNcclRulesAsTheExecutorPostsIt) {
  int checked = 0;
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int ranks = 2; ranks <= 4; ++ranks) {
      for (int m = 1; m <= 8; ++m) {
        Expected<Schedule> compute = GenerateSchedule(kind, ranks, StageCount(kind, ranks, 2), m);
        if (!compute.ok()) continue;  // e.g. dualpipe-v needs M >= 2K
        ++checked;
        const Schedule s = AddCommunication(*compute);
        const Status status = CheckWireOnNccl(s);
        EXPECT_TRUE(status.ok()) << ScheduleName(kind) << " K=" << ranks << " M=" << m << ": " << status.message();
      }
    }
  }
  // gpipe, 1f1b, zb-h1 and zb-v take every M (4 x 24); the interleaved kinds all but K=2 M=5,7
  // and K=3 M=7 (PyTorch's rounds: 2 x 21); dualpipe-v M >= 2K (5 + 3 + 1).
  EXPECT_EQ(checked, 4 * 24 + 2 * 21 + 9);
}

TEST(Wire, TheDesignBeforeLanesDeadlocksOn1F1BSteadyState) {
  // 1F1B, K=2, M=3: rank 0 posts the receive of gradient 0 before it sends activation 1... in one
  // queue shared by both directions while rank 1 does the opposite.
  const Schedule s = Lowered(ScheduleKind::k1F1B, 2, 2, 3);
  const WireProgram before = BuildWireProgram(s, /*first_step=*/false, WirePosting::kAheadInOwnOrder);
  const Status status = NcclDryRun(s, before, NcclQueues::kSharedByPair);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("would deadlock on NCCL"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("its queue with rank 1 starts with"), std::string::npos) << status.message();
  // The same posting on separate lanes completes: the cycle was the shared queue.
  EXPECT_TRUE(NcclDryRun(s, before, NcclQueues::kPerDirection).ok());
}

TEST(Wire, TheDesignBeforeLanesDeadlocksOnGpipeOnceShapesAreKnown) {
  const Schedule s = Lowered(ScheduleKind::kGpipe, 2, 2, 2);
  // Step 1 waits for each header at its RECV, so nothing is posted ahead and it completes.
  EXPECT_TRUE(NcclDryRun(s, BuildWireProgram(s, true, WirePosting::kAheadInOwnOrder), NcclQueues::kSharedByPair).ok());
  const Status later =
      NcclDryRun(s, BuildWireProgram(s, false, WirePosting::kAheadInOwnOrder), NcclQueues::kSharedByPair);
  ASSERT_FALSE(later.ok());
  EXPECT_NE(later.message().find("would deadlock on NCCL"), std::string::npos) << later.message();
}

TEST(Wire, OneSharedQueueDeadlocksEvenInSenderOrderSoTheExecutorUsesLanes) {
  const Schedule s = Lowered(ScheduleKind::k1F1B, 2, 2, 4);
  const Status shared = NcclDryRun(s, BuildWireProgram(s, false), NcclQueues::kSharedByPair);
  EXPECT_FALSE(shared.ok());
  EXPECT_TRUE(NcclDryRun(s, BuildWireProgram(s, false), NcclQueues::kPerDirection).ok());
}

TEST(Wire, ReceivesPostedOutOfTheSendersOrderGetTheWrongMessage) {
  // Rank 1 runs micro-batch 1 before micro-batch 0; rank 0 sends 0 first.
  Expected<Schedule> parsed = ScheduleFromText(
      "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B1 0B1 0RECV_B0 0B0\n"
      "rank 1: 1RECV_F1 1F1 1B1 1SEND_B1 1RECV_F0 1F0 1B0 1SEND_B0\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  ASSERT_TRUE(ValidateSchedule(*parsed, Lowering::kWithCommunication).ok());
  const Status own =
      NcclDryRun(*parsed, BuildWireProgram(*parsed, false, WirePosting::kAheadInOwnOrder), NcclQueues::kPerDirection);
  ASSERT_FALSE(own.ok());
  EXPECT_NE(own.message().find("NCCL would deliver the activation of stage 0, micro-batch 0"), std::string::npos)
      << own.message();
  // Posting in the sender's order receives micro-batch 0 into its own buffer first.
  EXPECT_TRUE(CheckWireOnNccl(*parsed).ok());
}

TEST(Wire, HeadersTravelOnceInTheFirstStepOnly) {
  const Schedule s = Lowered(ScheduleKind::kInterleaved1F1B, 2, 4, 4);
  for (const bool first : {true, false}) {
    const WireProgram program = BuildWireProgram(s, first);
    std::multiset<std::pair<int, int>> sent, received;  // (kind, stage)
    for (const auto& rank : program.ranks) {
      for (const auto& steps : rank) {
        for (const WireStep& step : steps) {
          const std::pair<int, int> key{static_cast<int>(step.message.kind), step.message.from_stage};
          if (step.op == WireOp::kSendHeader) sent.insert(key);
          if (step.op == WireOp::kRecvHeader) received.insert(key);
        }
      }
    }
    // Activations of stages 0-2 and gradients of stages 1-3 cross ranks.
    EXPECT_EQ(sent.size(), first ? 6u : 0u);
    EXPECT_EQ(sent, received);
    for (const auto& key : sent) EXPECT_EQ(sent.count(key), 1u);
  }
}

TEST(Wire, ReceivesArePostedOneComputeAhead) {
  const Schedule s = Lowered(ScheduleKind::kGpipe, 2, 2, 2);
  const WireProgram program = BuildWireProgram(s, false);
  // rank 1: RECV_F0 F0 RECV_F1 F1 ...: F0 posts activation 1's receive before computing.
  const auto& rank1 = program.ranks[1];
  ASSERT_EQ(s.ranks[1][1], (Action{Op::kForward, 1, 0}));
  ASSERT_EQ(rank1[1].size(), 2u);
  EXPECT_EQ(rank1[1][0].op, WireOp::kPostRecv);
  EXPECT_EQ(rank1[1][0].message, (Message{MessageKind::kActivation, 0, 1, false}));
  EXPECT_EQ(rank1[1][1].op, WireOp::kCompute);
  // RECV_F1 then only waits.
  ASSERT_EQ(rank1[2].size(), 1u);
  EXPECT_EQ(rank1[2][0].op, WireOp::kWaitRecv);
}

TEST(Wire, TagsNameKindStageAndHeaderWhateverTheMicroBatch) {
  std::set<int> tags;
  for (int stage = 0; stage < 300; ++stage) {
    for (MessageKind kind : {MessageKind::kActivation, MessageKind::kGradient}) {
      for (bool header : {false, true}) {
        const int tag = MessageTag({kind, stage, 0, header});
        EXPECT_TRUE(tags.insert(tag).second);
        EXPECT_EQ(tag, MessageTag({kind, stage, 100000, header}));
        EXPECT_GE(tag, 0);
      }
    }
  }
  EXPECT_EQ(TagToText(MessageTag({MessageKind::kGradient, 7, 3, false})), "gradients of stage 7");
}

}  // namespace
}  // namespace gpipe
