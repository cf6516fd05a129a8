#include "simulator/memory_model.h"

#include <algorithm>

namespace gpipe {

MemoryEffect EffectOf(const Action& a, const StageCost& c, bool received_input, bool received_gradient) {
  MemoryEffect e;
  const double recompute = c.remat ? c.activation_bytes : 0.0;
  const double grad_buffer = received_gradient ? c.output_bytes : 0.0;
  switch (a.op) {
    case Op::kRecvActivation:
      e.at_start.buffer_bytes = c.input_bytes;
      break;
    case Op::kForward:
      e.at_start.activation_bytes = c.stash_bytes();
      e.at_start.buffer_bytes = received_input ? -c.input_bytes : 0.0;
      e.at_start.in_flight = 1;
      break;
    case Op::kRecvGradient:
      e.at_start.buffer_bytes = c.output_bytes;
      break;
    case Op::kBackward:
      e.at_start.activation_bytes = recompute;
      e.at_end.activation_bytes = -(c.stash_bytes() + recompute);
      e.at_end.buffer_bytes = -grad_buffer;
      e.at_end.in_flight = -1;
      break;
    case Op::kBackwardInput:
      e.at_start.activation_bytes = recompute;
      e.at_end.buffer_bytes = -grad_buffer;
      break;
    case Op::kBackwardWeight:
      e.at_end.activation_bytes = -(c.stash_bytes() + recompute);
      e.at_end.in_flight = -1;
      break;
    case Op::kSendActivation:
    case Op::kSendGradient:
      break;
  }
  return e;
}

MemoryEffect EffectOf(const Schedule& schedule, const Action& a, const StageCost& c) {
  const int s = a.stage;
  const bool received_input = s > 0 && schedule.stage_rank[s - 1] != schedule.stage_rank[s];
  const bool received_gradient = s + 1 < schedule.num_stages() && schedule.stage_rank[s + 1] != schedule.stage_rank[s];
  return EffectOf(a, c, received_input, received_gradient);
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
