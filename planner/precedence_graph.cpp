#include "planner/precedence_graph.h"

#include <algorithm>
#include <cstdint>

namespace gpipe::path_internal {

int OpIndex(Op op) {
  switch (op) {
    case Op::kForward: return kF;
    case Op::kBackward: return kB;
    case Op::kBackwardInput: return kI;
    case Op::kBackwardWeight: return kW;
    default: return -1;
  }
}

std::optional<PrecedenceGraph> PrecedenceGraphOf(const Schedule& schedule, size_t max_nodes) {
  const int stages = schedule.num_stages(), ranks = schedule.num_ranks();
  const int64_t m = std::max(1, schedule.num_microbatches);
  // Nodes numbered rank by rank first; key (stage, micro-batch, F | B-or-I | W) -> node.
  std::vector<int> rank_of, stage_of, op_of, microbatch_of;
  for (int r = 0; r < ranks; ++r) {
    for (const Action& a : schedule.ranks[r]) {
      const int op = OpIndex(a.op);
      if (op < 0) continue;
      if (rank_of.size() >= max_nodes || a.microbatch < 0 || a.microbatch >= m) return std::nullopt;
      rank_of.push_back(r);
      stage_of.push_back(a.stage);
      op_of.push_back(op);
      microbatch_of.push_back(a.microbatch);
    }
  }
  const size_t n = rank_of.size();
  const auto key = [&](int stage, int64_t microbatch, int kind) { return (stage * m + microbatch) * 3 + kind; };
  const auto kind_of = [](int op) { return op == kF ? 0 : op == kW ? 2 : 1; };
  std::vector<int> node_at(static_cast<size_t>(stages) * m * 3, -1);
  for (size_t v = 0; v < n; ++v) node_at[key(stage_of[v], microbatch_of[v], kind_of(op_of[v]))] = static_cast<int>(v);
  std::vector<int> previous(n, -1), peer(n, -1);
  std::vector<int> boundary(n, -1);
  std::vector<int> last(ranks, -1);
  for (size_t v = 0; v < n; ++v) {
    const int r = rank_of[v];
    if (last[r] >= 0) previous[v] = last[r];
    last[r] = static_cast<int>(v);
    const int s = stage_of[v];
    const int64_t mb = microbatch_of[v];
    int from_stage = -1;
    switch (kind_of(op_of[v])) {
      case 0:
        if (s > 0) peer[v] = node_at[key(from_stage = s - 1, mb, 0)];
        break;
      case 1:
        peer[v] = s + 1 < stages ? node_at[key(from_stage = s + 1, mb, 1)] : node_at[key(s, mb, 0)];
        break;
      default:
        peer[v] = node_at[key(s, mb, 1)];
        break;
    }
    if (from_stage >= 0 && peer[v] >= 0 && schedule.stage_rank[from_stage] != schedule.stage_rank[s]) {
      boundary[v] = std::min(from_stage, s);
    }
  }
  // Kahn's order.
  std::vector<int> waiting(n, 0), next_on_rank(n, -1);
  std::vector<std::vector<int>> needed_by(n);
  for (size_t v = 0; v < n; ++v) {
    if (previous[v] >= 0) {
      ++waiting[v];
      next_on_rank[previous[v]] = static_cast<int>(v);
    }
    if (peer[v] >= 0 && peer[v] != previous[v]) {
      ++waiting[v];
      needed_by[peer[v]].push_back(static_cast<int>(v));
    }
  }
  std::vector<int> order, ready;
  order.reserve(n);
  for (size_t v = 0; v < n; ++v) {
    if (waiting[v] == 0) ready.push_back(static_cast<int>(v));
  }
  while (!ready.empty()) {
    const int v = ready.back();
    ready.pop_back();
    order.push_back(v);
    if (next_on_rank[v] >= 0 && --waiting[next_on_rank[v]] == 0) ready.push_back(next_on_rank[v]);
    for (int u : needed_by[v]) {
      if (--waiting[u] == 0) ready.push_back(u);
    }
  }
  if (order.size() != n) return std::nullopt;
  std::vector<int> position(n);
  for (size_t i = 0; i < n; ++i) position[order[i]] = static_cast<int>(i);
  PrecedenceGraph g;
  g.stage.resize(n);
  g.op.resize(n);
  g.after_rank.resize(n);
  g.after_peer.resize(n);
  g.peer_boundary.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int v = order[i];
    g.stage[i] = stage_of[v];
    g.op[i] = op_of[v];
    g.after_rank[i] = previous[v] >= 0 ? position[previous[v]] : -1;
    g.after_peer[i] = peer[v] >= 0 ? position[peer[v]] : -1;
    g.peer_boundary[i] = boundary[v];
  }
  g.last.assign(ranks, -1);
  for (int r = 0; r < ranks; ++r) g.last[r] = last[r] >= 0 ? position[last[r]] : -1;
  g.rank_stages.resize(ranks);
  for (int s = 0; s < stages; ++s) g.rank_stages[schedule.stage_rank[s]].push_back(s);
  return g;
}

std::vector<GraphPath> LongestPaths(const PrecedenceGraph& g, const std::vector<OpTimes>& times,
                                    const std::vector<AllReduceLine>& allreduce, bool every_rank) {
  const size_t n = g.stage.size();
  std::vector<double> dist(n, 0.0);
  std::vector<int> from(n, -1);
  for (size_t v = 0; v < n; ++v) {
    double start = 0;
    int before = -1;
    if (g.after_rank[v] >= 0) {
      start = dist[g.after_rank[v]];
      before = g.after_rank[v];
    }
    const double hop = g.peer_boundary[v] >= 0 ? times[g.peer_boundary[v]][kH] : 0.0;
    if (g.after_peer[v] >= 0 && dist[g.after_peer[v]] + hop > start) {
      start = dist[g.after_peer[v]] + hop;
      before = g.after_peer[v];
    }
    dist[v] = start + times[g.stage[v]][g.op[v]];
    from[v] = before;
  }
  const int ranks = static_cast<int>(g.last.size());
  const auto reduced = [&](int r) { return r < static_cast<int>(allreduce.size()); };
  std::vector<int> ends;
  double longest = -1;
  for (int r = 0; r < ranks; ++r) {
    if (g.last[r] < 0) continue;
    if (every_rank) {
      ends.push_back(r);
      continue;
    }
    double ms = dist[g.last[r]];
    if (reduced(r)) {
      ms += allreduce[r].fixed_ms;
      for (int s : g.rank_stages[r]) ms += allreduce[r].ms_per_byte * times[s][kP];
    }
    if (ms > longest) {
      longest = ms;
      ends.assign(1, r);
    }
  }
  std::vector<GraphPath> out;
  std::vector<double> counts(times.size() * kOps, 0.0);
  for (int r : ends) {
    GraphPath chain;
    chain.rank = r;
    std::fill(counts.begin(), counts.end(), 0.0);
    for (int v = g.last[r]; v >= 0; v = from[v]) {
      counts[static_cast<size_t>(g.stage[v]) * kOps + g.op[v]] += 1;
      if (from[v] >= 0 && from[v] != g.after_rank[v] && g.peer_boundary[v] >= 0) {
        counts[static_cast<size_t>(g.peer_boundary[v]) * kOps + kH] += 1;
      }
    }
    if (reduced(r)) {
      chain.reduced = true;
      chain.hops += allreduce[r].fixed_ms;
      for (int s : g.rank_stages[r]) counts[static_cast<size_t>(s) * kOps + kP] += allreduce[r].ms_per_byte;
    }
    for (size_t i = 0; i < counts.size(); ++i) {
      if (counts[i] != 0) chain.body.push_back({static_cast<int>(i / kOps), static_cast<int>(i % kOps), counts[i]});
    }
    out.push_back(std::move(chain));
  }
  return out;
}

}  // namespace gpipe::path_internal
