// Timelines of one training step and their Chrome trace-event form (chrome://tracing, Perfetto).
// A Timeline is what a step looked like, whoever saw it: Simulate fills one now, and the
// executor's measured runs can fill the same struct later, so both draw with the same tools.
//
// The trace has one process (pid 0). Each rank r is thread r ("rank r"): its compute actions as
// complete events named by their action text ("1B3", cat = op name, args {stage, microbatch}),
// the recomputed forward of a remat backward as a nested "recompute" event, receives that waited
// as "wait <action>" events (cat "wait") and sends as instant events. Each directed link used is a
// thread of its own, tid >= 1000 ("link a->b"), with one complete event per message from send to
// arrival; messages that overlap on a link (a new one on the wire while the last is still in its
// latency) go on a second track ("link a->b #2") so that every track nests cleanly. Memory is one
// counter per rank ("memory rank r", args {bytes}). Times are microseconds (ts = ms * 1000).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/files.h"
#include "core/run_record.h"
#include "core/status.h"
#include "simulator/simulator.h"

namespace gpipe {

/// One step over all ranks: what ran where and when, what crossed each link, memory over time.
struct Timeline {
  /// A line naming what this is, e.g. "simulated: gpt3-13b, 1f1b, K=4, M=16".
  std::string title;
  int num_ranks = 0;
  std::vector<ActionTiming> actions;
  std::vector<Transfer> transfers;
  /// memory[r]: rank r's memory samples in time order (empty when not recorded).
  std::vector<std::vector<MemorySample>> memory;
  /// Lane r's label; "rank r" when absent.
  std::vector<std::string> lane_names;

  std::string LaneName(int r) const;
};

/// `top` above `bottom` on one time axis: bottom's ranks follow top's, lanes labeled
/// "<top_label> r" and "<bottom_label> r" (e.g. "sim 0" and "run 0").
Timeline StackTimelines(const Timeline& top, const std::string& top_label, const Timeline& bottom,
                        const std::string& bottom_label, std::string title);

/// The timeline of a simulated step. REQUIRES: `result` was simulated with record_timeline.
Timeline TimelineFromSim(const SimResult& result, std::string title);

/// The timeline of step `step` of a measured run, in the same layout: each rank's actions (the
/// record's ranks are the pipeline's ranks of replica 0; other replicas are left out), with the
/// recomputed forwards; no link tracks (the executor records when a receive was waited for, as
/// RECV actions on the rank's track, not when bytes were on the wire); memory from the actions' recorded
/// bytes (each action's peak at its start, what it left at its end) when the record has them.
Timeline TimelineFromRecord(const RunRecord& record, int step, std::string title);

/// The Chrome trace-event JSON object {"traceEvents": [...], "displayTimeUnit": "ms",
/// "otherData": {"title": ...}}. Same timeline, same JSON.
nlohmann::json TimelineToChromeTrace(const Timeline& t);

/// Writes TimelineToChromeTrace(t) to `path` atomically; errors name the path.
Status WriteChromeTrace(const std::string& path, const Timeline& t);

}  // namespace gpipe
