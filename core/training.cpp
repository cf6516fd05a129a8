#include "core/training.h"

#include <cmath>
#include <numbers>
#include <set>
#include <vector>

#include "core/json_reader.h"
#include "core/suggest.h"

namespace gpipe {
namespace {

constexpr NameTable<LrDecay, 3> kLrDecays = {
    {{LrDecay::kConstant, "constant"}, {LrDecay::kLinear, "linear"}, {LrDecay::kCosine, "cosine"}}};

const std::set<std::string> kTrainingFields = {"learning_rate", "betas",    "eps",           "weight_decay",
                                               "decay_1d",      "momentum", "clip_grad_norm", "schedule"};
const std::set<std::string> kScheduleFields = {"warmup_steps", "decay", "decay_steps", "min_learning_rate"};

// The first key of `object` that is not in `known`, as an error naming it and the known ones.
void RejectUnknown(ObjectReader& r, const nlohmann::json& object, const std::set<std::string>& known) {
  for (const auto& [key, value] : object.items()) {
    if (known.count(key) > 0) continue;
    r.Fail(key, "is not a setting here; known: " +
                    ChoicesAndSuggestion(key, std::vector<std::string>(known.begin(), known.end())));
    return;
  }
}

LrSchedule ScheduleFromJson(ObjectReader& parent, const TrainingSpec& training) {
  LrSchedule schedule;
  const nlohmann::json* json = parent.OptionalObject("schedule");
  if (json == nullptr || !parent.status().ok()) return schedule;
  ObjectReader r(*json, parent.Where("schedule"));
  r.SetKnownFields(kScheduleFields);
  RejectUnknown(r, *json, kScheduleFields);
  schedule.warmup_steps = r.OptionalInteger("warmup_steps", 0, INT32_MAX, 0);
  const std::string decay = r.OptionalString("decay", "constant");
  if (r.status().ok()) {
    Expected<LrDecay> kind = ParseName(kLrDecays, decay, "decay");
    if (kind.ok()) {
      schedule.decay = *kind;
    } else {
      r.Fail(kind.status().WithContext(r.Where("decay")));
    }
  }
  if (r.status().ok() && schedule.decay != LrDecay::kConstant && !r.Has("decay_steps")) {
    r.Fail("decay_steps", std::string("is missing; a \"") + LrDecayName(schedule.decay) +
                              "\" decay needs the step at which it reaches min_learning_rate");
  }
  if (r.status().ok() && schedule.decay != LrDecay::kConstant) {
    schedule.decay_steps = r.Integer("decay_steps", 1, INT32_MAX);
    if (r.status().ok() && schedule.decay_steps <= schedule.warmup_steps) {
      r.Fail("decay_steps", "is " + std::to_string(schedule.decay_steps) + ", not after the warm-up's " +
                                std::to_string(schedule.warmup_steps) + " steps; the decay ends at step "
                                "decay_steps, counted from the first step, warm-up included");
    }
    const std::optional<double> min_lr = r.OptionalNumber("min_learning_rate", 0.0);
    schedule.min_learning_rate = min_lr.value_or(0.0);
    if (r.status().ok() && schedule.min_learning_rate > training.learning_rate) {
      r.Fail("min_learning_rate", "is above the learning rate it decays from (" +
                                      std::to_string(training.learning_rate) + ")");
    }
  } else if (r.status().ok()) {
    for (const char* key : {"decay_steps", "min_learning_rate"}) {
      if (r.Has(key)) r.Fail(key, "only applies to a \"linear\" or \"cosine\" decay; add \"decay\" or remove it");
    }
  }
  parent.Fail(r.status());
  return schedule;
}

}  // namespace

const char* LrDecayName(LrDecay decay) { return NameOf(kLrDecays, decay); }

double LearningRateAt(const TrainingSpec& training, int64_t step) {
  const LrSchedule& s = training.schedule;
  const double peak = training.learning_rate;
  if (step < s.warmup_steps) return peak * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  if (s.decay == LrDecay::kConstant) return peak;
  if (step >= s.decay_steps) return s.min_learning_rate;
  const double progress =
      static_cast<double>(step - s.warmup_steps) / static_cast<double>(s.decay_steps - s.warmup_steps);
  const double fraction = s.decay == LrDecay::kLinear ? 1.0 - progress : 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return s.min_learning_rate + fraction * (peak - s.min_learning_rate);
}

TrainingSpec TrainingFromJson(ObjectReader& model, bool has_legacy_learning_rate, double legacy_learning_rate) {
  TrainingSpec training;
  if (has_legacy_learning_rate) training.learning_rate = legacy_learning_rate;
  const nlohmann::json* json = model.OptionalObject("training");
  if (json == nullptr || !model.status().ok()) return training;
  ObjectReader r(*json, model.Where("training"));
  r.SetKnownFields(kTrainingFields);
  RejectUnknown(r, *json, kTrainingFields);
  if (r.Has("learning_rate")) {
    if (has_legacy_learning_rate) {
      r.Fail("learning_rate", "is given here and at the top of the model; keep this one and remove the other");
    }
    training.learning_rate = r.NumberAbove("learning_rate", 0.0);
  }
  if (const nlohmann::json* betas = r.Raw("betas"); betas != nullptr && r.status().ok()) {
    const bool pair = betas->is_array() && betas->size() == 2 && (*betas)[0].is_number() && (*betas)[1].is_number();
    if (!pair || (*betas)[0].get<double>() < 0 || (*betas)[0].get<double>() >= 1 || (*betas)[1].get<double>() < 0 ||
        (*betas)[1].get<double>() >= 1) {
      r.Fail("betas", "is " + Describe(*betas) + "; give two numbers in [0, 1), e.g. [0.9, 0.95]");
    } else {
      training.betas = {(*betas)[0].get<double>(), (*betas)[1].get<double>()};
    }
  }
  if (r.Has("eps")) training.eps = r.NumberAbove("eps", 0.0);
  training.weight_decay = r.OptionalNumber("weight_decay", 0.0).value_or(0.0);
  training.decay_1d = r.OptionalBool("decay_1d", false);
  training.momentum = r.OptionalNumber("momentum", 0.0).value_or(0.9);
  if (r.status().ok() && training.momentum >= 1) r.Fail("momentum", "is " + std::to_string(training.momentum) + "; give a number in [0, 1)");
  training.clip_grad_norm = r.OptionalNumber("clip_grad_norm", 0.0).value_or(0.0);
  training.schedule = ScheduleFromJson(r, training);
  model.Fail(r.status());
  return training;
}

nlohmann::json TrainingToJson(const TrainingSpec& training) {
  nlohmann::json json = {{"learning_rate", training.learning_rate},
                         {"betas", {training.betas[0], training.betas[1]}},
                         {"eps", training.eps},
                         {"weight_decay", training.weight_decay},
                         {"decay_1d", training.decay_1d},
                         {"momentum", training.momentum},
                         {"clip_grad_norm", training.clip_grad_norm}};
  const LrSchedule& s = training.schedule;
  nlohmann::json schedule = {{"warmup_steps", s.warmup_steps}, {"decay", LrDecayName(s.decay)}};
  if (s.decay != LrDecay::kConstant) {
    schedule["decay_steps"] = s.decay_steps;
    schedule["min_learning_rate"] = s.min_learning_rate;
  }
  json["schedule"] = std::move(schedule);
  return json;
}

}  // namespace gpipe
