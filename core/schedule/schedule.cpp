#include "core/schedule/schedule.h"

#include <algorithm>
#include <sstream>

namespace gpipe {

size_t Schedule::num_actions() const {
  size_t total = 0;
  for (const auto& actions : ranks) total += actions.size();
  return total;
}

std::string ScheduleToText(const Schedule& schedule) {
  std::string text;
  for (int r = 0; r < schedule.num_ranks(); ++r) {
    text += "rank " + std::to_string(r) + ":";
    for (const Action& action : schedule.ranks[r]) text += " " + ActionToText(action);
    text += "\n";
  }
  return text;
}

Expected<Schedule> ScheduleFromText(std::string_view text, int num_stages, int num_microbatches) {
  Schedule schedule;
  std::istringstream lines{std::string(text)};
  std::string line;
  int line_number = 0;
  int max_stage = -1;
  int max_microbatch = -1;
  while (std::getline(lines, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "schedule line " + std::to_string(line_number);
    const std::string prefix = "rank " + std::to_string(schedule.num_ranks()) + ":";
    if (line.rfind(prefix, 0) != 0) {
      return Status::Invalid(where + ": expected it to start with \"" + prefix + "\", got \"" + line + "\"");
    }
    std::istringstream words(line.substr(prefix.size()));
    std::vector<Action> actions;
    std::string word;
    while (words >> word) {
      Expected<Action> action = ActionFromText(word);
      if (!action.ok()) return action.status().WithContext(where);
      max_stage = std::max(max_stage, action->stage);
      max_microbatch = std::max(max_microbatch, action->microbatch);
      actions.push_back(*action);
    }
    schedule.ranks.push_back(std::move(actions));
  }
  if (schedule.ranks.empty()) return Status::Invalid("schedule: no \"rank 0:\" line");
  const int stages = std::max(num_stages, max_stage + 1);
  schedule.num_microbatches = std::max(num_microbatches, max_microbatch + 1);
  schedule.stage_rank.assign(stages, -1);
  for (int r = 0; r < schedule.num_ranks(); ++r) {
    for (const Action& action : schedule.ranks[r]) {
      int& owner = schedule.stage_rank[action.stage];
      if (owner >= 0 && owner != r) {
        return Status::Invalid("schedule: stage " + std::to_string(action.stage) +
                               " has actions on rank " + std::to_string(owner) + " and on rank " +
                               std::to_string(r) + " (" + ActionToText(action) +
                               "); a stage lives on one rank");
      }
      owner = r;
    }
  }
  for (int s = 0; s < stages; ++s) {
    if (schedule.stage_rank[s] < 0) {
      return Status::Invalid("schedule: stage " + std::to_string(s) + " has no actions, so its rank is unknown");
    }
  }
  return schedule;
}

std::string RenderScheduleGrid(const Schedule& schedule, const std::vector<size_t>& next,
                               const std::string& why) {
  constexpr size_t kContext = 3;
  std::vector<bool> show;
  size_t longest = 0;
  for (const auto& actions : schedule.ranks) longest = std::max(longest, actions.size());
  show.assign(longest, false);
  for (int r = 0; r < schedule.num_ranks(); ++r) {
    const size_t at = r < static_cast<int>(next.size()) ? next[r] : 0;
    const size_t from = at > kContext ? at - kContext : 0;
    for (size_t i = from; i <= at + 1 && i < longest; ++i) show[i] = true;
  }
  size_t width = 8;
  for (const auto& actions : schedule.ranks) {
    for (const Action& action : actions) width = std::max(width, ActionToText(action).size() + 3);
  }
  std::ostringstream out;
  const auto cell = [&](const std::string& text) {
    out << text << std::string(width > text.size() ? width - text.size() : 1, ' ');
  };
  out << "      ";
  for (int r = 0; r < schedule.num_ranks(); ++r) cell("rank " + std::to_string(r));
  out << "\n";
  bool skipped = false;
  for (size_t i = 0; i < longest; ++i) {
    if (!show[i]) {
      if (!skipped) out << "  ...\n";
      skipped = true;
      continue;
    }
    skipped = false;
    std::string index = std::to_string(i);
    out << "  " << index << std::string(index.size() < 4 ? 4 - index.size() : 1, ' ');
    for (int r = 0; r < schedule.num_ranks(); ++r) {
      const auto& actions = schedule.ranks[r];
      if (i >= actions.size()) {
        cell(i == actions.size() && r < static_cast<int>(next.size()) && next[r] == i ? "(done)" : "");
        continue;
      }
      const std::string text = ActionToText(actions[i]);
      const bool here = r < static_cast<int>(next.size()) && next[r] == i;
      cell(here ? ">" + text + "<" : text);
    }
    out << "\n";
  }
  if (!why.empty()) out << why;
  return out.str();
}

}  // namespace gpipe
