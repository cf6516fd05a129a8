#include "simulator/memory_model.h"

#include <algorithm>

#include "core/schedule/wire.h"

namespace gpipe {

SymbolicEffect SymbolicEffectOf(const Action& a, bool remat, bool received_input, bool received_gradient) {
  SymbolicEffect e;
  const int recompute = remat ? 1 : 0;
  const int gradient_buffer = received_gradient ? 1 : 0;
  switch (a.op) {
    case Op::kRecvActivation:
      e.at_start.input_buffers = 1;
      break;
    case Op::kForward:
      e.at_start.forward_workspaces = 1;
      e.at_end.forward_workspaces = -1;
      e.at_start.stash = 1;
      // The received input, or on the first stage the micro-batch's input held since the step
      // began (StepStartInputs), becomes part of the stash.
      e.at_start.input_buffers = received_input || a.stage == 0 ? -1 : 0;
      e.at_start.in_flight = 1;
      break;
    case Op::kRecvGradient:
      e.at_start.gradient_buffers = 1;
      break;
    case Op::kBackward:
      e.at_start.backward_workspaces = 1;
      e.at_end.backward_workspaces = -1;
      e.at_start.recompute = recompute;
      e.at_end.stash = -1;
      e.at_end.recompute = -recompute;
      e.at_end.gradient_buffers = -gradient_buffer;
      e.at_end.in_flight = -1;
      // A stage whose gradient comes from another rank sent its output there.
      e.at_end.sent_outputs_unstashed = gradient_buffer;
      break;
    case Op::kBackwardInput:
      e.at_start.input_workspaces = 1;
      e.at_end.input_workspaces = -1;
      e.at_start.recompute = recompute;
      // Counted from I's start (the captured gradients build up while it runs) until W's end.
      e.at_start.weight_pending = 1;
      e.at_end.gradient_buffers = -gradient_buffer;
      break;
    case Op::kBackwardWeight:
      e.at_start.weight_workspaces = 1;
      e.at_end.weight_workspaces = -1;
      e.at_end.weight_pending = -1;
      e.at_end.stash = -1;
      e.at_end.recompute = -recompute;
      e.at_end.in_flight = -1;
      e.at_end.sent_outputs_unstashed = gradient_buffer;
      break;
    case Op::kSendActivation:
      e.at_start.sent_outputs = 1;
      break;
    case Op::kSendGradient:
      e.at_start.sent_inputs = 1;
      break;
  }
  return e;
}

namespace {

MemoryChange Bytes(const MemoryCounts& n, const StageCost& c) {
  MemoryChange change;
  change.activation_bytes = n.stash * c.stash_bytes() + n.recompute * c.recomputed_bytes() +
                            n.forward_workspaces * c.forward_workspace_bytes +
                            n.backward_workspaces * c.backward_workspace_bytes +
                            n.input_workspaces * c.backward_input_workspace_bytes +
                            n.weight_workspaces * c.backward_weight_workspace_bytes +
                            n.weight_pending * c.weight_pass_bytes;
  change.buffer_bytes = n.gradient_buffers * c.output_bytes + n.input_buffers * c.input_bytes;
  if (c.sends_held) {
    change.buffer_bytes += (c.sent_output_in_stash ? n.sent_outputs_unstashed : n.sent_outputs) * c.output_bytes +
                           n.sent_inputs * c.input_bytes;
  }
  change.in_flight = n.in_flight;
  return change;
}

bool ReceivesInput(const Schedule& schedule, int s) {
  return s > 0 && schedule.stage_rank[s - 1] != schedule.stage_rank[s];
}
bool ReceivesGradient(const Schedule& schedule, int s) {
  return s + 1 < schedule.num_stages() && schedule.stage_rank[s + 1] != schedule.stage_rank[s];
}

}  // namespace

int StepStartInputs(const Schedule& schedule, int rank) {
  int inputs = 0;
  for (const Action& a : schedule.ranks[rank]) inputs += a.op == Op::kForward && a.stage == 0 ? 1 : 0;
  return inputs;
}

double StepStartInputBytes(const Schedule& schedule, int rank, const std::vector<StageCost>& stages) {
  return StepStartInputs(schedule, rank) * stages[0].input_bytes;
}

MemoryEffect EffectOf(const Action& a, const StageCost& c, bool received_input, bool received_gradient) {
  const SymbolicEffect symbolic = SymbolicEffectOf(a, c.remat, received_input, received_gradient);
  return {Bytes(symbolic.at_start, c), Bytes(symbolic.at_end, c)};
}

MemoryEffect EffectOf(const Schedule& schedule, const Action& a, const StageCost& c) {
  return EffectOf(a, c, ReceivesInput(schedule, a.stage), ReceivesGradient(schedule, a.stage));
}

double StaticBytesOfRank(const Schedule& schedule, int rank, const std::vector<StageCost>& stages) {
  double bytes = 0;
  for (int s = 0; s < schedule.num_stages(); ++s) {
    if (schedule.stage_rank[s] == rank) bytes += stages[s].static_bytes;
  }
  return bytes;
}

double StaticBytesOfRank(const Schedule& schedule, int rank, const CostModel& costs) {
  return StaticBytesOfRank(schedule, rank, costs.stages) - costs.SharedStaticBytes(rank);
}

ReceivePosting ReceivesPostedAt(const Schedule& schedule) {
  // What BuildWireProgram(schedule, false) posts (its kAheadInSenderOrder), without building
  // the program: the planner asks this of every schedule shape it prices.
  const int ranks = schedule.num_ranks();
  const int64_t microbatches = schedule.num_microbatches;
  // A message's dense key: (gradient?, sending stage, micro-batch).
  const auto key = [&](const Message& m) {
    return (static_cast<int64_t>(m.kind == MessageKind::kGradient) * schedule.num_stages() + m.from_stage) * microbatches +
           m.microbatch;
  };
  ReceivePosting posting(static_cast<size_t>(ranks));
  // Per receiving rank and sending peer: the messages in the peer's order of sending.
  std::vector<std::vector<std::vector<int64_t>>> expected(static_cast<size_t>(ranks),
                                                          std::vector<std::vector<int64_t>>(static_cast<size_t>(ranks)));
  for (int p = 0; p < ranks; ++p) {
    for (const Action& a : schedule.ranks[static_cast<size_t>(p)]) {
      if (!IsSend(a.op)) continue;
      const Message m = MessageOf(a);
      const int to = schedule.stage_rank[static_cast<size_t>(m.to_stage())];
      expected[static_cast<size_t>(to)][static_cast<size_t>(p)].push_back(key(m));
    }
  }
  std::vector<int64_t> receive_of(static_cast<size_t>(2 * schedule.num_stages() * microbatches), -1);
  std::vector<char> posted(receive_of.size(), 0);
  for (int r = 0; r < ranks; ++r) {
    const std::vector<Action>& actions = schedule.ranks[static_cast<size_t>(r)];
    std::vector<std::pair<size_t, size_t>>& at = posting[static_cast<size_t>(r)];
    std::vector<int64_t> keys;
    for (size_t j = 0; j < actions.size(); ++j) {
      if (!IsRecv(actions[j].op)) continue;
      keys.push_back(key(MessageOf(actions[j])));
      receive_of[static_cast<size_t>(keys.back())] = static_cast<int64_t>(j);
    }
    std::vector<size_t> cursor(static_cast<size_t>(ranks), 0);
    // Posts the messages from the sender of RECV action j, in its order, up to j's.
    const auto post_up_to = [&](size_t j, size_t i) {
      const Message m = MessageOf(actions[j]);
      const size_t peer = static_cast<size_t>(schedule.stage_rank[static_cast<size_t>(m.from_stage)]);
      const std::vector<int64_t>& from_peer = expected[static_cast<size_t>(r)][peer];
      const int64_t wanted = key(m);
      while (!posted[static_cast<size_t>(wanted)] && cursor[peer] < from_peer.size()) {
        const int64_t k = from_peer[cursor[peer]++];
        posted[static_cast<size_t>(k)] = 1;
        if (receive_of[static_cast<size_t>(k)] >= 0) at.push_back({i, static_cast<size_t>(receive_of[static_cast<size_t>(k)])});
      }
    };
    for (size_t i = 0; i < actions.size(); ++i) {
      if (IsCompute(actions[i].op)) {
        // What the next compute action receives is posted as this one starts.
        for (size_t j = i + 1; j < actions.size() && !IsCompute(actions[j].op); ++j) {
          if (IsRecv(actions[j].op)) post_up_to(j, i);
        }
      } else if (IsRecv(actions[i].op)) {
        post_up_to(i, i);
      }
    }
    for (int64_t k : keys) {
      receive_of[static_cast<size_t>(k)] = -1;
      posted[static_cast<size_t>(k)] = 0;
    }
  }
  return posting;
}

namespace {

// Rank `rank`'s entry of `posting`, or of `built`, filled here when `posting` is null.
const std::vector<std::pair<size_t, size_t>>& RankPosting(const Schedule& schedule, int rank,
                                                           const ReceivePosting* posting, ReceivePosting& built) {
  if (posting == nullptr) {
    built = ReceivesPostedAt(schedule);
    posting = &built;
  }
  return (*posting)[static_cast<size_t>(rank)];
}

MemoryPeak PeakOver(const Schedule& schedule, int rank, const std::vector<StageCost>& stages, double static_bytes,
                    const ReceivePosting* posting) {
  MemoryPeak peak;
  peak.static_bytes = static_bytes;
  peak.peak_bytes = peak.static_bytes;
  double activations = 0, buffers = StepStartInputBytes(schedule, rank, stages);
  peak.peak_bytes += buffers;
  peak.buffer_bytes = buffers;
  int in_flight = 0;
  const auto apply = [&](const MemoryChange& change) {
    activations += change.activation_bytes;
    buffers += change.buffer_bytes;
    in_flight += change.in_flight;
    peak.max_in_flight = std::max(peak.max_in_flight, in_flight);
    const double total = peak.static_bytes + activations + buffers;
    if (total > peak.peak_bytes) {
      peak.peak_bytes = total;
      peak.activation_bytes = activations;
      peak.buffer_bytes = buffers;
    }
  };
  const std::vector<Action>& actions = schedule.ranks[rank];
  ReceivePosting built;
  const std::vector<std::pair<size_t, size_t>>& posted = RankPosting(schedule, rank, posting, built);
  size_t next_posted = 0;
  for (size_t i = 0; i < actions.size(); ++i) {
    AllocatePostedReceives(actions, posted, next_posted, i,
                           [&](const Action& recv) { apply(EffectOf(schedule, recv, stages[recv.stage]).at_start); });
    const Action& a = actions[i];
    const MemoryEffect effect = EffectOf(schedule, a, stages[a.stage]);
    if (!IsRecv(a.op)) apply(effect.at_start);
    apply(effect.at_end);
  }
  return peak;
}

}  // namespace

MemoryPeak RankMemoryPeak(const Schedule& schedule, int rank, const std::vector<StageCost>& stages,
                          const ReceivePosting* posting) {
  return PeakOver(schedule, rank, stages, StaticBytesOfRank(schedule, rank, stages), posting);
}

MemoryPeak RankMemoryPeak(const Schedule& schedule, int rank, const CostModel& costs, const ReceivePosting* posting) {
  return PeakOver(schedule, rank, costs.stages, StaticBytesOfRank(schedule, rank, costs), posting);
}

}  // namespace gpipe

namespace gpipe {

// Pricing replays the walk this many times before it builds the set of maximal vectors.
constexpr int kWalksBeforeBuild = 8;
// A set of maximal vectors is kept only while it stays small beside the candidates it has met:
// past this many vectors and a quarter of the candidates, most moments are maximal (a long
// interleaved rank: thousands of maximal vectors of 48 counts), the set would cost more to build
// than thousands of walks and price little faster, and pricing replays the walk instead.
constexpr size_t kKeptAtMost = 256;
// Counts per stage: stash, recompute, gradient buffers, input buffers, sent outputs, sent inputs,
// micro-batches between I and W, sent outputs the stash let go of, forward, backward, I and W
// workspaces (the last four only in the walk with workspaces).
constexpr int kCounts = 12;
constexpr int kCountsWithoutWorkspaces = 8;

MemoryFrontier::MemoryFrontier(const Schedule& schedule, int rank, const ReceivePosting* posting) {
  ReceivePosting built;
  const std::vector<std::pair<size_t, size_t>>& posted = RankPosting(schedule, rank, posting, built);
  std::vector<int> slot(schedule.num_stages(), -1);
  for (int s = 0; s < schedule.num_stages(); ++s) {
    if (schedule.stage_rank[s] != rank) continue;
    slot[s] = static_cast<int>(stages_.size());
    stages_.push_back(s);
  }
  Record(schedule, rank, slot, posted, /*workspaces=*/true, with_workspaces_);
  Record(schedule, rank, slot, posted, /*workspaces=*/false, without_workspaces_);
}

void MemoryFrontier::Record(const Schedule& schedule, int rank, const std::vector<int>& slot,
                            const std::vector<std::pair<size_t, size_t>>& posted, bool workspaces, Walk& walk) {
  walk.stride = workspaces ? kCounts : kCountsWithoutWorkspaces;
  walk.width = static_cast<size_t>(walk.stride) * stages_.size();
  std::vector<Change>& changes = walk.changes;
  changes.reserve(2 * schedule.ranks[rank].size() + 1);
  int in_flight = 0;
  const auto record = [&](const MemoryCounts& n, int at) {
    const int deltas[kCounts] = {n.stash,          n.recompute,          n.gradient_buffers,
                                 n.input_buffers,  n.sent_outputs,       n.sent_inputs,
                                 n.weight_pending, n.sent_outputs_unstashed, n.forward_workspaces,
                                 n.backward_workspaces, n.input_workspaces, n.weight_workspaces};
    for (int k = 0; k < walk.stride; ++k) {
      if (deltas[k] != 0) changes.push_back({at + k, static_cast<int16_t>(deltas[k]), false});
    }
    in_flight += n.in_flight;
    max_in_flight_ = std::max(max_in_flight_, in_flight);
  };
  // The first stage's inputs, held from the step's start: the walk's first candidate.
  if (const int inputs = StepStartInputs(schedule, rank); inputs > 0) {
    MemoryCounts start;
    start.input_buffers = inputs;
    record(start, walk.stride * slot[0]);
    changes.back().candidate = true;
  }
  const std::vector<Action>& actions = schedule.ranks[rank];
  const auto effect_of = [&](const Action& a) {
    return SymbolicEffectOf(a, /*remat=*/true, ReceivesInput(schedule, a.stage), ReceivesGradient(schedule, a.stage));
  };
  size_t next_posted = 0;
  for (size_t k = 0; k < actions.size(); ++k) {
    const Action& a = actions[k];
    const int i = slot[a.stage];
    const size_t first_posted = next_posted;
    AllocatePostedReceives(actions, posted, next_posted, k, [&](const Action& recv) {
      record(effect_of(recv).at_start, walk.stride * slot[recv.stage]);
    });
    const SymbolicEffect e = effect_of(a);
    if (!IsRecv(a.op)) record(e.at_start, walk.stride * i);
    // Frees at an action's end never make a new peak: only the counts after a start that grew.
    // (Without remat a stage's recompute counts add nothing: the candidates are then more than
    // needed, never fewer, and a falling count is only ever priced lower.)
    const MemoryCounts& n = e.at_start;
    const bool grew = next_posted > first_posted ||
                      (!IsRecv(a.op) &&
                       (n.stash > 0 || n.recompute > 0 || n.gradient_buffers > 0 || n.input_buffers > 0 ||
                        n.sent_outputs > 0 || n.sent_inputs > 0 || n.weight_pending > 0 ||
                        (workspaces && (n.forward_workspaces > 0 || n.backward_workspaces > 0 ||
                                        n.input_workspaces > 0 || n.weight_workspaces > 0))));
    if (grew && !changes.empty()) changes.back().candidate = true;
    record(e.at_end, walk.stride * i);
  }
  // A candidate followed by the next one with no count falling in between is covered by it.
  bool fell = true;  // past the last candidate
  for (size_t k = changes.size(); k-- > 0;) {
    if (changes[k].candidate) {
      if (!fell) changes[k].candidate = false;
      fell = false;
    }
    if (changes[k].delta < 0) fell = true;
  }
}

namespace {

// Adds `counts` (`width` of them) to `vectors`, a set of vectors none of which is below another
// in every count: unless one there covers it; dropping those it covers. `sums` holds each
// vector's sum of counts: a vector covers another only if its sum is at least the other's, which
// spares most of the count-by-count comparisons.
void KeepMaximal(const std::vector<int>& counts, size_t width, std::vector<int>& vectors, std::vector<int64_t>& sums) {
  const auto covers = [&](const int* big, const int* small) {
    for (size_t d = 0; d < width; ++d) {
      if (big[d] < small[d]) return false;
    }
    return true;
  };
  int64_t sum = 0;
  for (size_t d = 0; d < width; ++d) sum += counts[d];
  // The latest first: the walk's counts move a little at a time, so the vectors kept last are
  // the likeliest to cover the next.
  for (size_t i = sums.size(); i-- > 0;) {
    if (sums[i] >= sum && covers(&vectors[i * width], counts.data())) return;
  }
  size_t out = 0;
  for (size_t i = 0; i < sums.size(); ++i) {
    if (sum >= sums[i] && covers(counts.data(), &vectors[i * width])) continue;
    if (out != i) {
      std::copy(vectors.begin() + static_cast<std::ptrdiff_t>(i * width),
                vectors.begin() + static_cast<std::ptrdiff_t>((i + 1) * width),
                vectors.begin() + static_cast<std::ptrdiff_t>(out * width));
      sums[out] = sums[i];
    }
    ++out;
  }
  vectors.resize(out * width);
  sums.resize(out);
  vectors.insert(vectors.end(), counts.begin(), counts.end());
  sums.push_back(sum);
}

// Whether a set of `kept` maximal vectors out of `candidates` is past what pays to keep.
bool TooManyKept(size_t kept, size_t candidates) { return kept > kKeptAtMost && 4 * kept > candidates; }

}  // namespace

void MemoryFrontier::BuildVectors(const Walk& walk, bool any_size) const {
  // The candidates' count vectors, kept as the set of maximal ones (none is below another in
  // every count), updated as they come: a long walk meets thousands, few are maximal.
  std::vector<int> counts(walk.width, 0);
  std::vector<int64_t> sums;
  size_t candidates = 0;
  for (const Change& change : walk.changes) {
    counts[change.index] += change.delta;
    if (!change.candidate) continue;
    KeepMaximal(counts, walk.width, walk.vectors, sums);
    if (!any_size && TooManyKept(sums.size(), ++candidates)) {
      walk.vectors = {};
      walk.too_many = true;
      return;
    }
  }
  walk.built = true;
}

void MemoryFrontier::BuildStashVectors() const {
  const Walk& walk = without_workspaces_;
  const size_t width = 3 * stages_.size();
  std::vector<int> counts(walk.width, 0), projected(width);
  std::vector<int64_t> sums;
  for (const Change& change : walk.changes) {
    counts[change.index] += change.delta;
    if (!change.candidate) continue;
    for (size_t i = 0; i < stages_.size(); ++i) {
      const int* stage = &counts[static_cast<size_t>(walk.stride) * i];
      projected[3 * i] = stage[0];      // stash
      projected[3 * i + 1] = stage[1];  // recompute
      projected[3 * i + 2] = stage[3];  // input buffers
    }
    KeepMaximal(projected, width, stash_vectors_, sums);
  }
  stash_vectors_built_ = true;
}

double MemoryFrontier::LeastStashPeakBytes(const StageCost* const* kept, const StageCost* const* recomputed) const {
  if (!stash_vectors_built_) BuildStashVectors();
  const size_t n = stages_.size();
  double best = 0;
  for (size_t k = 0; k < stash_vectors_.size(); k += 3 * n) {
    double bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      if (kept[i] == nullptr) continue;
      const int* c = &stash_vectors_[k + 3 * i];
      const auto price = [&](const StageCost& s) {
        return c[0] * s.stash_bytes() + c[1] * s.recomputed_bytes() + c[2] * s.input_bytes;
      };
      bytes += std::min(price(*kept[i]), price(*recomputed[i]));
    }
    best = std::max(best, bytes);
  }
  return best;
}

size_t MemoryFrontier::size(bool workspaces) const {
  const Walk& walk = workspaces ? with_workspaces_ : without_workspaces_;
  if (!walk.built) BuildVectors(walk, /*any_size=*/true);
  return walk.vectors.size() / walk.width;
}

double MemoryFrontier::PeakDynamicBytes(const StageCost* const* costs) const {
  bool workspaces = false;
  for (size_t i = 0; i < stages_.size(); ++i) {
    workspaces = workspaces || costs[i]->forward_workspace_bytes != 0 || costs[i]->backward_workspace_bytes != 0 ||
                 costs[i]->backward_input_workspace_bytes != 0 || costs[i]->backward_weight_workspace_bytes != 0;
  }
  const Walk& walk = workspaces ? with_workspaces_ : without_workspaces_;
  const size_t width = walk.width;
  price_.resize(width);
  for (size_t i = 0; i < stages_.size(); ++i) {
    const StageCost& c = *costs[i];
    double* price = &price_[static_cast<size_t>(walk.stride) * i];
    price[0] = c.stash_bytes();
    price[1] = c.recomputed_bytes();
    price[2] = c.output_bytes;
    price[3] = c.input_bytes;
    price[4] = c.sends_held && !c.sent_output_in_stash ? c.output_bytes : 0.0;
    price[5] = c.sends_held ? c.input_bytes : 0.0;
    price[6] = c.weight_pass_bytes;
    price[7] = c.sends_held && c.sent_output_in_stash ? c.output_bytes : 0.0;
    if (workspaces) {
      price[8] = c.forward_workspace_bytes;
      price[9] = c.backward_workspace_bytes;
      price[10] = c.backward_input_workspace_bytes;
      price[11] = c.backward_weight_workspace_bytes;
    }
  }
  if (!walk.built && !walk.too_many && ++walk.walks > kWalksBeforeBuild) BuildVectors(walk, /*any_size=*/false);
  // The dot products skip the counts priced at zero (adding their +0 changes no bit), in the
  // counts' order, so both ways below give the same bits.
  priced_.clear();
  for (size_t d = 0; d < width; ++d) {
    if (price_[d] != 0) priced_.push_back(static_cast<uint32_t>(d));
  }
  const auto dot = [&](const int* counts) {
    double bytes = 0;
    for (uint32_t d : priced_) bytes += counts[d] * price_[d];
    return bytes;
  };
  double best = 0;
  if (!walk.built) {
    counts_.assign(width, 0);
    for (const Change& change : walk.changes) {
      counts_[change.index] += change.delta;
      if (change.candidate) best = std::max(best, dot(counts_.data()));
    }
    return best;
  }
  // Four vectors at a time: four independent chains of additions, each in the counts' order.
  const int* v = walk.vectors.data();
  const size_t n = walk.vectors.size() / width;
  size_t k = 0;
  for (; k + 4 <= n; k += 4) {
    const int* a = v + k * width;
    const int* b = a + width;
    const int* c = b + width;
    const int* e = c + width;
    double sa = 0, sb = 0, sc = 0, se = 0;
    for (uint32_t d : priced_) {
      const double p = price_[d];
      sa += a[d] * p;
      sb += b[d] * p;
      sc += c[d] * p;
      se += e[d] * p;
    }
    // (one at a time, in order, as the single loop below would)
    best = std::max(best, sa);
    best = std::max(best, sb);
    best = std::max(best, sc);
    best = std::max(best, se);
  }
  for (; k < n; ++k) best = std::max(best, dot(v + k * width));
  return best;
}

}  // namespace gpipe
