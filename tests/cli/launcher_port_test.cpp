// The rendezvous port `run` picks for a single-node job (executor/launcher.h): below the range the
// kernel hands out by itself, so that the listeners and connections other jobs open meanwhile
// (Gloo's pairs take ephemeral ports) cannot take it between the pick and rank 0's listen, and
// free when picked.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>

#include "executor/launcher.h"

namespace gpipe {
namespace {

TEST(LauncherPort, PicksAFreePortBelowTheKernelsOwnRange) {
  const auto [lo, hi] = executor::EphemeralPorts();
  ASSERT_GT(lo, 0);
  ASSERT_LE(lo, hi);
  if (lo - executor::kFirstRendezvousPort < 100) GTEST_SKIP() << "the kernel's range starts at " << lo;
  std::set<int> seen;
  for (int i = 0; i < 20; ++i) {
    const int port = executor::FreeLoopbackPort();
    EXPECT_GE(port, executor::kFirstRendezvousPort);
    EXPECT_LT(port, lo) << "picked inside the kernel's own range " << lo << "-" << hi;
    // Free when picked: a listener can have it.
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << port;
    close(fd);
    seen.insert(port);
  }
  // Picked at random, so that two jobs started together seldom pick the same.
  EXPECT_GE(seen.size(), 15u);
}

}  // namespace
}  // namespace gpipe
