// The generators against literal action lists: hand-drawn for GPipe and 1F1B, and for ZB-H1 and
// interleaved 1F1B the orders produced by the authors' code (sail-sg/zero-bubble-pipeline-
// parallelism, get_hand_schedule with warmup_c=1; Megatron-LM's get_model_chunk_id).
#include "core/schedule/generators.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "core/schedule/placement.h"
#include "core/schedule/validate.h"

namespace gpipe {
namespace {

// One rank's list without the stage number, e.g. "F0 F1 B0 B1"; interleaved lists add ".c<chunk>".
std::string Compact(const Schedule& schedule, int rank, bool chunks = false) {
  std::string text;
  for (const Action& a : schedule.ranks[rank]) {
    if (!text.empty()) text += " ";
    text += std::string(OpCode(a.op)) + std::to_string(a.microbatch);
    if (chunks) text += ".c" + std::to_string(a.stage / schedule.num_ranks());
  }
  return text;
}

TEST(Generators, GpipeIsFillDrain) {
  const Schedule s = GenerateGpipe(3, 4);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(Compact(s, r), "F0 F1 F2 F3 B0 B1 B2 B3");
  EXPECT_EQ(s.stage_rank, (std::vector<int>{0, 1, 2}));
}

TEST(Generators, OneFOneBWarmsUpThenAlternates) {
  const Schedule s = Generate1F1B(3, 4);
  EXPECT_EQ(Compact(s, 0), "F0 F1 F2 B0 F3 B1 B2 B3");
  EXPECT_EQ(Compact(s, 1), "F0 F1 B0 F2 B1 F3 B2 B3");
  EXPECT_EQ(Compact(s, 2), "F0 B0 F1 B1 F2 B2 F3 B3");
}

TEST(Generators, OneFOneBWithFewerMicrobatchesThanStages) {
  const Schedule s = Generate1F1B(4, 2);
  EXPECT_EQ(Compact(s, 0), "F0 F1 B0 B1");
  EXPECT_EQ(Compact(s, 3), "F0 B0 F1 B1");
}

TEST(Generators, ZbH1MatchesTheAuthorsOrder) {
  const Schedule s = GenerateZbH1(4, 8);
  EXPECT_EQ(Compact(s, 0), "F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 F6 I3 W3 F7 I4 W4 I5 W5 I6 W6 I7 W7");
  EXPECT_EQ(Compact(s, 1), "F0 F1 F2 I0 F3 I1 W0 F4 I2 W1 F5 I3 W2 F6 I4 W3 F7 I5 W4 I6 W5 I7 W6 W7");
  EXPECT_EQ(Compact(s, 2), "F0 F1 I0 F2 I1 F3 I2 W0 F4 I3 W1 F5 I4 W2 F6 I5 W3 F7 I6 W4 I7 W5 W6 W7");
  EXPECT_EQ(Compact(s, 3), "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7");
}

TEST(Generators, InterleavedMatchesMegatronOrder) {
  const Schedule s = GenerateInterleaved1F1B(4, 2, 8);
  EXPECT_EQ(Compact(s, 0, true),
            "F0.c0 F1.c0 F2.c0 F3.c0 F0.c1 F1.c1 F2.c1 F3.c1 F4.c0 F5.c0 "
            "F6.c0 B0.c1 F7.c0 B1.c1 F4.c1 B2.c1 F5.c1 B3.c1 F6.c1 B0.c0 F7.c1 B1.c0 "
            "B2.c0 B3.c0 B4.c1 B5.c1 B6.c1 B7.c1 B4.c0 B5.c0 B6.c0 B7.c0");
  EXPECT_EQ(Compact(s, 3, true),
            "F0.c0 F1.c0 F2.c0 F3.c0 F0.c1 B0.c1 F1.c1 B1.c1 F2.c1 B2.c1 F3.c1 B3.c1 "
            "F4.c0 B0.c0 F5.c0 B1.c0 F6.c0 B2.c0 F7.c0 B3.c0 F4.c1 B4.c1 F5.c1 B5.c1 "
            "F6.c1 B6.c1 F7.c1 B7.c1 B4.c0 B5.c0 B6.c0 B7.c0");
  // Chunk c of rank r is stage c*K + r.
  EXPECT_EQ(s.stage_rank, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
}

// Every generator, over a grid of shapes, gives a valid schedule that runs without deadlock; every
// M the kind takes (PyTorch's rounds for the interleaved kinds: M = 5 on K = 4 is one round of 5).
TEST(Generators, EveryShapeIsValidAndDeadlockFree) {
  int shapes = 0;
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int ranks : {1, 2, 3, 4, 5, 8}) {
      for (int microbatches : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 17}) {
        for (int chunks : {1, 2, 3}) {
          const StageLayout layout = LayoutOf(kind);
          if (layout != StageLayout::kLoop && chunks > 1) continue;
          if (!CheckMicrobatchCount(kind, ranks, microbatches).ok()) continue;
          const int stages = StageCount(kind, ranks, chunks);
          Expected<Schedule> s = GenerateSchedule(kind, ranks, stages, microbatches);
          ASSERT_TRUE(s.ok()) << s.status().message();
          EXPECT_EQ(s->stage_rank, PlaceStages(kind, ranks, stages));
          const std::string shape = std::string(ScheduleName(kind)) + " K=" + std::to_string(ranks) +
                                    " v=" + std::to_string(chunks) + " M=" + std::to_string(microbatches);
          const Status valid = ValidateSchedule(*s, Lowering::kComputeOnly);
          EXPECT_TRUE(valid.ok()) << shape << ": " << valid.message();
          const Status ran = DryRun(*s);
          EXPECT_TRUE(ran.ok()) << shape << ": " << ran.message();
          ++shapes;
        }
      }
    }
  }
  EXPECT_GT(shapes, 400);
}

TEST(Generators, ClosedFormsMatchTheLists) {
  for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kZbH1}) {
    for (int ranks : {1, 2, 3, 5, 8}) {
      for (int microbatches : {1, 2, 4, 7, 16}) {
        const Schedule s = *GenerateSchedule(kind, ranks, ranks, microbatches);
        for (int r = 0; r < ranks; ++r) {
          int forwards = 0, first = -1, in_flight = 0, most = 0;
          for (const Action& a : s.ranks[r]) {
            if (a.op == Op::kForward) {
              most = std::max(most, ++in_flight);
              if (first < 0) ++forwards;
            }
            if ((a.op == Op::kBackward || a.op == Op::kBackwardInput) && first < 0) first = forwards;
            if (a.op == Op::kBackward || a.op == Op::kBackwardWeight) --in_flight;
          }
          const std::string at = std::string(ScheduleName(kind)) + " K=" + std::to_string(ranks) +
                                 " M=" + std::to_string(microbatches) + " r=" + std::to_string(r);
          EXPECT_EQ(ForwardsBeforeFirstBackward(kind, ranks, microbatches, r), first) << at;
          EXPECT_EQ(MaxInFlight(kind, ranks, microbatches, r), most) << at;
        }
      }
    }
  }
}

TEST(Generators, RefuseShapesTheyCannotTake) {
  const auto message = [](Expected<Schedule> s) { return s.ok() ? std::string("ok") : s.status().message(); };
  EXPECT_NE(message(GenerateSchedule(ScheduleKind::kInterleaved1F1B, 4, 8, 9)).find("M = 9 on 4 ranks is 2 rounds, which do not divide it; try 8 or 10"),
            std::string::npos);
  EXPECT_EQ(message(GenerateSchedule(ScheduleKind::kInterleaved1F1B, 4, 8, 6)), "ok");  // one round of 6
  EXPECT_NE(message(GenerateSchedule(ScheduleKind::kInterleaved1F1B, 4, 6, 8)).find("the same number of stages on every rank"),
            std::string::npos);
  EXPECT_NE(message(GenerateSchedule(ScheduleKind::kZbV, 2, 6, 8)).find("exactly two stages per rank (2K = 4 stages"),
            std::string::npos);
  EXPECT_NE(message(GenerateSchedule(ScheduleKind::kDualPipeV, 3, 6, 5)).find("at least as many micro-batches as its 2K = 6 stages"),
            std::string::npos);
  EXPECT_NE(message(GenerateSchedule(ScheduleKind::k1F1B, 4, 8, 8)).find("one stage per rank"), std::string::npos);
  EXPECT_NE(message(GenerateSchedule(ScheduleKind::kGpipe, 0, 0, 8)).find("at least one rank"), std::string::npos);
  EXPECT_NE(message(GenerateSchedule(ScheduleKind::kGpipe, 2, 2, 0)).find("at least one micro-batch"), std::string::npos);
}

}  // namespace
}  // namespace gpipe
