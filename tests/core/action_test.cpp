#include "core/schedule/action.h"

#include <gtest/gtest.h>

namespace gpipe {
namespace {

TEST(ActionText, PrintsStageOpMicrobatch) {
  EXPECT_EQ(ActionToText({Op::kForward, 2, 0}), "2F0");
  EXPECT_EQ(ActionToText({Op::kBackward, 0, 13}), "0B13");
  EXPECT_EQ(ActionToText({Op::kBackwardInput, 1, 2}), "1I2");
  EXPECT_EQ(ActionToText({Op::kBackwardWeight, 1, 2}), "1W2");
  EXPECT_EQ(ActionToText({Op::kSendActivation, 3, 4}), "3SEND_F4");
  EXPECT_EQ(ActionToText({Op::kRecvActivation, 3, 4}), "3RECV_F4");
  EXPECT_EQ(ActionToText({Op::kSendGradient, 10, 11}), "10SEND_B11");
  EXPECT_EQ(ActionToText({Op::kRecvGradient, 0, 0}), "0RECV_B0");
}

TEST(ActionText, RoundTripsEveryOp) {
  for (int op = 0; op < kNumOps; ++op) {
    for (const auto& [stage, mb] : {std::pair{0, 0}, {7, 123}, {64, 1023}}) {
      const Action action{static_cast<Op>(op), stage, mb};
      Expected<Action> parsed = ActionFromText(ActionToText(action));
      ASSERT_TRUE(parsed.ok()) << ActionToText(action);
      EXPECT_EQ(*parsed, action);
    }
  }
}

TEST(ActionText, RejectsWhatItDoesNotPrint) {
  for (const char* bad : {"", "F0", "1F", "1X0", "01F0", "1F00", "-1F0", "1f0", "1 F0", "1SEND0", "1F0x"}) {
    Expected<Action> parsed = ActionFromText(bad);
    EXPECT_FALSE(parsed.ok()) << "accepted \"" << bad << "\"";
    if (!parsed.ok()) {
      EXPECT_NE(parsed.status().message().find("is not an action"), std::string::npos);
    }
  }
}

TEST(ActionText, ErrorNamesTheUnknownOp) {
  Expected<Action> parsed = ActionFromText("1Q0");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("unknown op \"Q\""), std::string::npos) << parsed.status().message();
}

}  // namespace
}  // namespace gpipe
