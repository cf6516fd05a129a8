// Chrome trace-event export of a Timeline, and the atomic file write shared with the SVG writer.
// Events are emitted in a fixed order (metadata, then each rank's actions by start time, then
// links, then memory), so the same timeline always gives the same file.
#include "simulator/trace.h"

#include <algorithm>
#include <map>
#include <utility>

namespace gpipe {
namespace {

using nlohmann::json;

constexpr int kFirstLinkTid = 1000;

double Us(double ms) { return ms * 1000.0; }

json Metadata(const char* name, int tid, json args) {
  return {{"name", name}, {"ph", "M"}, {"pid", 0}, {"tid", tid}, {"args", std::move(args)}};
}

void NameTrack(json& events, int tid, const std::string& name) {
  events.push_back(Metadata("thread_name", tid, {{"name", name}}));
  events.push_back(Metadata("thread_sort_index", tid, {{"sort_index", tid}}));
}

json Complete(const std::string& name, std::string_view cat, int tid, double start_ms,
              double dur_ms, json args) {
  return {{"name", name},     {"cat", cat},         {"ph", "X"},
          {"pid", 0},         {"tid", tid},         {"ts", Us(start_ms)},
          {"dur", Us(dur_ms)}, {"args", std::move(args)}};
}

void AddAction(json& events, const ActionTiming& a) {
  const std::string text = ActionToText(a.action);
  const std::string_view cat = OpName(a.action.op);
  const json args = {{"stage", a.action.stage}, {"microbatch", a.action.microbatch}};
  const double dur = a.end_ms - a.start_ms;
  if (IsCompute(a.action.op)) {
    // The parent comes first: at equal timestamps, viewers nest later events inside earlier ones.
    events.push_back(Complete(text, cat, a.rank, a.start_ms, dur, args));
    if (a.recompute_ms > 0) {
      events.push_back(Complete("recompute", "recompute", a.rank, a.start_ms,
                                std::min(a.recompute_ms, dur), args));
    }
  } else if (IsRecv(a.action.op)) {
    if (dur > 0) events.push_back(Complete("wait " + text, "wait", a.rank, a.start_ms, dur, args));
  } else {
    events.push_back({{"name", text}, {"cat", cat}, {"ph", "i"}, {"s", "t"}, {"pid", 0},
                      {"tid", a.rank}, {"ts", Us(a.start_ms)}, {"args", args}});
  }
}

// Splits each directed link's messages into as few tracks as keep every track free of partial
// overlaps, first fit in order of start, and emits them; links in (from, to) order.
void AddTransfers(json& events, const Timeline& t) {
  std::map<std::pair<int, int>, std::vector<const Transfer*>> links;
  for (const Transfer& x : t.transfers) links[{x.from_rank, x.to_rank}].push_back(&x);
  int next_tid = kFirstLinkTid;
  for (auto& [link, messages] : links) {
    std::stable_sort(messages.begin(), messages.end(),
                     [](const Transfer* a, const Transfer* b) { return a->start_ms < b->start_ms; });
    std::vector<double> track_end;  // when each track's last message arrives
    std::vector<int> track_tid;
    for (const Transfer* x : messages) {
      size_t track = 0;
      while (track < track_end.size() && track_end[track] > x->start_ms) ++track;
      if (track == track_end.size()) {
        track_end.push_back(0.0);
        track_tid.push_back(next_tid++);
        std::string name = "link " + std::to_string(link.first) + "->" + std::to_string(link.second);
        if (track > 0) name += " #" + std::to_string(track + 1);
        NameTrack(events, track_tid.back(), name);
      }
      track_end[track] = x->arrival_ms;
      events.push_back(Complete(ActionToText(x->send), OpName(x->send.op), track_tid[track],
                                x->start_ms, x->arrival_ms - x->start_ms,
                                {{"bytes", x->bytes}, {"wire_end_ms", x->wire_end_ms}}));
    }
  }
}

}  // namespace

Timeline TimelineFromSim(const SimResult& result, std::string title) {
  Timeline t;
  t.title = std::move(title);
  t.num_ranks = static_cast<int>(result.ranks.size());
  t.actions = result.actions;
  t.transfers = result.transfers;
  t.memory.reserve(result.ranks.size());
  for (const RankResult& rank : result.ranks) t.memory.push_back(rank.memory);
  return t;
}

std::string Timeline::LaneName(int r) const {
  return r < static_cast<int>(lane_names.size()) ? lane_names[r] : "rank " + std::to_string(r);
}

Timeline StackTimelines(const Timeline& top, const std::string& top_label, const Timeline& bottom,
                        const std::string& bottom_label, std::string title) {
  Timeline t;
  t.title = std::move(title);
  t.num_ranks = top.num_ranks + bottom.num_ranks;
  t.actions = top.actions;
  t.transfers = top.transfers;
  for (ActionTiming a : bottom.actions) {
    a.rank += top.num_ranks;
    t.actions.push_back(a);
  }
  for (Transfer m : bottom.transfers) {
    m.from_rank += top.num_ranks;
    m.to_rank += top.num_ranks;
    t.transfers.push_back(m);
  }
  t.memory = top.memory;
  t.memory.resize(top.num_ranks);
  t.memory.insert(t.memory.end(), bottom.memory.begin(), bottom.memory.end());
  for (int r = 0; r < top.num_ranks; ++r) t.lane_names.push_back(top_label + " " + std::to_string(r));
  for (int r = 0; r < bottom.num_ranks; ++r) t.lane_names.push_back(bottom_label + " " + std::to_string(r));
  return t;
}

Timeline TimelineFromRecord(const RunRecord& record, int step, std::string title) {
  Timeline t;
  t.title = std::move(title);
  for (const RankRecord& rank : record.ranks) {
    if (rank.replica != 0) continue;
    t.num_ranks = std::max(t.num_ranks, rank.pipeline_rank + 1);
    std::vector<MemorySample> memory;
    for (const ActionRecord& a : rank.actions) {
      if (a.step != step) continue;
      t.actions.push_back({rank.pipeline_rank, a.action, a.start_ms, a.end_ms, a.recompute_ms});
      // Recorded memory: the action's peak while it ran, then what it left.
      if (a.peak_memory_bytes >= 0) memory.push_back({a.start_ms, static_cast<double>(a.peak_memory_bytes)});
      if (a.memory_bytes >= 0) memory.push_back({a.end_ms, static_cast<double>(a.memory_bytes)});
    }
    if (!memory.empty()) {
      if (static_cast<int>(t.memory.size()) <= rank.pipeline_rank) t.memory.resize(rank.pipeline_rank + 1);
      t.memory[rank.pipeline_rank] = std::move(memory);
    }
  }
  return t;
}

json TimelineToChromeTrace(const Timeline& t) {
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"args", {{"name", t.title}}}});
  for (int r = 0; r < t.num_ranks; ++r) NameTrack(events, r, t.LaneName(r));

  std::vector<const ActionTiming*> actions;
  actions.reserve(t.actions.size());
  for (const ActionTiming& a : t.actions) actions.push_back(&a);
  std::stable_sort(actions.begin(), actions.end(), [](const ActionTiming* a, const ActionTiming* b) {
    return a->rank != b->rank ? a->rank < b->rank : a->start_ms < b->start_ms;
  });
  for (const ActionTiming* a : actions) AddAction(events, *a);

  AddTransfers(events, t);

  for (size_t r = 0; r < t.memory.size(); ++r) {
    const std::string name = "memory " + t.LaneName(static_cast<int>(r));
    for (const MemorySample& m : t.memory[r]) {
      events.push_back({{"name", name}, {"ph", "C"}, {"pid", 0}, {"tid", static_cast<int>(r)},
                        {"ts", Us(m.time_ms)}, {"args", {{"bytes", m.bytes}}}});
    }
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"title", t.title}}}};
}

Status WriteChromeTrace(const std::string& path, const Timeline& t) {
  return WriteFileAtomically(path, TimelineToChromeTrace(t).dump() + "\n");
}

}  // namespace gpipe
