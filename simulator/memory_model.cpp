#include "simulator/memory_model.h"

#include <algorithm>

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
      e.at_start.stash = 1;
      e.at_start.input_buffers = received_input ? -1 : 0;
      e.at_start.in_flight = 1;
      break;
    case Op::kRecvGradient:
      e.at_start.gradient_buffers = 1;
      break;
    case Op::kBackward:
      e.at_start.recompute = recompute;
      e.at_end.stash = -1;
      e.at_end.recompute = -recompute;
      e.at_end.gradient_buffers = -gradient_buffer;
      e.at_end.in_flight = -1;
      break;
    case Op::kBackwardInput:
      e.at_start.recompute = recompute;
      e.at_end.gradient_buffers = -gradient_buffer;
      break;
    case Op::kBackwardWeight:
      e.at_end.stash = -1;
      e.at_end.recompute = -recompute;
      e.at_end.in_flight = -1;
      break;
    case Op::kSendActivation:
    case Op::kSendGradient:
      break;
  }
  return e;
}

namespace {

MemoryChange Bytes(const MemoryCounts& n, const StageCost& c) {
  MemoryChange change;
  change.activation_bytes = n.stash * c.stash_bytes() + n.recompute * c.activation_bytes;
  change.buffer_bytes = n.gradient_buffers * c.output_bytes + n.input_buffers * c.input_bytes;
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

MemoryPeak RankMemoryPeak(const Schedule& schedule, int rank, const std::vector<StageCost>& stages) {
  MemoryPeak peak;
  peak.static_bytes = StaticBytesOfRank(schedule, rank, stages);
  peak.peak_bytes = peak.static_bytes;
  double activations = 0, buffers = 0;
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
  for (const Action& a : schedule.ranks[rank]) {
    const MemoryEffect effect = EffectOf(schedule, a, stages[a.stage]);
    apply(effect.at_start);
    apply(effect.at_end);
  }
  return peak;
}

}  // namespace gpipe

namespace gpipe {

MemoryFrontier::MemoryFrontier(const Schedule& schedule, int rank, const std::vector<bool>& remat) {
  std::vector<int> slot(schedule.num_stages(), -1);
  for (int s = 0; s < schedule.num_stages(); ++s) {
    if (schedule.stage_rank[s] != rank) continue;
    slot[s] = static_cast<int>(stages_.size());
    stages_.push_back(s);
  }
  width_ = 4 * stages_.size();
  std::vector<int> counts(width_, 0);
  int in_flight = 0;
  const auto apply = [&](const MemoryCounts& n, int at) {
    counts[at + 0] += n.stash;
    counts[at + 1] += n.recompute;
    counts[at + 2] += n.gradient_buffers;
    counts[at + 3] += n.input_buffers;
    in_flight += n.in_flight;
    max_in_flight_ = std::max(max_in_flight_, in_flight);
  };
  // The count vectors met right after an action's start (frees at an action's end never make a
  // new peak), kept as the set of maximal ones (none is below another in every count), updated as
  // they come: a rank's walk meets thousands of vectors but only a few are maximal.
  const auto covers = [&](const int* big, const int* small) {
    for (size_t d = 0; d < width_; ++d) {
      if (big[d] < small[d]) return false;
    }
    return true;
  };
  for (const Action& a : schedule.ranks[rank]) {
    const int i = slot[a.stage];
    const SymbolicEffect e = SymbolicEffectOf(a, remat[i], ReceivesInput(schedule, a.stage), ReceivesGradient(schedule, a.stage));
    apply(e.at_start, 4 * i);
    const MemoryCounts& n = e.at_start;
    const bool grew = n.stash > 0 || n.recompute > 0 || n.gradient_buffers > 0 || n.input_buffers > 0;
    if (grew) {
      bool covered = false;
      for (size_t k = 0; k < vectors_.size() && !covered; k += width_) covered = covers(&vectors_[k], counts.data());
      if (!covered) {
        // Drop the kept vectors the new one covers, then keep it.
        size_t out = 0;
        for (size_t k = 0; k < vectors_.size(); k += width_) {
          if (covers(counts.data(), &vectors_[k])) continue;
          std::copy(vectors_.begin() + static_cast<std::ptrdiff_t>(k),
                    vectors_.begin() + static_cast<std::ptrdiff_t>(k + width_),
                    vectors_.begin() + static_cast<std::ptrdiff_t>(out));
          out += width_;
        }
        vectors_.resize(out);
        vectors_.insert(vectors_.end(), counts.begin(), counts.end());
      }
    }
    apply(e.at_end, 4 * i);
  }
}

double MemoryFrontier::PeakDynamicBytes(const std::vector<const StageCost*>& costs) const {
  double best = 0;
  for (size_t k = 0; k < vectors_.size(); k += width_) {
    double bytes = 0;
    for (size_t i = 0; i < stages_.size(); ++i) {
      const StageCost& c = *costs[i];
      const int* n = &vectors_[k + 4 * i];
      bytes += n[0] * c.stash_bytes() + n[1] * c.activation_bytes + n[2] * c.output_bytes + n[3] * c.input_bytes;
    }
    best = std::max(best, bytes);
  }
  return best;
}

}  // namespace gpipe
