#include "core/run_record.h"

#include <cmath>
#include <limits>
#include <set>

#include "core/json_reader.h"
#include "core/statistics.h"
#include "core/text.h"
#include "core/units.h"

namespace gpipe {
namespace {

const std::set<std::string> kKnownTop = {"format", "model", "plan", "schedule", "device", "backend",
                                         "threads_per_rank", "global_batch", "microbatches", "num_ranks",
                                         "replicas", "precision", "memory_measure", "clock", "steps", "throughput_samples_per_s",
                                         "ranks"};

template <typename T, typename Parse>
Status ReadList(ObjectReader& r, std::string_view key, std::vector<T>& out, Parse parse) {
  const nlohmann::json* list = r.Array(key);
  if (!r.status().ok()) return r.status();
  for (size_t i = 0; i < list->size(); ++i) {
    Expected<T> item = parse((*list)[i], r.Where(key) + "[" + std::to_string(i) + "]");
    if (!item.ok()) return item.status();
    out.push_back(std::move(*item));
  }
  return Status::Ok();
}

}  // namespace

Expected<StepRecord> StepRecordFromJson(const nlohmann::json& json, const std::string& where) {
  ObjectReader r(json, where);
  StepRecord step;
  step.step = static_cast<int>(r.Integer("step", 0, INT32_MAX));
  const nlohmann::json* loss = r.Raw("loss");
  if (loss != nullptr && loss->is_number()) {
    step.loss = loss->get<double>();  // may legitimately be large; NaN is written as null
  } else if (loss != nullptr && loss->is_null()) {
    step.loss = std::numeric_limits<double>::quiet_NaN();
  } else {
    r.Fail("loss", "is " + (loss ? Describe(*loss) : std::string("missing")) + "; expected a number");
  }
  step.time_ms = r.Number("time_ms", 0.0);
  if (r.Has("learning_rate")) step.learning_rate = r.Number("learning_rate", 0.0);
  if (const nlohmann::json* norm = r.Raw("grad_norm"); norm != nullptr) {
    if (norm->is_number() && norm->get<double>() >= 0) {
      step.grad_norm = norm->get<double>();
    } else if (norm->is_null()) {
      step.grad_norm = std::numeric_limits<double>::quiet_NaN();  // an overflowed norm is written as null
    } else {
      r.Fail("grad_norm", "is " + Describe(*norm) + "; expected a number >= 0 or null");
    }
  }
  if (r.Has("eval_loss")) {
    const nlohmann::json* eval = r.Raw("eval_loss");
    step.eval_loss = eval->is_number() ? eval->get<double>() : std::numeric_limits<double>::quiet_NaN();
  }
  if (r.Has("loss_scale")) step.loss_scale = r.Number("loss_scale", 0.0);
  step.skipped = r.OptionalBool("skipped", false);
  if (!r.status().ok()) return r.status();
  return step;
}

nlohmann::json StepRecordToJson(const StepRecord& s) {
  nlohmann::json step = {{"step", s.step}, {"loss", s.loss}, {"time_ms", s.time_ms}};
  if (s.learning_rate) step["learning_rate"] = *s.learning_rate;
  if (s.grad_norm) step["grad_norm"] = *s.grad_norm;
  if (s.eval_loss) step["eval_loss"] = *s.eval_loss;
  if (s.loss_scale) step["loss_scale"] = *s.loss_scale;
  if (s.skipped) step["skipped"] = true;
  return step;
}

namespace {

Expected<ActionRecord> ActionFromJson(const nlohmann::json& json, const std::string& where) {
  ObjectReader r(json, where);
  ActionRecord a;
  a.step = static_cast<int>(r.Integer("step", 0, INT32_MAX));
  const std::string text = r.String("action");
  a.start_ms = r.Number("start_ms", 0.0);
  a.end_ms = r.Number("end_ms", 0.0);
  a.recompute_ms = r.OptionalNumber("recompute_ms", 0.0).value_or(0.0);
  a.memory_bytes = r.OptionalBytes("memory_bytes", -1);
  a.peak_memory_bytes = r.OptionalBytes("peak_memory_bytes", -1);
  if (!r.status().ok()) return r.status();
  Expected<Action> action = ActionFromText(text);
  if (!action.ok()) return action.status().WithContext(r.Where("action"));
  a.action = *action;
  if (a.end_ms < a.start_ms) {
    return Status::Invalid(r.Where("end_ms") + ": " + std::to_string(a.end_ms) + " is before start_ms (" +
                           std::to_string(a.start_ms) + ")");
  }
  return a;
}

}  // namespace

std::vector<StepRecord> MeasuredSteps(const std::vector<StepRecord>& steps) {
  return {steps.begin() + (steps.size() > 1 ? 1 : 0), steps.end()};
}

std::vector<double> MeasuredStepTimes(const std::vector<StepRecord>& steps) {
  std::vector<double> times;
  for (const StepRecord& s : MeasuredSteps(steps)) times.push_back(s.time_ms);
  return times;
}

double MeasuredStepMs(const std::vector<StepRecord>& steps) { return Median(MeasuredStepTimes(steps)); }

double ThroughputOf(const std::vector<StepRecord>& steps, int64_t global_batch) {
  const double step_ms = MeasuredStepMs(steps);
  return step_ms > 0 ? static_cast<double>(global_batch) / (step_ms / 1000.0) : 0;
}

std::string FormatRunSummary(const RunRecord& record) {
  std::string out = Sprintf("%s: %zu steps, loss %.4f -> %.4f, %.1f samples/s (at the median step after the first), %s\n",
                            record.model.c_str(), record.steps.size(), record.steps.empty() ? 0.0 : record.steps.front().loss,
                            record.steps.empty() ? 0.0 : record.steps.back().loss,
                            ThroughputOf(record.steps, record.global_batch), record.backend.c_str());
  for (const RankRecord& r : record.ranks) {
    out += Sprintf("  rank %d (stages", r.rank);
    for (int s : r.stages) out += " " + std::to_string(s);
    out += Sprintf("): peak memory %s, of which parameters %s", FormatBytes(static_cast<double>(r.peak_memory_bytes)).c_str(),
                   FormatBytes(static_cast<double>(r.parameter_bytes)).c_str());
    if (r.peak_reserved_bytes > 0) out += Sprintf("; reserved %s", FormatBytes(static_cast<double>(r.peak_reserved_bytes)).c_str());
    out += "\n";
  }
  return out;
}

Expected<RankRecord> RankRecordFromJson(const nlohmann::json& json, const std::string& where) {
  ObjectReader r(json, where);
  RankRecord rank;
  rank.rank = static_cast<int>(r.Integer("rank", 0, INT32_MAX));
  rank.replica = static_cast<int>(r.OptionalInteger("replica", 0, INT32_MAX, 0));
  rank.pipeline_rank = static_cast<int>(r.OptionalInteger("pipeline_rank", 0, INT32_MAX, rank.rank));
  rank.peak_memory_bytes = r.Bytes("peak_memory_bytes");
  rank.peak_reserved_bytes = r.OptionalBytes("peak_reserved_bytes", 0);
  rank.parameter_bytes = r.OptionalBytes("parameter_bytes", r.OptionalBytes("static_memory_bytes", 0));
  if (const nlohmann::json* stages = r.Raw("stages"); stages != nullptr && r.status().ok()) {
    if (!stages->is_array()) {
      r.Fail("stages", "is " + Describe(*stages) + "; expected a list of stage numbers");
    } else {
      for (const nlohmann::json& s : *stages) {
        if (!s.is_number_integer() || s.get<int64_t>() < 0 || s.get<int64_t>() > INT32_MAX) {
          r.Fail("stages", "holds " + Describe(s) + "; stage numbers are whole numbers >= 0");
          break;
        }
        rank.stages.push_back(s.get<int>());
      }
    }
  }
  for (const char* key : {"step_peak_memory_bytes", "step_start_memory_bytes"}) {
    std::vector<int64_t>& out =
        std::string_view(key) == "step_peak_memory_bytes" ? rank.step_peak_memory_bytes : rank.step_start_memory_bytes;
    const nlohmann::json* list = r.Raw(key);
    if (list == nullptr || !r.status().ok()) continue;
    if (!list->is_array()) {
      r.Fail(key, "is " + Describe(*list) + "; expected a list of byte counts");
      continue;
    }
    for (const nlohmann::json& p : *list) {
      // Read as a double first: a float such as 1e300 has no int64 value.
      if (!p.is_number() || !(p.get<double>() >= 0) || p.get<double>() > 9.0e18) {
        r.Fail(key, "holds " + Describe(p) + "; byte counts are numbers in [0, 9e18]");
        break;
      }
      out.push_back(p.is_number_float() ? static_cast<int64_t>(std::llround(p.get<double>())) : p.get<int64_t>());
    }
  }
  if (!r.status().ok()) return r.status();
  if (r.Has("actions")) GPIPE_RETURN_IF_ERROR(ReadList(r, "actions", rank.actions, ActionFromJson));
  return rank;
}

nlohmann::json RankRecordToJson(const RankRecord& rank) {
  nlohmann::json actions = nlohmann::json::array();
  for (const ActionRecord& a : rank.actions) {
    nlohmann::json j = {{"step", a.step}, {"action", ActionToText(a.action)}, {"start_ms", a.start_ms},
                        {"end_ms", a.end_ms}};
    if (a.recompute_ms > 0) j["recompute_ms"] = a.recompute_ms;
    if (a.memory_bytes >= 0) j["memory_bytes"] = a.memory_bytes;
    if (a.peak_memory_bytes >= 0) j["peak_memory_bytes"] = a.peak_memory_bytes;
    actions.push_back(std::move(j));
  }
  return {{"rank", rank.rank},
          {"replica", rank.replica},
          {"pipeline_rank", rank.pipeline_rank},
          {"stages", rank.stages},
          {"peak_memory_bytes", rank.peak_memory_bytes},
          {"peak_reserved_bytes", rank.peak_reserved_bytes},
          {"parameter_bytes", rank.parameter_bytes},
          {"step_peak_memory_bytes", rank.step_peak_memory_bytes},
          {"step_start_memory_bytes", rank.step_start_memory_bytes},
          {"actions", std::move(actions)}};
}

Expected<RunRecord> RunRecordFromJson(const nlohmann::json& json, const std::string& where) {
  GPIPE_RETURN_IF_ERROR(CheckFormat(json, where, kRunRecordFormat));
  ObjectReader r(json, where);
  r.SetKnownFields(kKnownTop);
  RunRecord record;
  record.model = r.String("model");
  record.plan = r.OptionalString("plan", "");
  record.schedule = r.OptionalString("schedule", "");
  record.device = r.OptionalString("device", "cpu");
  record.backend = r.OptionalString("backend", "gloo");
  record.threads_per_rank = static_cast<int>(r.OptionalInteger("threads_per_rank", 0, 1 << 16, 1));
  record.global_batch = r.Integer("global_batch", 1);
  record.microbatches = static_cast<int>(r.Integer("microbatches", 1, INT32_MAX));
  record.num_ranks = static_cast<int>(r.OptionalInteger("num_ranks", 1, INT32_MAX, 1));
  record.replicas = static_cast<int>(r.OptionalInteger("replicas", 1, INT32_MAX, 1));
  record.precision = r.OptionalString("precision", "fp32");
  record.memory_measure = r.OptionalString("memory_measure", "");
  record.clock = r.OptionalString("clock", "host");
  if (record.clock != "host" && record.clock != "cuda-events") {
    r.Fail("clock", "is \"" + record.clock + "\"; expected \"host\" or \"cuda-events\"");
  }
  record.throughput_samples_per_s = r.Number("throughput_samples_per_s", 0.0);
  if (!r.status().ok()) return r.status();
  GPIPE_RETURN_IF_ERROR(ReadList(r, "steps", record.steps, StepRecordFromJson));
  GPIPE_RETURN_IF_ERROR(ReadList(r, "ranks", record.ranks, RankRecordFromJson));
  record.extra = UnknownFields(json, kKnownTop);
  return record;
}

Expected<RunRecord> LoadRunRecord(const std::string& path) { return LoadJsonAs(path, RunRecordFromJson); }

nlohmann::json RunRecordToJson(const RunRecord& record) {
  nlohmann::json json = record.extra;
  json["format"] = kRunRecordFormat;
  json["model"] = record.model;
  if (!record.plan.empty()) json["plan"] = record.plan;
  if (!record.schedule.empty()) json["schedule"] = record.schedule;
  json["device"] = record.device;
  json["backend"] = record.backend;
  json["threads_per_rank"] = record.threads_per_rank;
  json["global_batch"] = record.global_batch;
  json["microbatches"] = record.microbatches;
  json["num_ranks"] = record.num_ranks;
  json["replicas"] = record.replicas;
  json["precision"] = record.precision;
  if (!record.memory_measure.empty()) json["memory_measure"] = record.memory_measure;
  json["clock"] = record.clock;
  nlohmann::json steps = nlohmann::json::array();
  for (const StepRecord& s : record.steps) {
    steps.push_back(StepRecordToJson(s));
  }
  json["steps"] = std::move(steps);
  json["throughput_samples_per_s"] = record.throughput_samples_per_s;
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankRecord& rank : record.ranks) ranks.push_back(RankRecordToJson(rank));
  json["ranks"] = std::move(ranks);
  return json;
}

}  // namespace gpipe
