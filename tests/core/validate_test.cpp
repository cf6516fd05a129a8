#include "core/schedule/validate.h"

#include <gtest/gtest.h>

#include "core/schedule/generators.h"
#include "core/schedule/lower.h"

namespace gpipe {
namespace {

Schedule Parse(const char* text) {
  Expected<Schedule> s = ScheduleFromText(text);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

std::string Problem(const char* text, Lowering lowering) {
  const Status status = ValidateSchedule(Parse(text), lowering);
  return status.ok() ? "ok" : status.message();
}

TEST(ValidateSchedule, FindsStructuralMistakes) {
  const std::pair<const char*, const char*> cases[] = {
      {"rank 0: 0F0 0B0 0F1\nrank 1: 1F0 1B0 1F1 1B1\n", "0B1 is missing"},
      {"rank 0: 0F0 0F0 0B0\nrank 1: 1F0 1B0\n", "0F0 appears 2 times"},
      {"rank 0: 0B0 0F0\nrank 1: 1F0 1B0\n", "0F0 must come before 0B0"},
      {"rank 0: 0F0 0I0\nrank 1: 1F0 1B0\n", "0W0 is missing"},
      {"rank 0: 0F0 0W0 0I0\nrank 1: 1F0 1B0\n", "0I0 must come before 0W0"},
      {"rank 0: 0F0 0B0 0I0 0W0\nrank 1: 1F0 1B0\n", "use one form"},
      {"rank 0: 0F0 0SEND_F0 0B0\nrank 1: 1F0 1B0\n", "has no sends or receives"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string problem = Problem(text, Lowering::kComputeOnly);
    EXPECT_NE(problem.find(expected), std::string::npos) << text << " -> " << problem;
  }
}

TEST(ValidateSchedule, RequiresEveryHandOverWhenLowered) {
  // Compute-only GPipe on two ranks lacks its messages.
  const Status missing = ValidateSchedule(GenerateGpipe(2, 1), Lowering::kWithCommunication);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("0SEND_F0 is missing"), std::string::npos) << missing.message();
  EXPECT_NE(missing.message().find("AddCommunication"), std::string::npos);
  // A receive placed after its consumer.
  const std::string late = Problem(
      "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1F0 1RECV_F0 1B0 1SEND_B0\n", Lowering::kWithCommunication);
  EXPECT_NE(late.find("1RECV_F0 must come before 1F0"), std::string::npos) << late;
}

TEST(DryRun, AcceptsGeneratedSchedules) {
  EXPECT_TRUE(DryRun(AddCommunication(Generate1F1B(4, 8))).ok());
}

TEST(DryRun, ReportsADeadlockAsAGrid) {
  // Rank 0 waits for a gradient before sending the activation that would produce it.
  const Schedule s = Parse(
      "rank 0: 0F0 0RECV_B0 0SEND_F0 0B0\n"
      "rank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n");
  // Structurally sound: every message has its send after its producer and its receive before
  // its consumer. Only playing it shows that each rank waits for the other.
  ASSERT_TRUE(ValidateSchedule(s, Lowering::kWithCommunication).ok());
  const Status ran = DryRun(s);
  ASSERT_FALSE(ran.ok());
  const std::string& grid = ran.message();
  EXPECT_NE(grid.find("deadlock"), std::string::npos) << grid;
  EXPECT_NE(grid.find(">0RECV_B0<"), std::string::npos) << grid;
  EXPECT_NE(grid.find(">1RECV_F0<"), std::string::npos) << grid;
  EXPECT_NE(grid.find("rank 0 waits at 0RECV_B0 for 1SEND_B0 (rank 1)"), std::string::npos) << grid;
  EXPECT_NE(grid.find("rank 1 waits at 1RECV_F0 for 0SEND_F0 (rank 0)"), std::string::npos) << grid;
}

}  // namespace
}  // namespace gpipe
