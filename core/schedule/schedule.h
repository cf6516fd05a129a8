// A schedule: for every rank, the ordered list of actions it performs in one training step.
// The simulator and the executor both walk this same value; neither has an order of its own.
// Text form, one line per rank:
//   rank 0: 0F0 0SEND_F0 0F1 ...
// ScheduleFromText is the exact inverse of ScheduleToText.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/schedule/action.h"
#include "core/status.h"

namespace gpipe {

struct Schedule {
  int num_microbatches = 0;
  /// The rank that runs each stage, indexed by stage.
  std::vector<int> stage_rank;
  /// The actions of each rank, in order, indexed by rank.
  std::vector<std::vector<Action>> ranks;

  int num_stages() const { return static_cast<int>(stage_rank.size()); }
  int num_ranks() const { return static_cast<int>(ranks.size()); }
  size_t num_actions() const;

  friend bool operator==(const Schedule&, const Schedule&) = default;
};

std::string ScheduleToText(const Schedule& schedule);
/// Parses the text form. The stage-to-rank map and M are read off the actions; `num_stages` and
/// `num_microbatches`, when positive, override them (for stages or micro-batches no action names).
Expected<Schedule> ScheduleFromText(std::string_view text, int num_stages = 0, int num_microbatches = 0);

/// A grid of actions, one column per rank, for errors: rows around each rank's position
/// `next[r]` (the index of the action it is at), that cell marked >like this<, and `why` below.
std::string RenderScheduleGrid(const Schedule& schedule, const std::vector<size_t>& next,
                               const std::string& why);

}  // namespace gpipe
