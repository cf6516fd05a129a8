// The in-process wire with NCCL's rules does what ProcessGroupNCCL does with point-to-point
// messages: one ordered queue per pair (or per pair and direction), tags ignored, a send done only
// when its receive is there, group calls matched as a whole; and where NCCL would hang it says
// "would deadlock on NCCL" at once instead.
#include "executor/nccl_emulation.h"

#include <gtest/gtest.h>

#include <thread>

namespace gpipe::executor {
namespace {

constexpr std::chrono::milliseconds kTimeout{20000};

// Runs `body(rank, comm)` on two threads; returns each rank's error ("" when none).
template <typename Body>
std::vector<std::string> OnTwoRanks(NcclQueues queues, Body body) {
  auto hub = std::make_shared<NcclHub>(2, queues, kTimeout);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> comm = MakeNcclEmulation(hub, r);
      try {
        body(r, *comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

const int kTagA = MessageTag({MessageKind::kActivation, 0, 0, false});
const int kTagB = MessageTag({MessageKind::kGradient, 1, 0, false});

TEST(NcclEmulation, EachRankReceivesBeforeSendingWouldDeadlockOnOneQueuePerPair) {
  const auto body = [](int rank, Communicator& comm) {
    torch::Tensor in = torch::zeros({4});
    auto recv = comm.Recv(in, 1 - rank, rank == 0 ? kTagB : kTagA);
    auto send = comm.Send(torch::ones({4}), 1 - rank, rank == 0 ? kTagA : kTagB);
    recv->Wait();
    send->Wait();
    EXPECT_TRUE(in.equal(torch::ones({4})));
  };
  const std::vector<std::string> shared = OnTwoRanks(NcclQueues::kSharedByPair, body);
  for (const std::string& e : shared) EXPECT_NE(e.find("would deadlock on NCCL"), std::string::npos) << e;
  EXPECT_NE(shared[0].find("its queue with rank 1 starts with the receive of the gradients of stage 1"), std::string::npos)
      << shared[0];
  // One queue per direction: the receives and sends do not wait for each other.
  for (const std::string& e : OnTwoRanks(NcclQueues::kPerDirection, body)) EXPECT_EQ(e, "");
}

TEST(NcclEmulation, TagsAreIgnoredSoTheFirstSendMeetsTheFirstReceive) {
  const std::vector<std::string> errors = OnTwoRanks(NcclQueues::kPerDirection, [](int rank, Communicator& comm) {
    if (rank == 0) {
      auto a = comm.Send(torch::ones({2}), 1, kTagA);
      auto b = comm.Send(torch::ones({2}), 1, kTagB);
      a->Wait();
      b->Wait();
    } else {
      torch::Tensor x = torch::zeros({2});
      comm.Recv(x, 0, kTagB)->Wait();  // a tag-matching wire would hand over B
    }
  });
  EXPECT_NE(errors[1].find("would get rank 0's activations of stage 0"), std::string::npos) << errors[1];
}

TEST(NcclEmulation, ASendIsDoneOnlyOnceItsReceiveIsThere) {
  auto hub = std::make_shared<NcclHub>(2, NcclQueues::kPerDirection, kTimeout);
  std::unique_ptr<Communicator> zero = MakeNcclEmulation(hub, 0);
  std::unique_ptr<Communicator> one = MakeNcclEmulation(hub, 1);
  torch::Tensor data = torch::arange(3, torch::kFloat);
  auto send = zero->Send(data, 1, kTagA);
  EXPECT_FALSE(send->Done());
  torch::Tensor into = torch::zeros({3});
  auto recv = one->Recv(into, 0, kTagA);
  EXPECT_TRUE(send->Done());
  recv->Wait();
  EXPECT_TRUE(into.equal(data));
}

TEST(NcclEmulation, AGroupIsMatchedAsAWhole) {
  // The same cycle as above, but each rank posts its receive and send as one group call.
  auto hub = std::make_shared<NcclHub>(2, NcclQueues::kSharedByPair, kTimeout);
  std::vector<std::thread> threads;
  std::vector<torch::Tensor> got = {torch::zeros({2}), torch::zeros({2})};
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto ops = hub->PostGroup(r, {{1 - r, false, r == 0 ? kTagB : kTagA, got[static_cast<size_t>(r)]},
                                    {1 - r, true, r == 0 ? kTagA : kTagB, torch::full({2}, 1.0 + r)}});
      for (const auto& op : ops) hub->Wait(r, op);
      hub->Leave(r);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(got[0].equal(torch::full({2}, 2.0)));
  EXPECT_TRUE(got[1].equal(torch::full({2}, 1.0)));
}

TEST(NcclEmulation, AShapeThatDiffersIsAnErrorNotACorruption) {
  const std::vector<std::string> errors = OnTwoRanks(NcclQueues::kPerDirection, [](int rank, Communicator& comm) {
    if (rank == 0) {
      comm.Send(torch::ones({2, 3}), 1, kTagA)->Wait();
    } else {
      torch::Tensor x = torch::zeros({3, 2});
      comm.Recv(x, 0, kTagA)->Wait();
    }
  });
  EXPECT_NE(errors[1].find("posted a [3, 2] float buffer"), std::string::npos) << errors[1];
}

TEST(NcclEmulation, ARankThatLeftCannotBeWaitedFor) {
  const std::vector<std::string> errors = OnTwoRanks(NcclQueues::kPerDirection, [](int rank, Communicator& comm) {
    if (rank == 1) {
      torch::Tensor x = torch::zeros({1});
      comm.Recv(x, 0, kTagA)->Wait();
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("would deadlock on NCCL"), std::string::npos) << errors[1];
}

}  // namespace
}  // namespace gpipe::executor
