// How late a rank runs once its message arrives, while every core of the node is computing. On a
// CPU a rank waiting for a message sleeps; when the message comes and the other ranks keep all
// cores busy, the woken rank, which has used its share of the cores, runs only when the scheduler
// takes a core from one of them. On the 2-core machine that is either at once or about 2 ms later
// (the scheduler's slice): on average 0.38-1.79 ms in seven runs of profile-links (600 wake-ups
// each), 0.41-0.53 ms in six runs alone (1,000 each). The probe keeps one thread per core
// spinning, as ranks computing would; a reader thread computes an action's worth, sleeps in
// read() on a pipe, and the first spinner to see it asleep writes its clock there. Pure POSIX (no LibTorch): `profile-links` runs it and stores the result in the
// cluster file ("saturated_wakeup", docs/formats.md); the simulator adds its mean to a message
// that reaches a waiting rank while the node's cores are all busy (simulator/cost_model.h).
#pragma once

#include "core/cluster.h"
#include "core/status.h"

namespace gpipe::executor {

struct WakeupProbeSettings {
  /// Threads that keep the cores busy; 0: one per hardware thread.
  int spinners = 0;
  /// Wake-ups timed.
  int samples = 600;
  /// What the reader computes before each wait (an action's worth).
  double interval_ms = 2.0;
};

/// The wake-ups' mean, median, half interquartile range, where the slowest tenth starts and their
/// count, as the cluster file stores them.
Expected<SaturatedWakeup> ProbeSaturatedWakeup(const WakeupProbeSettings& settings);

}  // namespace gpipe::executor
