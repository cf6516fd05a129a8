// A deterministic event queue: events pop in order of (time, sequence number), so events at the
// same time run in the order they were pushed and every run gives the same result, bit for bit
// (the rule of ns-3's scheduler). Events are typed values, not callbacks.
#pragma once

#include <cstdint>
#include <queue>
#include <vector>

namespace gpipe {

template <typename Event>
class EventQueue {
 public:
  void Push(double time_ms, Event event) { heap_.push(Entry{time_ms, next_seq_++, event}); }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  /// REQUIRES: !empty().
  double top_time() const { return heap_.top().time_ms; }
  /// Removes and returns the earliest event. REQUIRES: !empty().
  Event Pop() {
    Event event = heap_.top().event;
    heap_.pop();
    return event;
  }

 private:
  struct Entry {
    double time_ms;
    uint64_t seq;
    Event event;
  };
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.time_ms != b.time_ms ? a.time_ms > b.time_ms : a.seq > b.seq;
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, Later> heap_;
  uint64_t next_seq_ = 0;
};

}  // namespace gpipe
