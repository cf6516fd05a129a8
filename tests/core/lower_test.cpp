#include "core/schedule/lower.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

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

// What `from` sends `to`, in `from`'s order, and what `to` receives from `from`, in `to`'s
// order, each as "stage op micro-batch" of the receive.
std::pair<std::vector<Action>, std::vector<Action>> Messages(const Schedule& s, int from, int to) {
  std::vector<Action> sent, received;
  for (const Action& a : s.ranks[from]) {
    if (a.op == Op::kSendActivation && s.stage_rank[a.stage + 1] == to) sent.push_back({Op::kRecvActivation, a.stage + 1, a.microbatch});
    if (a.op == Op::kSendGradient && s.stage_rank[a.stage - 1] == to) sent.push_back({Op::kRecvGradient, a.stage - 1, a.microbatch});
  }
  for (const Action& a : s.ranks[to]) {
    if (a.op == Op::kRecvActivation && s.stage_rank[a.stage - 1] == from) received.push_back(a);
    if (a.op == Op::kRecvGradient && s.stage_rank[a.stage + 1] == from) received.push_back(a);
  }
  return {sent, received};
}

// For runtimes that match untagged messages in posting order (PyTorch's compute_comms CSV):
// every rank posts its receives from each peer in the order the peer sends, the compute order
// and the set of actions are unchanged, and every receive still comes before the compute that
// reads it. Not vacuous: the lowering's own order breaks the send order for some zero-bubble
// and V shapes.
TEST(PostReceivesInSendOrder, EveryShapeReceivesInItsPeersSendOrder) {
  int reordered = 0, shapes = 0;
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int ranks : {2, 3, 4}) {
      for (int microbatches = 1; microbatches <= 12; ++microbatches) {
        if (!CheckMicrobatchCount(kind, ranks, microbatches).ok()) continue;
        Expected<Schedule> compute = GenerateSchedule(kind, ranks, StageCount(kind, ranks, 2), microbatches);
        if (!compute.ok()) continue;
        ++shapes;
        const Schedule lowered = AddCommunication(*compute);
        const Schedule posted = PostReceivesInSendOrder(lowered);
        const std::string label = std::string(ScheduleName(kind)) + " K=" + std::to_string(ranks) + " M=" +
                                  std::to_string(microbatches);
        EXPECT_EQ(ComputeOnly(posted), *compute) << label;
        const Status valid = ValidateSchedule(posted, Lowering::kWithCommunication);
        EXPECT_TRUE(valid.ok()) << label << ": " << valid.message();
        bool out_of_order = false;
        for (int from = 0; from < ranks; ++from) {
          for (int to = 0; to < ranks; ++to) {
            if (from == to) continue;
            const auto [sent, received] = Messages(posted, from, to);
            EXPECT_EQ(received, sent) << label << " from rank " << from << " to rank " << to;
            const auto [sent_before, received_before] = Messages(lowered, from, to);
            out_of_order = out_of_order || received_before != sent_before;
          }
        }
        for (int r = 0; r < ranks; ++r) {
          EXPECT_EQ(posted.ranks[r].size(), lowered.ranks[r].size()) << label;
        }
        reordered += out_of_order;
      }
    }
  }
  EXPECT_GT(reordered, 10) << "of " << shapes << " shapes";
  std::printf("%d of %d shapes had receives out of their peers' send order\n", reordered, shapes);
}

TEST(PostReceivesInSendOrder, BringsAnEarlierMessagesReceiveForward) {
  // zb-v on 3 ranks, M = 6: the lowering's order takes some message before one its peer sent
  // earlier; posted, the earlier message's receive comes first and the compute order stays.
  Expected<Schedule> compute = GenerateSchedule(ScheduleKind::kZbV, 3, 6, 6);
  ASSERT_TRUE(compute.ok());
  const Schedule lowered = AddCommunication(*compute);
  const Schedule posted = PostReceivesInSendOrder(lowered);
  EXPECT_NE(posted, lowered);
  EXPECT_EQ(PostReceivesInSendOrder(posted), posted);  // already in order: unchanged
}

}  // namespace
}  // namespace gpipe
