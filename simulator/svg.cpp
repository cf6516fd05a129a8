// The SVG Gantt chart of a Timeline. Layout, top to bottom: title (and step time), legend, then per
// rank a compute lane and a thin lane of the messages it sends, then the time axis. Time maps
// linearly onto the plot from 0 to the last thing that happens; the memory sparklines at the right
// share that time range and one byte scale (the smallest to the largest sample over all ranks).
#include "simulator/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <set>
#include <vector>

namespace gpipe {
namespace {

constexpr double kWidth = 1200;
constexpr double kLeft = 72;                         // plot starts here; rank labels to its left
constexpr double kSparkWidth = 80;
constexpr double kRight = kWidth - 160;              // plot ends here; sparklines to its right
constexpr double kSparkLeft = kRight + 20;
constexpr double kTop = 76;                          // first lane
constexpr double kLaneHeight = 24;
constexpr double kLinkGap = 3;
constexpr double kLinkHeight = 6;
constexpr double kRankPitch = kLaneHeight + kLinkGap + kLinkHeight + 12;
constexpr double kMinLabelWidth = 14;                // px a bar needs to show its micro-batch

struct OpStyle {
  const char* fill;
  const char* text;
  const char* label;
};

OpStyle StyleOf(Op op) {
  switch (op) {
    case Op::kForward: return {"#4c78a8", "#ffffff", "forward"};
    case Op::kBackward: return {"#54a24b", "#ffffff", "backward"};
    case Op::kBackwardInput: return {"#a3d68f", "#1e3d17", "backward (input)"};
    case Op::kBackwardWeight: return {"#2b6230", "#ffffff", "backward (weight)"};
    case Op::kSendActivation:
    case Op::kRecvActivation: return {"#a9bdd3", "#000000", "activation sent"};
    case Op::kSendGradient:
    case Op::kRecvGradient: return {"#bccaa6", "#000000", "gradient sent"};
  }
  return {"#999999", "#000000", "?"};
}

std::string Num(double value, int decimals = 2) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

std::string Bytes(double bytes) {
  if (bytes >= 1024.0 * 1024 * 1024) return Num(bytes / (1024.0 * 1024 * 1024)) + " GiB";
  if (bytes >= 1024.0 * 1024) return Num(bytes / (1024.0 * 1024), 1) + " MiB";
  if (bytes >= 1024.0) return Num(bytes / 1024.0, 1) + " KiB";
  return Num(bytes, 0) + " B";
}

// XML text: markup characters as entities, control characters (not allowed in XML) as spaces.
std::string Escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return out;
}

std::string Rect(double x, double y, double w, double h, const std::string& fill,
                 const std::string& extra = "", const std::string& tooltip = "") {
  std::string s = "<rect x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" width=\"" + Num(w) +
                  "\" height=\"" + Num(h) + "\" fill=\"" + fill + "\"" + extra;
  if (tooltip.empty()) return s + "/>\n";
  return s + "><title>" + Escape(tooltip) + "</title></rect>\n";
}

std::string Text(double x, double y, std::string_view text, const std::string& attributes = "") {
  return "<text x=\"" + Num(x) + "\" y=\"" + Num(y) + "\"" + attributes + ">" + Escape(text) +
         "</text>\n";
}

std::string Line(double x1, double y1, double x2, double y2, const std::string& stroke) {
  return "<line x1=\"" + Num(x1) + "\" y1=\"" + Num(y1) + "\" x2=\"" + Num(x2) + "\" y2=\"" +
         Num(y2) + "\" stroke=\"" + stroke + "\"/>\n";
}

// A round step (1, 2 or 5 times a power of ten) giving about `count` ticks over [0, range].
double TickStep(double range, int count) {
  const double raw = range / count;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * magnitude;
}

class Chart {
 public:
  explicit Chart(const Timeline& t)
      : t_(t), stages_(std::max(t.num_ranks, 0)) {
    for (const ActionTiming& a : t.actions) {
      end_ms_ = std::max(end_ms_, a.end_ms);
      if (Valid(a.rank) && IsCompute(a.action.op)) stages_[a.rank].insert(a.action.stage);
    }
    for (const Transfer& x : t.transfers) end_ms_ = std::max(end_ms_, x.arrival_ms);
    for (const auto& samples : t.memory) {
      for (const MemorySample& m : samples) end_ms_ = std::max(end_ms_, m.time_ms);
    }
    span_ms_ = end_ms_ > 0 ? end_ms_ : 1.0;
    scale_ = (kRight - kLeft) / span_ms_;
  }

  std::string Draw() {
    const double axis_y = kTop + t_.num_ranks * kRankPitch - 6;
    const double height = axis_y + 40;
    out_ = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Num(kWidth, 0) + "\" height=\"" +
           Num(height, 0) + "\" viewBox=\"0 0 " + Num(kWidth, 0) + " " + Num(height, 0) +
           "\" font-family=\"sans-serif\" font-size=\"11\">\n"
           "<defs><pattern id=\"hatch\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\" "
           "patternTransform=\"rotate(45)\"><rect width=\"2\" height=\"5\" fill=\"#000000\" "
           "fill-opacity=\"0.4\"/></pattern></defs>\n";
    out_ += Rect(0, 0, kWidth, height, "#ffffff");
    out_ += Text(16, 24, t_.title, " font-size=\"15\" font-weight=\"bold\"");
    out_ += Text(kWidth - 16, 24, "step " + Num(end_ms_) + " ms", " text-anchor=\"end\"");
    Legend();
    for (int r = 0; r < t_.num_ranks; ++r) {
      out_ += Rect(kLeft, LaneY(r), kRight - kLeft, kLaneHeight, "#f2f2f2");
      out_ += Rect(kLeft, LaneY(r) + kLaneHeight + kLinkGap, kRight - kLeft, kLinkHeight, "#f8f8f8");
      out_ += Text(kLeft - 8, LaneY(r) + kLaneHeight / 2 + 4, t_.LaneName(r),
                   " text-anchor=\"end\"");
      out_ += Text(kLeft - 8, LaneY(r) + kLaneHeight + kLinkGap + kLinkHeight, "sends",
                   " text-anchor=\"end\" font-size=\"8\" fill=\"#888888\"");
    }
    Axis(axis_y);
    for (const ActionTiming& a : t_.actions) Action(a);
    for (const Transfer& x : t_.transfers) Message(x);
    Sparklines();
    return out_ + "</svg>\n";
  }

 private:
  bool Valid(int rank) const { return rank >= 0 && rank < t_.num_ranks; }
  double X(double ms) const { return kLeft + ms * scale_; }
  static double LaneY(int rank) { return kTop + rank * kRankPitch; }

  void Legend() {
    std::set<Op> ops;
    bool remat = false;
    for (const ActionTiming& a : t_.actions) {
      if (IsCompute(a.action.op)) ops.insert(a.action.op);
      remat = remat || a.recompute_ms > 0;
    }
    for (const Transfer& x : t_.transfers) ops.insert(x.send.op);
    double x = kLeft;
    const auto item = [&](const char* fill, const std::string& label, bool hatched) {
      out_ += Rect(x, 40, 12, 12, fill);
      if (hatched) out_ += Rect(x, 40, 12, 12, "url(#hatch)");
      out_ += Text(x + 16, 50, label);
      x += 16 + 6.2 * static_cast<double>(label.size()) + 10;
    };
    for (Op op : ops) item(StyleOf(op).fill, StyleOf(op).label, false);
    if (remat) item(StyleOf(Op::kBackward).fill, "recompute", true);
    std::string note = "blank = idle (bubble)";
    if (std::any_of(stages_.begin(), stages_.end(), [](const auto& s) { return s.size() > 1; })) {
      note += "; lighter = later stage on the same rank";
    }
    out_ += Text(x, 50, note, " fill=\"#555555\"");
  }

  void Axis(double y) {
    out_ += Line(kLeft, y, kRight, y, "#444444");
    const double step = TickStep(span_ms_, 8);
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step))));
    for (int i = 0; i * step <= span_ms_ * (1 + 1e-9); ++i) {
      const double x = X(i * step);
      out_ += Line(x, kTop - 2, x, y + 4, "#dddddd");
      out_ += Text(x, y + 16, Num(i * step, decimals), " text-anchor=\"middle\"");
    }
    out_ += Text(kRight, y + 32, "time (ms)", " text-anchor=\"end\" fill=\"#555555\"");
  }

  void Action(const ActionTiming& a) {
    if (!Valid(a.rank) || !IsCompute(a.action.op) || a.end_ms <= a.start_ms) return;
    const OpStyle style = StyleOf(a.action.op);
    const double x = X(a.start_ms), w = (a.end_ms - a.start_ms) * scale_, y = LaneY(a.rank);
    const auto& stages = stages_[a.rank];
    const auto chunk = std::distance(stages.begin(), stages.find(a.action.stage));
    const double fade = stages.size() > 1 ? 0.4 * static_cast<double>(chunk) /
                                                static_cast<double>(stages.size() - 1) : 0.0;
    const std::string extra =
        " stroke=\"#ffffff\" stroke-width=\"0.5\" fill-opacity=\"" + Num(1.0 - fade) + "\"";
    std::string tip = ActionToText(a.action) + " stage " + std::to_string(a.action.stage) + " mb " +
                      std::to_string(a.action.microbatch) + ", " + Num(a.start_ms, 3) + "-" +
                      Num(a.end_ms, 3) + " ms";
    if (a.recompute_ms > 0) tip += " (recompute " + Num(a.recompute_ms, 3) + " ms)";
    // One group, so the tooltip shows over the bar, its hatching and its label alike.
    out_ += "<g><title>" + Escape(tip) + "</title>\n" + Rect(x, y, w, kLaneHeight, style.fill, extra);
    const double hatched = std::min(a.recompute_ms * scale_, w);
    if (hatched > 0) out_ += Rect(x, y, hatched, kLaneHeight, "url(#hatch)");
    // The label sits in the plain part of a remat bar when that part has room for it.
    const double label_x = w - hatched >= kMinLabelWidth ? x + (w + hatched) / 2 : x + w / 2;
    if (w >= kMinLabelWidth) {
      out_ += Text(label_x, y + kLaneHeight / 2 + 4, std::to_string(a.action.microbatch),
                   std::string(" text-anchor=\"middle\" fill=\"") + style.text + "\"");
    }
    out_ += "</g>\n";
  }

  // A message as a thin bar in its sender's link lane: solid on the wire, faint in latency.
  void Message(const Transfer& m) {
    if (!Valid(m.from_rank)) return;
    const double y = LaneY(m.from_rank) + kLaneHeight + kLinkGap;
    const std::string tip = ActionToText(m.send) + " rank " + std::to_string(m.from_rank) + "->" +
                            std::to_string(m.to_rank) + ", " + Bytes(m.bytes) + ", " +
                            Num(m.start_ms, 3) + "-" + Num(m.arrival_ms, 3) + " ms";
    const char* fill = StyleOf(m.send.op).fill;
    out_ += Rect(X(m.start_ms), y, std::max((m.wire_end_ms - m.start_ms) * scale_, 1.0),
                 kLinkHeight, fill, "", tip);
    if (m.arrival_ms > m.wire_end_ms) {
      out_ += Rect(X(m.wire_end_ms), y, (m.arrival_ms - m.wire_end_ms) * scale_, kLinkHeight, fill,
                   " fill-opacity=\"0.35\"", tip);
    }
  }

  // Step lines of memory over time, one per rank, on one byte scale for all ranks.
  void Sparklines() {
    double low = HUGE_VAL, high = 0;
    for (const auto& samples : t_.memory) {
      for (const MemorySample& m : samples) {
        low = std::min(low, m.bytes);
        high = std::max(high, m.bytes);
      }
    }
    if (high < low) return;  // no samples
    const double range = high > low ? high - low : 1.0;
    out_ += Text(kSparkLeft, kTop - 6, "memory", " fill=\"#555555\"");
    for (int r = 0; r < t_.num_ranks && r < static_cast<int>(t_.memory.size()); ++r) {
      const auto& samples = t_.memory[r];
      if (samples.empty()) continue;
      const double top = LaneY(r) + 2, h = kLaneHeight - 4;
      const auto sx = [&](double ms) { return Num(kSparkLeft + ms / span_ms_ * kSparkWidth); };
      const auto sy = [&](double bytes) { return Num(top + h - (bytes - low) / range * h); };
      std::string points;
      const MemorySample* peak = &samples.front();
      for (size_t i = 0; i < samples.size(); ++i) {
        const double next = i + 1 < samples.size() ? samples[i + 1].time_ms : span_ms_;
        points += sx(samples[i].time_ms) + "," + sy(samples[i].bytes) + " " + sx(next) + "," +
                  sy(samples[i].bytes) + " ";
        if (samples[i].bytes > peak->bytes) peak = &samples[i];
      }
      points.pop_back();
      out_ += Rect(kSparkLeft, top, kSparkWidth, h, "#f6f6f6", "",
                   t_.LaneName(r) + " memory: peak " + Bytes(peak->bytes) + " at " +
                       Num(peak->time_ms, 3) + " ms");
      out_ += "<polyline points=\"" + points +
              "\" fill=\"none\" stroke=\"#b05a2a\" stroke-width=\"1.2\"/>\n";
      out_ += Text(kSparkLeft + kSparkWidth + 4, top + h / 2 + 4, Bytes(peak->bytes),
                   " font-size=\"9\" fill=\"#555555\"");
    }
  }

  const Timeline& t_;
  double end_ms_ = 0;   // when the last thing happens
  double span_ms_ = 1;  // the time the plot spans (end_ms_, or 1 ms for an empty timeline)
  double scale_ = 1;    // px per ms
  std::vector<std::set<int>> stages_;  // per rank: the stages it computes, in order
  std::string out_;
};

}  // namespace

std::string TimelineToSvg(const Timeline& t) { return Chart(t).Draw(); }

Status WriteSvg(const std::string& path, const Timeline& t) {
  return WriteFileAtomically(path, TimelineToSvg(t));
}

}  // namespace gpipe
