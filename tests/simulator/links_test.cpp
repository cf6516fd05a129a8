// Links: a message takes bytes/bandwidth on the wire, arrives latency later, and a link carries
// one message at a time, overlapping compute.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/plan.h"
#include "simulator/cost_model.h"
#include "core/schedule/generators.h"
#include "core/schedule/lower.h"
#include "simulator/simulator.h"

namespace gpipe {
namespace {

CostModel TwoRanks(double bytes, Link link) {
  CostModel costs = UniformCostModel(2, 2, 1.0, 1.0);
  costs.stages[0].output_bytes = costs.stages[1].input_bytes = bytes;
  for (auto& row : costs.links) {
    for (Link& l : row) l = link;
  }
  return costs;
}

SimResult RunSchedule(const CostModel& costs, int microbatches) {
  Expected<Schedule> schedule = GenerateSchedule(ScheduleKind::kGpipe, 2, 2, microbatches);
  Expected<SimResult> result = Simulate(AddCommunication(*schedule), costs);
  EXPECT_TRUE(result.ok());
  return *result;
}

TEST(Links, OneMicrobatchPaysLatencyPlusBandwidthBothWays) {
  // 1e6 bytes at 1e9 B/s: 1 ms on the wire, plus 0.5 ms latency, each way.
  const SimResult r = RunSchedule(TwoRanks(1e6, Link{1e9, 0.5}), 1);
  EXPECT_NEAR(r.step_time_ms, 1.0 + 1.5 + 1.0 + 1.0 + 1.5 + 1.0, 1e-12);
  ASSERT_EQ(r.transfers.size(), 2u);
  EXPECT_EQ(r.transfers[0].from_rank, 0);
  EXPECT_EQ(r.transfers[0].to_rank, 1);
  EXPECT_NEAR(r.transfers[0].start_ms, 1.0, 1e-12);
  EXPECT_NEAR(r.transfers[0].wire_end_ms, 2.0, 1e-12);
  EXPECT_NEAR(r.transfers[0].arrival_ms, 2.5, 1e-12);
  EXPECT_EQ(r.transfers[1].from_rank, 1);
  EXPECT_EQ(r.transfers[1].to_rank, 0);
}

TEST(Links, ALinkCarriesOneMessageAtATime) {
  // 2 ms on the wire per message but a forward takes 1 ms: the second message queues.
  const SimResult r = RunSchedule(TwoRanks(2e6, Link{1e9, 0.0}), 2);
  ASSERT_GE(r.transfers.size(), 2u);
  EXPECT_NEAR(r.transfers[0].start_ms, 1.0, 1e-12);
  EXPECT_NEAR(r.transfers[0].arrival_ms, 3.0, 1e-12);
  EXPECT_NEAR(r.transfers[1].start_ms, 3.0, 1e-12);  // sent at 2.0, waited for the wire
  EXPECT_NEAR(r.transfers[1].arrival_ms, 5.0, 1e-12);
}

TEST(Links, CommunicationOverlapsCompute) {
  // Rank 0's forwards are not slowed by its sends: F1 starts when F0 ends.
  const SimResult r = RunSchedule(TwoRanks(2e6, Link{1e9, 3.0}), 2);
  double f1_start = -1;
  for (const ActionTiming& t : r.actions) {
    if (t.rank == 0 && t.action == Action{Op::kForward, 0, 1}) f1_start = t.start_ms;
  }
  EXPECT_EQ(f1_start, 1.0);
}

TEST(Links, ClusterPicksIntraOrInterNodeLinks) {
  Cluster cluster;
  cluster.devices = 16;
  cluster.devices_per_node = 8;
  cluster.link = Link{300e9, 0.01};
  cluster.inter_node_link = Link{25e9, 0.02};
  cluster.links = {LinkOverride{3, 4, Link{1e9, 1.0}}};
  EXPECT_EQ(cluster.LinkBetween(0, 7).bandwidth_bytes_per_s, 300e9);
  EXPECT_EQ(cluster.LinkBetween(7, 8).bandwidth_bytes_per_s, 25e9);
  EXPECT_EQ(cluster.LinkBetween(15, 0).latency_ms, 0.02);
  EXPECT_EQ(cluster.LinkBetween(3, 4).latency_ms, 1.0);
  EXPECT_EQ(cluster.LinkBetween(4, 3).latency_ms, 0.01);  // overrides are directed
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

TEST(Links, RingAllReduceUsesTheSlowestHop) {
  Cluster cluster;
  cluster.devices = 16;
  cluster.devices_per_node = 8;
  cluster.link = Link{100e9, 0.01};
  cluster.inter_node_link = Link{10e9, 0.1};
  // Two devices in one node: 2(D-1) = 2 steps of bytes/2 each.
  EXPECT_NEAR(RingAllReduceMs(cluster, {0, 1}, 1e9), 2 * (0.01 + 0.5e9 / 100e9 * 1e3), 1e-12);
  // Across nodes the ring runs at the inter-node link's pace.
  EXPECT_NEAR(RingAllReduceMs(cluster, {0, 8}, 1e9), 2 * (0.1 + 0.5e9 / 10e9 * 1e3), 1e-12);
  EXPECT_EQ(RingAllReduceMs(cluster, {3}, 1e9), 0.0);
}

TEST(Links, PlacementDecidesWhichTrafficCrossesNodes) {
  Plan plan;
  plan.profile.layers = {LayerProfile{"a", 1, 2, std::nullopt, 1000000, 10, 4000000},
                         LayerProfile{"b", 1, 2, std::nullopt, 1000000, 10, 4}};
  plan.cluster.devices = 4;
  plan.cluster.device_memory_bytes = 1LL << 40;
  plan.cluster.devices_per_node = 2;
  plan.cluster.link = Link{100e9, 0.01};
  plan.cluster.inter_node_link = Link{1e9, 0.5};
  plan.stages = {StagePlan{0, 1, 0, false}, StagePlan{1, 2, 1, false}};
  plan.replicas = 2;
  plan.global_batch = 2;
  plan.placement = Placement::kPipelineMajor;  // devices: replica 0 = {0, 1}, replica 1 = {2, 3}
  Expected<CostModel> pipeline_major = BuildCostModel(plan);
  ASSERT_TRUE(pipeline_major.ok());
  EXPECT_EQ(pipeline_major->links[0][1].latency_ms, 0.01);
  EXPECT_NEAR(pipeline_major->allreduce_ms[0], 2 * (0.5 + 0.5e6 / 1e9 * 1e3), 1e-12);
  plan.placement = Placement::kReplicaMajor;  // rank 0 on {0, 1}, rank 1 on {2, 3}
  Expected<CostModel> replica_major = BuildCostModel(plan);
  ASSERT_TRUE(replica_major.ok());
  EXPECT_EQ(replica_major->links[0][1].latency_ms, 0.5);
  EXPECT_NEAR(replica_major->allreduce_ms[0], 2 * (0.01 + 0.5e6 / 100e9 * 1e3), 1e-12);
}

}  // namespace
}  // namespace gpipe
