#include <gtest/gtest.h>

#include "core/schedule/generators.h"
#include "core/schedule/lower.h"
#include "core/schedule/placement.h"
#include "core/schedule/schedule.h"

namespace gpipe {
namespace {

TEST(ScheduleText, RoundTripsEveryGeneratedSchedule) {
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int ranks : {1, 2, 3, 4}) {
      Expected<Schedule> s = GenerateSchedule(kind, ranks, StageCount(kind, ranks, 3), 2 * ranks);
      ASSERT_TRUE(s.ok());
      for (const Schedule& schedule : {*s, AddCommunication(*s)}) {
        const std::string text = ScheduleToText(schedule);
        Expected<Schedule> parsed = ScheduleFromText(text);
        ASSERT_TRUE(parsed.ok()) << parsed.status().message();
        EXPECT_EQ(*parsed, schedule) << text;
        EXPECT_EQ(ScheduleToText(*parsed), text);
      }
    }
  }
}

TEST(ScheduleText, ReadsStageRanksOffTheActions) {
  Expected<Schedule> s = ScheduleFromText("rank 0: 0F0 2F0 2B0 0B0\nrank 1: 1F0 1B0\n");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->stage_rank, (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(s->num_microbatches, 1);
}

TEST(ScheduleText, ErrorsNameTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"rank 1: 0F0\n", "schedule line 1: expected it to start with \"rank 0:\""},
      {"rank 0: 0F0 0Z0\n", "schedule line 1: \"0Z0\" is not an action"},
      {"rank 0: 0F0\nrank 1: 0B0\n", "stage 0 has actions on rank 0 and on rank 1"},
      {"", "no \"rank 0:\" line"},
      {"rank 0: 1F0\n", "stage 0 has no actions"},
  };
  for (const auto& [text, expected] : cases) {
    Expected<Schedule> s = ScheduleFromText(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_NE(s.status().message().find(expected), std::string::npos) << s.status().message();
  }
}

}  // namespace
}  // namespace gpipe
