// Peak memory per rank: parameters and optimizer state, stashed activations for the micro-batches
// in flight (only stage inputs under remat, plus one micro-batch while recomputing), and buffers.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/plan.h"
#include "core/schedule/generators.h"
#include "core/schedule/lower.h"
#include "core/schedule/placement.h"
#include "core/schedule/wire.h"
#include "simulator/layer_table.h"
#include "simulator/memory_model.h"
#include "simulator/simulator.h"

namespace gpipe {
namespace {

constexpr double kActivation = 1000;
constexpr double kInput = 10;
constexpr double kStatic = 5000;

// What a micro-batch stashes on rank `rank` without remat: the activations, and stage 0's input
// (its graph holds it; the other stages' inputs are 0 here).
double Stash(int rank) { return kActivation + (rank == 0 ? kInput : 0); }

CostModel Costs(int ranks, bool remat) {
  CostModel costs = UniformCostModel(ranks, ranks, 1.0, 2.0, 0.5);
  for (StageCost& stage : costs.stages) {
    stage.remat = remat;
    stage.activation_bytes = kActivation;
    stage.input_bytes = 0;  // no messages: activations only
    stage.output_bytes = 0;
    stage.static_bytes = kStatic;
  }
  costs.stages[0].input_bytes = kInput;  // what stage 0 keeps under remat
  return costs;
}

SimResult RunSchedule(ScheduleKind kind, int ranks, int microbatches, const CostModel& costs) {
  Expected<Schedule> schedule = GenerateSchedule(kind, ranks, ranks, microbatches);
  Expected<SimResult> result = Simulate(AddCommunication(*schedule), costs);
  EXPECT_TRUE(result.ok());
  return *result;
}

TEST(Memory, GpipeStashesEveryMicrobatch) {
  for (int m : {1, 4, 8}) {
    const SimResult r = RunSchedule(ScheduleKind::kGpipe, 2, m, Costs(2, false));
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(r.ranks[rank].peak_activation_bytes, m * Stash(rank));
      EXPECT_EQ(r.ranks[rank].peak_memory_bytes, kStatic + m * Stash(rank));
    }
  }
}

TEST(Memory, RematKeepsInputsPlusOneMicrobatch) {
  // GPipe's claim: O(N + (L/K) x (N/M)) instead of O(N x L): M stage inputs and one
  // micro-batch's recomputed activations.
  for (int m : {1, 4, 8}) {
    const SimResult r = RunSchedule(ScheduleKind::kGpipe, 2, m, Costs(2, true));
    EXPECT_EQ(r.ranks[0].peak_activation_bytes, m * kInput + kActivation) << "M=" << m;
  }
}

TEST(Memory, OneFOneBHoldsAtMostKMinusRMicrobatches) {
  for (int k : {2, 4}) {
    for (int m : {1, 4, 8}) {
      const SimResult r = RunSchedule(ScheduleKind::k1F1B, k, m, Costs(k, false));
      for (int rank = 0; rank < k; ++rank) {
        EXPECT_EQ(r.ranks[rank].peak_activation_bytes, std::min(k - rank, m) * Stash(rank))
            << "K=" << k << " M=" << m << " r=" << rank;
      }
    }
  }
}

TEST(Memory, ZbH1PeaksNoHigherThanOneFOneB) {
  // Zero Bubble PP: ZB-H1 delays rank r's W passes by r slots, so a later rank keeps more
  // micro-batches than under 1F1B, but no rank keeps more than 1F1B's busiest rank (K).
  const SimResult one = RunSchedule(ScheduleKind::k1F1B, 4, 8, Costs(4, false));
  const SimResult zb = RunSchedule(ScheduleKind::kZbH1, 4, 8, Costs(4, false));
  double one_peak = 0, zb_peak = 0;
  for (int rank = 0; rank < 4; ++rank) {
    one_peak = std::max(one_peak, one.ranks[rank].peak_activation_bytes);
    zb_peak = std::max(zb_peak, zb.ranks[rank].peak_activation_bytes);
    EXPECT_EQ(zb.ranks[rank].max_in_flight, 4) << rank;
  }
  EXPECT_EQ(zb_peak, one_peak);
  EXPECT_EQ(one_peak, 4 * Stash(0));
}

TEST(Memory, WhatIKeepsForWIsHeldUntilW) {
  // The gradients I captured for W live from I's start to W's end, on top of the stashes. ZB-H1,
  // K=2, M=4, at each rank's peak: one micro-batch's on rank 0, two on rank 1 (whose W passes
  // trail their I by more), each priced at weight_pass_bytes.
  constexpr double kHeld = 300;
  CostModel costs = Costs(2, false);
  const SimResult without = RunSchedule(ScheduleKind::kZbH1, 2, 4, costs);
  for (StageCost& stage : costs.stages) stage.weight_pass_bytes = kHeld;
  const SimResult with = RunSchedule(ScheduleKind::kZbH1, 2, 4, costs);
  for (int rank = 0; rank < 2; ++rank) {
    const double added = with.ranks[rank].peak_activation_bytes - without.ranks[rank].peak_activation_bytes;
    EXPECT_EQ(added, (rank + 1) * kHeld) << rank;
  }
  // 1F1B runs no split backward: nothing is held for a W.
  EXPECT_EQ(RunSchedule(ScheduleKind::k1F1B, 2, 4, costs).ranks[0].peak_activation_bytes,
            RunSchedule(ScheduleKind::k1F1B, 2, 4, Costs(2, false)).ranks[0].peak_activation_bytes);
}

TEST(Memory, EveryAllocationIsFreedByTheEnd) {
  CostModel costs = Costs(3, true);
  for (StageCost& stage : costs.stages) stage.input_bytes = stage.output_bytes = 64;
  for (auto& row : costs.links) {
    for (Link& link : row) link = Link{64e3, 0.25};  // 1 ms on the wire per message
  }
  for (ScheduleKind kind : AllScheduleKinds()) {
    if (LayoutOf(kind) != StageLayout::kOnePerRank) continue;  // the next test covers the others
    const SimResult r = RunSchedule(kind, 3, 6, costs);
    for (const RankResult& rank : r.ranks) {
      ASSERT_FALSE(rank.memory.empty());
      EXPECT_NEAR(rank.memory.back().bytes, rank.static_bytes, 1e-9) << ScheduleName(kind);
      EXPECT_GT(rank.peak_buffer_bytes + rank.peak_activation_bytes, 0);
    }
  }
}

TEST(Memory, BuffersHoldWhatTheRankWaitsForAndTheGradientDuringBackward) {
  // Rank 0 posts the receive of its first gradient while its last forward runs, as the executor
  // does (ReceivesPostedAt), and the next one as its first backward starts: both buffers live
  // during that backward, each until its own backward ends. Rank 1's received inputs join the
  // stash at their forwards, held by the graph until their backwards end.
  CostModel costs = Costs(2, false);
  costs.stages[1].backward_ms = 10.0;
  costs.stages[0].output_bytes = 7;
  costs.stages[1].input_bytes = 7;
  const SimResult r = RunSchedule(ScheduleKind::kGpipe, 2, 2, costs);
  EXPECT_EQ(r.ranks[0].peak_buffer_bytes, 2 * 7);  // two gradient buffers, during the first B
  EXPECT_EQ(r.ranks[0].peak_memory_bytes, kStatic + 2 * Stash(0) + 2 * 7);
  EXPECT_EQ(r.ranks[1].peak_buffer_bytes, 0);  // its received inputs are part of the stash
  EXPECT_EQ(r.ranks[1].peak_memory_bytes, kStatic + 2 * (kActivation + 7));
}

TEST(Memory, PeakDependsOnTheActionListOnly) {
  // The simulator's peak equals the timing-free walk over the rank's actions, whatever the times.
  for (ScheduleKind kind : AllScheduleKinds()) {
    const int stages = StageCount(kind, 3, 2);
    CostModel costs = UniformCostModel(3, stages, 1.0, 2.0, 0.7);
    for (int s = 0; s < stages; ++s) {
      costs.stages[s].forward_ms = 0.5 + s;
      costs.stages[s].remat = s % 2 == 1;
      costs.stages[s].activation_bytes = 100 + 10 * s;
      costs.stages[s].input_bytes = 3 + s;
      costs.stages[s].output_bytes = 4 + s;
      costs.stages[s].static_bytes = 1000;
    }
    Expected<Schedule> compute = GenerateSchedule(kind, 3, stages, 6);
    const Schedule schedule = AddCommunication(*compute);
    Expected<SimResult> r = Simulate(schedule, costs);
    ASSERT_TRUE(r.ok());
    for (int rank = 0; rank < 3; ++rank) {
      const MemoryPeak walk = RankMemoryPeak(schedule, rank, costs.stages);
      EXPECT_EQ(r->ranks[rank].peak_memory_bytes, walk.peak_bytes) << ScheduleName(kind);
      double drawn = 0;
      for (const MemorySample& sample : r->ranks[rank].memory) drawn = std::max(drawn, sample.bytes);
      EXPECT_EQ(drawn, walk.peak_bytes) << ScheduleName(kind) << " rank " << rank;
    }
  }
}

TEST(Memory, AReceivesBufferIsAllocatedWhereTheExecutorsWireProgramPostsIt) {
  // ReceivesPostedAt finds the posting without building the wire program; it must agree with
  // the program the executor runs on every step after the first, for every schedule.
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int ranks : {2, 3, 4}) {
      for (int microbatches : {1, 2, 3, 5, 8}) {
        const int stages = StageCount(kind, ranks, 2);
        Expected<Schedule> compute = GenerateSchedule(kind, ranks, stages, microbatches);
        if (!compute.ok()) continue;  // a shape the kind does not make (M below what it needs)
        const Schedule schedule = AddCommunication(*compute);
        const WireProgram program = BuildWireProgram(schedule, /*first_step=*/false);
        const ReceivePosting posting = ReceivesPostedAt(schedule);
        for (int r = 0; r < ranks; ++r) {
          const std::vector<Action>& actions = schedule.ranks[static_cast<size_t>(r)];
          std::vector<std::pair<size_t, size_t>> expected;
          size_t ahead = 0;
          for (size_t i = 0; i < actions.size(); ++i) {
            for (const WireStep& step : program.ranks[static_cast<size_t>(r)][i]) {
              if (step.op != WireOp::kPostRecv) continue;
              for (size_t j = 0; j < actions.size(); ++j) {
                if (IsRecv(actions[j].op) && MessageOf(actions[j]) == step.message) expected.push_back({i, j});
              }
              ahead += expected.back().first < expected.back().second ? 1 : 0;
            }
          }
          EXPECT_EQ(posting[static_cast<size_t>(r)], expected)
              << ScheduleName(kind) << " K=" << ranks << " M=" << microbatches << " rank " << r;
          // Every receive is posted once, at or before its RECV; with two or more micro-batches
          // some are posted ahead.
          size_t receives = 0;
          for (const Action& a : actions) receives += IsRecv(a.op) ? 1 : 0;
          EXPECT_EQ(expected.size(), receives);
          if (microbatches >= 2 && receives > 0) {
            EXPECT_GT(ahead, 0u) << ScheduleName(kind) << " rank " << r;
          }
        }
      }
    }
  }
}

TEST(Memory, WorkspacesAddToThePeakOnlyWhileTheirActionRuns) {
  // GPipe on one rank, M=2: the peak is at the first backward's start, with both stashes, one
  // gradient's workspace; a forward workspace smaller than the backward's never shows.
  CostModel costs = Costs(1, false);
  costs.stages[0].forward_workspace_bytes = 300;
  costs.stages[0].backward_workspace_bytes = 700;
  SimResult r = RunSchedule(ScheduleKind::kGpipe, 1, 2, costs);
  EXPECT_EQ(r.ranks[0].peak_memory_bytes, kStatic + 2 * Stash(0) + 700);
  // A forward workspace larger than a stash plus the backward's peaks during the last forward.
  costs.stages[0].forward_workspace_bytes = 2000;
  r = RunSchedule(ScheduleKind::kGpipe, 1, 2, costs);
  EXPECT_EQ(r.ranks[0].peak_memory_bytes, kStatic + 2 * Stash(0) + 2000);
  // Under remat the backward's workspace comes on top of the recomputed micro-batch.
  costs = Costs(1, true);
  costs.stages[0].backward_workspace_bytes = 700;
  r = RunSchedule(ScheduleKind::kGpipe, 1, 2, costs);
  EXPECT_EQ(r.ranks[0].peak_activation_bytes, 2 * kInput + kActivation + 700);
  // Every workspace is freed by its action's end: after the step only the static bytes remain.
  Expected<Schedule> compute = GenerateSchedule(ScheduleKind::kZbH1, 2, 2, 4);
  ASSERT_TRUE(compute.ok());
  const Schedule schedule = AddCommunication(*compute);
  costs = Costs(2, false);
  for (StageCost& stage : costs.stages) stage.forward_workspace_bytes = stage.backward_workspace_bytes = 123;
  double held = 0;
  for (const Action& a : schedule.ranks[0]) {
    const MemoryEffect e = EffectOf(schedule, a, costs.stages[a.stage]);
    held += e.at_start.activation_bytes + e.at_end.activation_bytes;
  }
  EXPECT_EQ(held, 0);
}

TEST(Memory, TheFirstStageHoldsEveryMicrobatchsInputFromTheStepsStart) {
  // 1F1B, K=2, M=4, remat: rank 0 keeps only inputs, so they decide its peak. The executor copies
  // the four inputs when the step begins; each becomes part of the stash at its forward. The
  // peak, at the first backward's recompute, holds all four (two stashed, two waiting) and one
  // micro-batch's recomputed activations.
  const SimResult r = RunSchedule(ScheduleKind::k1F1B, 2, 4, Costs(2, true));
  EXPECT_EQ(r.ranks[0].peak_memory_bytes, kStatic + 4 * kInput + kActivation);
  ASSERT_FALSE(r.ranks[0].memory.empty());
  EXPECT_EQ(r.ranks[0].memory.front().bytes, kStatic + 4 * kInput);  // the drawn timeline too
  EXPECT_EQ(r.ranks[1].memory.front().bytes, kStatic);               // no inputs on the second stage
  Expected<Schedule> compute = GenerateSchedule(ScheduleKind::k1F1B, 2, 2, 4);
  ASSERT_TRUE(compute.ok());
  EXPECT_EQ(StepStartInputs(*compute, 0), 4);
  EXPECT_EQ(StepStartInputs(*compute, 1), 0);
}

TEST(Memory, AHeldSendOfTheStashsOwnOutputCostsNothingUntilTheStashLetsGo) {
  // GPipe, K=2, M=3, sends held until the step ends (Gloo). Rank 0's peak is at its first
  // backward's start: three stashes, the received gradient's buffer and the next one's (posted
  // as that backward starts), and the three sent outputs, unless they are the stashes' own
  // tensors.
  constexpr double kOutput = 64;
  CostModel costs = Costs(2, false);
  costs.stages[0].output_bytes = kOutput;
  costs.stages[1].input_bytes = kOutput;
  for (StageCost& stage : costs.stages) stage.sends_held = true;
  const SimResult copies = RunSchedule(ScheduleKind::kGpipe, 2, 3, costs);
  EXPECT_EQ(copies.ranks[0].peak_memory_bytes, kStatic + 3 * Stash(0) + 2 * kOutput + 3 * kOutput);
  costs.stages[0].sent_output_in_stash = true;
  const SimResult shared = RunSchedule(ScheduleKind::kGpipe, 2, 3, costs);
  EXPECT_EQ(shared.ranks[0].peak_memory_bytes, kStatic + 3 * Stash(0) + 2 * kOutput);
  // Each backward hands its output over to the send: after the last, the three sent outputs are
  // all that is left beyond the model state, as with copies.
  const auto end_bytes = [](const SimResult& r) { return r.ranks[0].memory.back().bytes; };
  EXPECT_EQ(end_bytes(shared), end_bytes(copies));
  EXPECT_EQ(end_bytes(shared), kStatic + 3 * kOutput);
}

// A profile of micro-batches of 1 whose layers take 1 ms each way and send `outputs` bytes.
Profile ProfileOfLayers(const std::vector<int64_t>& outputs) {
  Profile profile;
  profile.microbatch_size = 1;
  for (size_t l = 0; l < outputs.size(); ++l) {
    LayerProfile layer;
    layer.name = "l" + std::to_string(l);
    layer.forward_ms = layer.backward_ms = 1;
    layer.output_bytes = outputs[l];
    profile.layers.push_back(layer);
  }
  return profile;
}

TEST(Memory, AStagesWorkspaceIsItsLayersLargestWithTheGradientsBetweenThem) {
  Profile profile = ProfileOfLayers({100, 200, 300});
  // Measured by a profile that has none: no workspace at all.
  const LayerTable none(profile, 1.0, Optimizer::kAdam);
  EXPECT_EQ(none.Stage(0, 3, false).backward_workspace_bytes, 0);
  EXPECT_EQ(none.Stage(0, 3, false).forward_workspace_bytes, 0);
  profile.layers[0].backward_workspace_bytes = 1000;  // + its output's gradient, 100, inside a stage
  profile.layers[1].backward_workspace_bytes = 1050;  // + 200
  profile.layers[2].backward_workspace_bytes = 1200;  // the stage's last: its gradient is the received buffer
  profile.layers[1].forward_workspace_bytes = 70;
  const LayerTable table(profile, 2.0, Optimizer::kAdam);  // micro-batches of 2: bytes double
  EXPECT_EQ(table.Stage(0, 3, false).backward_workspace_bytes, 2 * 1250);
  EXPECT_EQ(table.Stage(0, 2, false).backward_workspace_bytes, 2 * 1100);
  EXPECT_EQ(table.Stage(2, 3, false).backward_workspace_bytes, 2 * 1200);
  EXPECT_EQ(table.Stage(0, 3, false).forward_workspace_bytes, 2 * 70);
  EXPECT_EQ(table.Stage(0, 1, false).forward_workspace_bytes, 0);
  // The split backward (I, W) keeps the graph: without its own measurements, the same figures
  // for each.
  EXPECT_EQ(table.Stage(0, 3, false).backward_input_workspace_bytes, 2 * 1250);
  EXPECT_EQ(table.Stage(0, 3, false).backward_weight_workspace_bytes, 2 * 1250);
  // A full backward has freed the activations of the layers after each one by the time that one
  // runs: layer 0's 1100 with layers 1 and 2's 300 + 400 gone, layer 1's 1250 with layer 2's gone.
  profile.layers[1].activation_bytes = 300;
  profile.layers[2].activation_bytes = 400;
  const LayerTable freed(profile, 2.0, Optimizer::kAdam);
  EXPECT_EQ(freed.Stage(0, 3, false).backward_workspace_bytes, 2 * 1200);  // the last layer's, now the largest
  EXPECT_EQ(freed.Stage(0, 2, false).backward_workspace_bytes, 2 * 1050);  // layer 0's 1100 - 300 < layer 1's
  EXPECT_EQ(freed.Stage(0, 3, false).backward_input_workspace_bytes, 2 * 1250);
  profile.layers[2].backward_workspace_bytes = 10;
  profile.layers[1].backward_workspace_bytes = 10;
  const LayerTable first_largest(profile, 2.0, Optimizer::kAdam);
  EXPECT_EQ(first_largest.Stage(0, 3, false).backward_workspace_bytes, 2 * (1100 - 300 - 400));
  // A stage that is not the model's last runs its backward from its output, which stays through
  // it, though it is part of its last layer's activations: layer 0's 1100 - 300, plus layer 1's
  // output, 200. (The model's last stage runs from the loss, whose node lets go of its output.)
  EXPECT_EQ(first_largest.Stage(0, 2, false).backward_workspace_bytes, 2 * (1100 - 300 + 200));
}

TEST(Memory, AForwardThatKeepsItsActivationsPeaksAboveTheStashOnlyByWhatTheLayersAfterItDoNotYetHold) {
  Profile profile = ProfileOfLayers({100, 100, 100});
  const int64_t activations[] = {1000, 300, 400};
  const int64_t workspaces[] = {900, 350, 20};
  for (size_t l = 0; l < 3; ++l) {
    profile.layers[l].activation_bytes = activations[l];
    profile.layers[l].forward_workspace_bytes = workspaces[l];
  }
  const LayerTable table(profile, 2.0, Optimizer::kAdam);  // micro-batches of 2: bytes double
  // The forward is priced from its start with the micro-batch's whole stash (1700). Layer 0
  // peaks 900 above its own 1000 while layers 1 and 2's 700 are not there yet: 200 above the
  // stash; layer 1, 350 - 400 below it; layer 2, 20 above.
  EXPECT_EQ(table.Stage(0, 3, false).forward_workspace_bytes, 2 * 200);
  EXPECT_EQ(table.Stage(1, 3, false).forward_workspace_bytes, 2 * 20);
  EXPECT_EQ(table.Stage(0, 1, false).forward_workspace_bytes, 2 * 900);
  // Recomputing, the forward keeps no activations: the largest layer's workspace on top.
  EXPECT_EQ(table.Stage(0, 3, true).forward_workspace_bytes, 2 * 900);
}

TEST(Memory, ALayerInsideAStageCostsItsInnerWorkspaceAndOnlyTheLastItsHeldOne) {
  Profile profile = ProfileOfLayers({100, 100});
  // Held: the gradient of the output on top of what the backward allocates (a conv block's
  // ReLU makes a new tensor, then batch norm and the convolution peak while the old one lives).
  for (LayerProfile& layer : profile.layers) layer.backward_workspace_bytes = 900;
  const LayerTable held(profile, 1.0, Optimizer::kAdam);  // without the inner figure: the held one
  EXPECT_EQ(held.Stage(0, 2, false).backward_workspace_bytes, 900 + 100);
  EXPECT_EQ(held.Stage(0, 2, false).backward_input_workspace_bytes, 900 + 100);
  // Handed to autograd, the gradient is gone before the peak: layer 0 inside the stage costs
  // 500 above that gradient, while the stage's last layer, holding what it received, costs 900.
  profile.layers[0].inner_backward_workspace_bytes = 500;
  profile.layers[1].inner_backward_workspace_bytes = 1;  // never used: layer 1 is last
  const LayerTable inner(profile, 3.0, Optimizer::kAdam);
  EXPECT_EQ(inner.Stage(0, 2, false).backward_workspace_bytes, 3 * 900);
  EXPECT_EQ(inner.Stage(0, 1, false).backward_workspace_bytes, 3 * 900);
  profile.layers[1].backward_workspace_bytes = 200;
  const LayerTable small_last(profile, 3.0, Optimizer::kAdam);
  EXPECT_EQ(small_last.Stage(0, 2, false).backward_workspace_bytes, 3 * (500 + 100));
  EXPECT_EQ(small_last.Stage(0, 2, false).backward_weight_workspace_bytes, 3 * (500 + 100));
  EXPECT_EQ(small_last.Stage(1, 2, false).backward_workspace_bytes, 3 * 200);
  // The stage's output is its stash's own tensor when it is one tensor and kept for the
  // backward: not under remat (the forward keeps nothing), still under partial remat.
  EXPECT_TRUE(small_last.Stage(0, 2, false).sent_output_in_stash);
  EXPECT_FALSE(small_last.Stage(0, 2, true).sent_output_in_stash);
  LayerTable::StageBuilder builder(small_last, 0);
  builder.Extend();
  builder.Extend();
  EXPECT_TRUE(builder.CostRecomputing(1).sent_output_in_stash);
  profile.layers[1].output_tensors = 3;  // packed into one message: a copy
  EXPECT_FALSE(LayerTable(profile, 3.0, Optimizer::kAdam).Stage(0, 2, false).sent_output_in_stash);
}

TEST(Memory, ASplitBackwardsIAndWArePricedFromTheirOwnMeasurements) {
  // Three layers, outputs 100, 200, 300; layer 1 has no parameters (a pooling layer).
  Profile profile = ProfileOfLayers({100, 200, 300});
  profile.layers[0].param_bytes = 10;
  profile.layers[2].param_bytes = 10;
  profile.layers[0].weight_pass_bytes = 100;  // a first layer: I captures its output's gradient
  profile.layers[2].weight_pass_bytes = 600;
  for (LayerProfile& layer : profile.layers) layer.backward_workspace_bytes = 5000;  // the fallback
  // I: layer 2 peaks 700 above its start (its 600 captures and a 100 temporary); layer 1 makes
  // its input's gradient, 100; layer 0 makes nothing (its captured gradient is the one it got).
  // W: layer 2 peaks 50 and frees 400 of saved tensors; layer 0 peaks 900 (its whole backward).
  // Letting go of layer 0's output frees 250 (cut: layer 2 above it has parameters), layer 1's 30.
  profile.layers[0].split_backward = SplitBackwardBytes{0, 250, 900, 0};
  profile.layers[1].split_backward = SplitBackwardBytes{100, 30, 0, 0};
  profile.layers[2].split_backward = SplitBackwardBytes{700, 0, 50, 400};
  const LayerTable table(profile, 1.0, Optimizer::kAdam);
  const StageCost all = table.Stage(0, 3, false);
  // With all 700 captures held from I's start: layer 2, 700 - 600 = 100 above; layer 1 holds its
  // output's gradient, 200, and makes 100, while layer 0's 100 is not captured yet: 200 + 100 - 100;
  // layer 0: its output's gradient (100), which becomes its capture, less that capture.
  EXPECT_EQ(all.backward_input_workspace_bytes, 200);
  // W: cut frees 250 + 30 at once; layer 2's 50, then layer 0's 900 with layer 2's 400 gone.
  EXPECT_EQ(all.backward_weight_workspace_bytes, 900 - 400 - 280);
  // A stage of layers 0 and 1 has no parameters above layer 0: nothing is cut, and nothing freed
  // before layer 0's W.
  EXPECT_EQ(table.Stage(0, 2, false).backward_weight_workspace_bytes, 900);
  // Layer 1's input gradient is layer 0's capture, held from I's start: nothing above that.
  EXPECT_EQ(table.Stage(0, 2, false).backward_input_workspace_bytes, 0);
  EXPECT_EQ(table.Stage(2, 3, false).backward_input_workspace_bytes, 100);
  EXPECT_EQ(table.Stage(2, 3, false).backward_weight_workspace_bytes, 50);
  // The builder's incremental answer is the same as the stage's from scratch.
  LayerTable::StageBuilder builder(table, 0);
  for (int l = 0; l < 3; ++l) builder.Extend();
  EXPECT_EQ(builder.Cost(false).backward_weight_workspace_bytes, all.backward_weight_workspace_bytes);
  // Layer 1's I measured as inside a stage, the gradient of its output handed to autograd: 50
  // above its start, that gradient included (freed once used). Inside the stage that prices it
  // 200 + 50 - 100; as a stage's last layer, it still holds the gradient it received: 100.
  profile.layers[1].inner_backward_input_peak_bytes = 50;
  const LayerTable handed(profile, 1.0, Optimizer::kAdam);
  EXPECT_EQ(handed.Stage(0, 3, false).backward_input_workspace_bytes, 150);
  EXPECT_EQ(handed.Stage(1, 2, false).backward_input_workspace_bytes, 100);
  EXPECT_EQ(handed.Stage(0, 3, false).backward_weight_workspace_bytes, all.backward_weight_workspace_bytes);
  profile.layers[1].inner_backward_input_peak_bytes.reset();
  // A layer that did not measure them: the full backward's workspace for I and W, as before.
  profile.layers[1].split_backward.reset();
  const LayerTable partly(profile, 1.0, Optimizer::kAdam);
  EXPECT_EQ(partly.Stage(0, 3, false).backward_input_workspace_bytes, 5000 + 200);
  EXPECT_EQ(partly.Stage(0, 3, false).backward_weight_workspace_bytes, 5000 + 200);
  EXPECT_EQ(partly.Stage(2, 3, false).backward_weight_workspace_bytes, 50);
}

TEST(Memory, StaticBytesFollowTheOptimizerAndThePrecision) {
  Plan plan;
  plan.profile.layers = {LayerProfile{"a", 1, 2, std::nullopt, 100, 10, 1}, LayerProfile{"b", 1, 2, std::nullopt, 300, 10, 1}};
  plan.cluster.devices = 2;
  plan.cluster.device_memory_bytes = 1 << 20;
  plan.cluster.link = Link{1e9, 0};
  plan.stages = {StagePlan{0, 1, 0, false}, StagePlan{1, 2, 1, false}};
  // Per parameter, as the executor holds it: fp32 weights 4, fp32 gradients 4, the optimizer's fp32
  // state (momentum 4, Adam 8) and, in 16 bits, autocast's copy of the weights 2. An fp32 profile
  // counts 4 bytes a parameter, a 16-bit one 2.
  struct Case {
    const char* dtype;
    Optimizer optimizer;
    double bytes_per_parameter;
  };
  const Case cases[] = {{"fp32", Optimizer::kSgd, 8},       {"fp32", Optimizer::kMomentum, 12},
                        {"fp32", Optimizer::kAdam, 16},     {"fp32", Optimizer::kAdamMixed, 16},
                        {"bf16", Optimizer::kSgd, 10},      {"bf16", Optimizer::kMomentum, 14},
                        {"bf16", Optimizer::kAdam, 18},     {"bf16", Optimizer::kAdamMixed, 18},
                        {"fp16", Optimizer::kAdamMixed, 18}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.dtype) + " " + OptimizerName(c.optimizer));
    plan.profile.dtype = c.dtype;
    plan.optimizer = c.optimizer;
    const double factor = c.bytes_per_parameter / BytesPerParameter(c.dtype);
    Expected<CostModel> costs = BuildCostModel(plan);
    ASSERT_TRUE(costs.ok());
    EXPECT_DOUBLE_EQ(costs->stages[0].static_bytes, 100 * factor);
    EXPECT_DOUBLE_EQ(costs->stages[1].static_bytes, 300 * factor);
  }
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

TEST(MemoryFrontier, PricesAStageAsTheWalkDoes) {
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int ranks : {1, 2, 4}) {
      for (int microbatches : {4, 8}) {
        if (!CheckMicrobatchCount(kind, ranks, microbatches).ok()) continue;
        const int stages = StageCount(kind, ranks, 2);
        Expected<Schedule> compute = GenerateSchedule(kind, ranks, stages, microbatches);
        const Schedule schedule = AddCommunication(*compute);
        for (int r = 0; r < ranks; ++r) {
          const MemoryFrontier frontier(schedule, r);
          // Priced more often than it replays the walk, so that both ways are checked, and with
          // remat on and off (one frontier serves both).
          for (int trial = 0; trial < 12; ++trial) {
            std::vector<StageCost> costs(stages);
            for (int s = 0; s < stages; ++s) {
              costs[s].remat = (s + microbatches + trial) % 3 == 0;
              costs[s].activation_bytes = 1000 + 37 * s + ((trial * 7919 + s * 104729) % 3000);
              costs[s].input_bytes = 11 + s + 400 * (trial % 3);
              costs[s].output_bytes = 13 + 2 * s + 700 * (trial % 4);
              costs[s].static_bytes = 500;
              costs[s].sends_held = (trial / 2) % 2 == 1;
              costs[s].sent_output_in_stash = (trial + s) % 3 != 0;
              costs[s].forward_workspace_bytes = trial % 3 == 1 ? 300 + 5 * s : 0;
              costs[s].backward_workspace_bytes = trial % 4 >= 2 ? 2500 + 17 * s : 0;
              costs[s].weight_pass_bytes = trial % 5 >= 2 ? 800 + 3 * s : 0;
              costs[s].backward_input_workspace_bytes = trial % 3 == 2 ? 2900 + 11 * s : 0;
              costs[s].backward_weight_workspace_bytes = trial % 4 == 1 ? 3100 - 13 * s : 0;
            }
            const MemoryPeak walk = RankMemoryPeak(schedule, r, costs);
            std::vector<const StageCost*> mine;
            for (int s = 0; s < stages; ++s) {
              if (schedule.stage_rank[s] == r) mine.push_back(&costs[s]);
            }
            EXPECT_DOUBLE_EQ(walk.static_bytes + frontier.PeakDynamicBytes(mine), walk.peak_bytes)
                << ScheduleName(kind) << " K=" << ranks << " M=" << microbatches << " r=" << r << " trial " << trial;
            EXPECT_EQ(frontier.max_in_flight(), walk.max_in_flight);
          }
          // A few dozen candidates, not one per action (the workspaces add some; two stages per
          // rank add more).
          const bool one = LayoutOf(kind) == StageLayout::kOnePerRank;
          EXPECT_LE(frontier.size(/*workspaces=*/false), one ? 32u : 40u);
          EXPECT_LE(frontier.size(/*workspaces=*/true), one ? 48u : 64u);
        }
      }
    }
  }
}

// Ranks whose maximal moments are too many to keep (rank 0 of the interleaved and V-shaped
// schedules at M = 64: hundreds of vectors, most moments maximal) price by replaying the walk
// every time: the same peaks as the walk, and that peak equal to the stash bound (its set of
// three counts a stage kept) where only stashes, recomputes and input buffers cost memory.
TEST(MemoryFrontier, RanksWithTooManyMomentsToKeepPriceAsTheWalkDoes) {
  for (ScheduleKind kind : {ScheduleKind::kInterleaved1F1B, ScheduleKind::kInterleavedZb, ScheduleKind::kZbV,
                            ScheduleKind::kDualPipeV}) {
    const int ranks = 4, microbatches = 64;
    const int stages = StageCount(kind, ranks, LayoutOf(kind) == StageLayout::kLoop ? 4 : 2);
    const Schedule schedule = AddCommunication(*GenerateSchedule(kind, ranks, stages, microbatches));
    const MemoryFrontier frontier(schedule, 0);
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<StageCost> costs(stages);
      for (int s = 0; s < stages; ++s) {
        costs[s].remat = (s + trial) % 3 == 0;
        costs[s].activation_bytes = 1000 + 37 * s + ((trial * 7919 + s * 104729) % 3000);
        costs[s].input_bytes = 11 + s + 400 * (trial % 3);
        costs[s].output_bytes = 13 + 2 * s + 700 * (trial % 4);
        costs[s].sends_held = (trial / 2) % 2 == 1;
        costs[s].weight_pass_bytes = trial % 5 >= 2 ? 800 + 3 * s : 0;
        costs[s].backward_workspace_bytes = trial % 4 >= 2 ? 2500 + 17 * s : 0;
      }
      const MemoryPeak walk = RankMemoryPeak(schedule, 0, costs);
      std::vector<const StageCost*> mine;
      for (int s = 0; s < stages; ++s) {
        if (schedule.stage_rank[s] == 0) mine.push_back(&costs[s]);
      }
      EXPECT_DOUBLE_EQ(walk.static_bytes + frontier.PeakDynamicBytes(mine), walk.peak_bytes)
          << ScheduleName(kind) << " trial " << trial;
    }
    EXPECT_FALSE(frontier.keeps_vectors(/*workspaces=*/false)) << ScheduleName(kind);
    EXPECT_FALSE(frontier.keeps_vectors(/*workspaces=*/true)) << ScheduleName(kind);
    // Only stashes, recomputes and input buffers: the stash bound is the peak.
    std::vector<StageCost> costs(stages);
    for (int s = 0; s < stages; ++s) {
      costs[s].remat = s % 2 == 0;
      costs[s].activation_bytes = 1000 + 37 * s;
      costs[s].input_bytes = 11 + s;
    }
    std::vector<const StageCost*> mine;
    for (int s = 0; s < stages; ++s) {
      if (schedule.stage_rank[s] == 0) mine.push_back(&costs[s]);
    }
    EXPECT_DOUBLE_EQ(frontier.LeastStashPeakBytes(mine.data(), mine.data()), frontier.PeakDynamicBytes(mine))
        << ScheduleName(kind);
    EXPECT_GT(frontier.size(/*workspaces=*/false), 128u) << ScheduleName(kind);  // (builds it whole)
  }
}

// The papers' memory claims for the V-shaped schedules, on a model of uniform layers cut into
// 2K chunks of activation a (K stages of 2a for 1F1B):
//   - ZB-V (Qi et al. 2024, section 6): the same peak activation memory as 1F1B, K micro-batches
//     of a rank's 2a, on its busiest rank;
//   - DualPipe (DeepSeek-V3): 2x a chunk's parameters on every rank (the V holds two chunks).
TEST(Memory, VShapedSchedulesHoldWhatTheirPapersSay) {
  constexpr double kChunkActivation = 100, kChunkStatic = 1000;
  for (int ranks : {2, 3, 4}) {
    for (int microbatches : {2 * ranks, 2 * ranks + 1, 4 * ranks}) {
      const auto peaks = [&](ScheduleKind kind, int stages, double activation) {
        CostModel costs = UniformCostModel(ranks, stages, 1.0, 2.0, 0.5);
        for (StageCost& c : costs.stages) {
          c.activation_bytes = activation;
          c.static_bytes = kChunkStatic * 2 * ranks / stages;
          c.input_bytes = c.output_bytes = 0;
        }
        const Schedule schedule = AddCommunication(*GenerateSchedule(kind, ranks, stages, microbatches));
        std::vector<MemoryPeak> out;
        for (int r = 0; r < ranks; ++r) out.push_back(RankMemoryPeak(schedule, r, costs.stages));
        return out;
      };
      const std::vector<MemoryPeak> one = peaks(ScheduleKind::k1F1B, ranks, 2 * kChunkActivation);
      const std::vector<MemoryPeak> v = peaks(ScheduleKind::kZbV, 2 * ranks, kChunkActivation);
      double most_1f1b = 0, most_v = 0;
      for (int r = 0; r < ranks; ++r) {
        most_1f1b = std::max(most_1f1b, one[r].activation_bytes);
        most_v = std::max(most_v, v[r].activation_bytes);
      }
      const std::string at = "K=" + std::to_string(ranks) + " M=" + std::to_string(microbatches);
      EXPECT_EQ(most_1f1b, ranks * 2 * kChunkActivation) << at;
      EXPECT_EQ(most_v, most_1f1b) << at;
      for (const MemoryPeak& rank : peaks(ScheduleKind::kDualPipeV, 2 * ranks, kChunkActivation)) {
        EXPECT_EQ(rank.static_bytes, 2 * kChunkStatic) << at;
      }
    }
  }
}

}  // namespace
}  // namespace gpipe
