#include "core/schedule/pytorch_csv.h"

#include <sstream>
#include <vector>

namespace gpipe {
namespace {

std::string Trim(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\"");
  if (first == std::string_view::npos) return "";
  const size_t last = text.find_last_not_of(" \t\r\"");
  return std::string(text.substr(first, last - first + 1));
}

std::vector<std::string> Split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.emplace_back();
  return parts;
}

// PyTorch's cells without a micro-batch or that our pipeline prices elsewhere.
bool LeftOut(const std::string& cell) {
  for (const char* kind : {"UNSHARD", "RESHARD", "REDUCE_GRAD"}) {
    const size_t at = cell.find(kind);
    if (at != std::string::npos && at > 0 && cell.find_first_not_of("0123456789") == at) return true;
  }
  return false;
}

}  // namespace

std::string ScheduleToPytorchCsv(const Schedule& schedule) {
  std::string text;
  for (const auto& actions : schedule.ranks) {
    for (size_t i = 0; i < actions.size(); ++i) text += (i > 0 ? "," : "") + ActionToText(actions[i]);
    text += "\n";
  }
  return text;
}

Expected<PytorchCsvSchedule> ScheduleFromPytorchCsv(std::string_view text, int stages, int microbatches,
                                                    const std::string& where) {
  PytorchCsvSchedule result;
  std::vector<std::string> rows = Split(std::string(text), '\n');
  while (!rows.empty() && Trim(rows.back()).empty()) rows.pop_back();
  if (rows.empty()) return Status::Invalid(where + ": no rows; PyTorch's schedule CSV has one row per rank");
  std::string as_text;
  for (size_t r = 0; r < rows.size(); ++r) {
    as_text += "rank " + std::to_string(r) + ":";
    const std::vector<std::string> cells = Split(rows[r], ',');
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string cell = Trim(cells[c]);
      const std::string at = where + ": row " + std::to_string(r + 1) + " (rank " + std::to_string(r) + "), column " +
                             std::to_string(c + 1) + " \"" + cell + "\"";
      if (cell.empty()) continue;
      if (LeftOut(cell)) {
        ++result.left_out;
        continue;
      }
      std::vector<std::string> parts = {cell};
      if (cell.front() == '(') {
        const size_t close = cell.find(')');
        if (close == std::string::npos || cell.substr(close + 1) != "OVERLAP_F_B") {
          return Status::Invalid(at + ": a group of actions is written \"(0F3;1B2)OVERLAP_F_B\"");
        }
        parts = Split(cell.substr(1, close - 1), ';');
      }
      for (const std::string& part : parts) {
        Expected<Action> action = ActionFromText(Trim(part));
        if (!action.ok()) return action.status().WithContext(at);
        if (action->stage >= stages || action->microbatch >= microbatches) {
          return Status::Invalid(at + ": the plan has stages 0.." + std::to_string(stages - 1) + " and micro-batches 0.." +
                                 std::to_string(microbatches - 1));
        }
        if (!IsCompute(action->op)) result.with_communication = true;
        as_text += " " + ActionToText(*action);
      }
    }
    as_text += "\n";
  }
  Expected<Schedule> schedule = ScheduleFromText(as_text, stages, microbatches);
  if (!schedule.ok()) return schedule.status().WithContext(where);
  result.schedule = std::move(*schedule);
  return result;
}

const char* PytorchScheduleClass(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGpipe: return "ScheduleGPipe";
    case ScheduleKind::k1F1B: return "Schedule1F1B";
    case ScheduleKind::kInterleaved1F1B: return "ScheduleInterleaved1F1B";
    case ScheduleKind::kZbH1:
    case ScheduleKind::kInterleavedZb: return "ScheduleInterleavedZeroBubble";
    case ScheduleKind::kZbV: return "ScheduleZBVZeroBubble";
    case ScheduleKind::kDualPipeV: return "ScheduleDualPipeV";
  }
  return "";
}

nlohmann::json PytorchStagesJson(const Plan& plan, bool with_communication) {
  nlohmann::json stages = nlohmann::json::array();
  for (int s = 0; s < plan.num_stages(); ++s) {
    const StagePlan& stage = plan.stages[s];
    stages.push_back({{"stage", s},
                      {"rank", stage.rank},
                      {"layers", {stage.first_layer, stage.end_layer}},
                      {"first_layer_name", plan.profile.layers[stage.first_layer].name},
                      {"last_layer_name", plan.profile.layers[stage.end_layer - 1].name},
                      {"recomputed_layers", stage.recomputed_layers()}});
  }
  return {{"format", "gpipe-plan-stages/1"},
          {"schedule", ScheduleName(plan.schedule)},
          {"pytorch_schedule", PytorchScheduleClass(plan.schedule)},
          {"csv_format", with_communication ? "compute_comms" : "compute_only"},
          {"pipeline_ranks", plan.num_ranks()},
          {"microbatches", plan.microbatches},
          {"replicas", plan.replicas},
          {"global_batch", plan.global_batch},
          // The split points assume each rank's layers split over t devices (t = 1: whole).
          {"tensor_parallel", plan.tensor_parallel},
          {"sharded_optimizer", plan.sharded_optimizer},
          {"stages", stages}};
}

}  // namespace gpipe
