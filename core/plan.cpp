#include "core/plan.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <set>
#include <utility>

#include "core/json_reader.h"
#include "core/schedule/placement.h"
#include "core/suggest.h"

namespace gpipe {
namespace {

constexpr NameTable<ScheduleKind, 7> kScheduleNames = {{
    {ScheduleKind::kGpipe, "gpipe"},
    {ScheduleKind::k1F1B, "1f1b"},
    {ScheduleKind::kInterleaved1F1B, "interleaved-1f1b"},
    {ScheduleKind::kZbH1, "zb-h1"},
    {ScheduleKind::kInterleavedZb, "interleaved-zb"},
    {ScheduleKind::kZbV, "zb-v"},
    {ScheduleKind::kDualPipeV, "dualpipe-v"},
}};

constexpr NameTable<Optimizer, 4> kOptimizerNames = {{
    {Optimizer::kSgd, "sgd"},
    {Optimizer::kMomentum, "momentum"},
    {Optimizer::kAdam, "adam"},
    {Optimizer::kAdamMixed, "adam-mixed"},
}};

// No model has more layers than this; it keeps layer indices far from int's limits.
constexpr int64_t kMaxLayers = int64_t{1} << 24;

const std::set<std::string> kKnownTop = {"format",       "profile",      "cluster",   "schedule",
                                         "microbatches", "global_batch", "replicas",  "placement",
                                         "optimizer",    "precision",    "stages",    "tensor_parallel",
                                         "sharded_optimizer"};

constexpr NameTable<Placement, 2> kPlacementNames = {{
    {Placement::kPipelineMajor, "pipeline-major"},
    {Placement::kReplicaMajor, "replica-major"},
}};

// Reads `key` as an embedded object or as a path relative to base_dir, then parses it with
// `parse`. Records the path in `*path`.
template <typename T, typename Parse, typename Load>
T ReadPart(ObjectReader& r, const char* key, const std::string& base_dir, std::string* path,
           Parse parse, Load load) {
  const nlohmann::json* raw = r.Raw(key);
  if (!r.status().ok()) return T{};
  if (raw == nullptr) {
    r.Fail(key, "missing; give the object itself or the path of its JSON file");
    return T{};
  }
  Expected<T> part = Status::Invalid("unreachable");
  if (raw->is_string() && raw->get_ref<const std::string&>().empty()) {
    r.Fail(key, "is an empty path; give the object itself or the path of its JSON file");
    return T{};
  }
  if (raw->is_string()) {
    // Read as a string field: a path with a newline in it would break the error line below.
    if (r.String(key).empty()) return T{};
    std::filesystem::path file(raw->get<std::string>());
    if (file.is_relative() && !base_dir.empty()) file = std::filesystem::path(base_dir) / file;
    *path = file.string();
    part = load(path->c_str());
    if (!part.ok()) {
      r.Fail(key, "names " + Describe(*raw) + ", which did not load: " +
                      part.status().message());
      return T{};
    }
  } else if (raw->is_object()) {
    part = parse(*raw, r.Where(key));
    if (!part.ok()) {
      r.Fail(part.status());
      return T{};
    }
  } else {
    r.Fail(key, "expected an object or a file path, got " + Describe(*raw));
    return T{};
  }
  return std::move(part).value();
}

Status ValidateStages(const Plan& plan, const std::string& where) {
  const std::string stages = where + ".stages";
  const int num_layers = plan.profile.num_layers();
  if (plan.stages.empty()) return Status::Invalid(stages + ": the plan has no stages; it needs at least one");
  int expected_first = 0;
  for (int s = 0; s < plan.num_stages(); ++s) {
    const StagePlan& stage = plan.stages[s];
    const std::string at = stages + "[" + std::to_string(s) + "].layers";
    const std::string range =
        "[" + std::to_string(stage.first_layer) + ", " + std::to_string(stage.end_layer) + ")";
    if (stage.first_layer >= stage.end_layer) {
      return Status::Invalid(at + ": " + range + " is empty; every stage needs at least one layer");
    }
    if (stage.first_layer != expected_first) {
      return Status::Invalid(at + ": " + range + " should start at layer " +
                             std::to_string(expected_first) +
                             (stage.first_layer < expected_first ? "; it overlaps the stage before"
                                                                 : "; layers in between belong to no stage"));
    }
    if (stage.end_layer > num_layers) {
      return Status::Invalid(at + ": " + range + " runs past the profile's " +
                             std::to_string(num_layers) + " layers");
    }
    if (stage.remat_layers < 0 || stage.remat_layers > stage.num_layers()) {
      return Status::Invalid(stages + "[" + std::to_string(s) + "].remat_layers: " +
                             std::to_string(stage.remat_layers) + " is not between 1 and the stage's " +
                             std::to_string(stage.num_layers()) + " layers " + range);
    }
    if (stage.remat_layers > 0 && !stage.remat) {
      return Status::Invalid(stages + "[" + std::to_string(s) + "].remat_layers: " +
                             std::to_string(stage.remat_layers) +
                             " layers recompute, but the stage says \"remat\": false; drop one of the two");
    }
    expected_first = stage.end_layer;
  }
  if (expected_first != num_layers) {
    return Status::Invalid(stages + ": the stages end at layer " + std::to_string(expected_first) +
                           " but the profile has " + std::to_string(num_layers) +
                           " layers; the last stage must end at " + std::to_string(num_layers));
  }
  return Status::Ok();
}

Status ValidateLayout(const Plan& plan, const std::string& where) {
  const int ranks = plan.num_ranks();
  const int stages = plan.num_stages();
  std::vector<int> used(ranks, 0);
  for (const StagePlan& stage : plan.stages) ++used[stage.rank];
  for (int r = 0; r < ranks; ++r) {
    if (used[r] == 0) {
      return Status::Invalid(where + ".stages: no stage is on rank " + std::to_string(r) +
                             "; ranks must be numbered 0..K-1 without gaps");
    }
  }
  GPIPE_RETURN_IF_ERROR(CheckStageCount(plan.schedule, ranks, stages)
                            .WithContext(where + (LayoutOf(plan.schedule) == StageLayout::kOnePerRank ? ".schedule" : ".stages")));
  const std::vector<int> expected = PlaceStages(plan.schedule, ranks, stages);
  for (int s = 0; s < stages; ++s) {
    if (plan.stages[s].rank != expected[s]) {
      return Status::Invalid(where + ".stages[" + std::to_string(s) + "].rank: is " +
                             std::to_string(plan.stages[s].rank) + ", expected " + std::to_string(expected[s]) +
                             " (" + ScheduleName(plan.schedule) + ": " + DescribeLayout(LayoutOf(plan.schedule)) + ")");
    }
  }
  GPIPE_RETURN_IF_ERROR(
      CheckMicrobatchCount(plan.schedule, ranks, plan.microbatches).WithContext(where + ".microbatches"));
  return Status::Ok();
}

}  // namespace

const char* ScheduleName(ScheduleKind kind) { return NameOf(kScheduleNames, kind); }

Expected<ScheduleKind> ParseScheduleKind(const std::string& name) {
  return ParseName(kScheduleNames, name, "schedule");
}

const std::vector<ScheduleKind>& AllScheduleKinds() {
  static const std::vector<ScheduleKind> kinds = {
      ScheduleKind::kGpipe,          ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B, ScheduleKind::kZbH1,
      ScheduleKind::kInterleavedZb, ScheduleKind::kZbV,  ScheduleKind::kDualPipeV};
  return kinds;
}

const char* PlacementName(Placement placement) { return NameOf(kPlacementNames, placement); }

Expected<Placement> ParsePlacement(const std::string& name) { return ParseName(kPlacementNames, name, "placement"); }

const char* OptimizerName(Optimizer optimizer) { return NameOf(kOptimizerNames, optimizer); }

Expected<Optimizer> ParseOptimizer(const std::string& name) {
  return ParseName(kOptimizerNames, name, "optimizer");
}

Status CheckPrecision(const std::string& precision, const std::string& dtype, const std::string& profile_name) {
  if (precision == dtype) return Status::Ok();
  const std::vector<std::string>& known = Precisions();
  if (std::find(known.begin(), known.end(), precision) == known.end()) {
    return Status::Invalid("unknown precision \"" + precision + "\"; known: " + ChoicesAndSuggestion(precision, known));
  }
  return Status::Invalid(profile_name + " was measured in " + dtype + " (its dtype), and a plan is priced by a profile of "
                         "the precision it runs in: measure one with `gpipe-plan profile --precision " + precision + "`");
}

double StaticBytesPerParamByte(Optimizer optimizer, const std::string& dtype, int optimizer_shards) {
  double state = 0.0;  // fp32 bytes of optimizer state per parameter
  switch (optimizer) {
    case Optimizer::kSgd: state = 0.0; break;
    case Optimizer::kMomentum: state = 4.0; break;
    case Optimizer::kAdam:
    case Optimizer::kAdamMixed: state = 8.0; break;
  }
  const int counted = BytesPerParameter(dtype);
  const double copy = counted < 4 ? counted : 0.0;  // autocast's 16-bit copy of the weights
  return (4.0 + 4.0 + state / std::max(1, optimizer_shards) + copy) / counted;
}

Optimizer DefaultOptimizer(const Profile& profile) {
  return profile.dtype == "fp32" ? Optimizer::kAdam : Optimizer::kAdamMixed;
}

int Plan::num_ranks() const {
  int ranks = 0;
  for (const StagePlan& stage : stages) ranks = std::max(ranks, stage.rank + 1);
  return ranks;
}

std::vector<int> Plan::StageRanks() const {
  std::vector<int> ranks;
  ranks.reserve(stages.size());
  for (const StagePlan& stage : stages) ranks.push_back(stage.rank);
  return ranks;
}

Status CheckDevicesFit(int ranks, int replicas, int devices, int tensor_parallel) {
  const int64_t needed = int64_t{tensor_parallel} * ranks * replicas;
  if (needed <= devices) return Status::Ok();
  if (tensor_parallel > 1) {
    return Status::Invalid("t x K x D = " + std::to_string(tensor_parallel) + " x " + std::to_string(ranks) + " x " +
                           std::to_string(replicas) + " = " + std::to_string(needed) +
                           " devices is more than the cluster's " + std::to_string(devices));
  }
  return Status::Invalid("K x D = " + std::to_string(ranks) + " ranks x " + std::to_string(replicas) + " replicas = " +
                         std::to_string(needed) + " devices is more than the cluster's " + std::to_string(devices));
}

Status CheckTensorParallel(int tensor_parallel, const Profile& profile, const Cluster& cluster) {
  if (tensor_parallel < 1) {
    return Status::Invalid("t (tensor parallelism) must be at least 1, got " + std::to_string(tensor_parallel));
  }
  if (tensor_parallel == 1 && profile.tensor_parallel == 1) return Status::Ok();
  const std::vector<int> sizes = profile.TensorParallelSizes();
  if (std::find(sizes.begin(), sizes.end(), tensor_parallel) == sizes.end()) {
    std::string known;
    for (int t : sizes) known += (known.empty() ? "" : ", ") + std::to_string(t);
    if (profile.tensor_parallel > 1) {
      return Status::Invalid("the profile is one device's share of a " + std::to_string(profile.tensor_parallel) +
                             "-way tensor-parallel group, so t must be " + std::to_string(profile.tensor_parallel) +
                             ", not " + std::to_string(tensor_parallel));
    }
    return Status::Invalid("t = " + std::to_string(tensor_parallel) + ": the profile prices tensor parallelism t in {" +
                           known + "} only (its tensor_parallel_measurements; profiles/generate.py writes them for "
                           "transformers; a measured profile plans with t = 1)");
  }
  const int per_node = cluster.devices_per_node.value_or(cluster.devices);
  if (per_node % tensor_parallel != 0) {
    return Status::Invalid("t = " + std::to_string(tensor_parallel) + " does not divide the " +
                           std::to_string(per_node) + " devices of a node; a tensor-parallel group lies inside one node");
  }
  return Status::Ok();
}

Status CheckBatchSplit(int64_t global_batch, int replicas, int microbatches) {
  const int64_t per_step = int64_t{replicas} * microbatches;
  if (global_batch % per_step == 0) return Status::Ok();
  return Status::Invalid("the global batch " + std::to_string(global_batch) + " does not split into D x M = " +
                         std::to_string(replicas) + " x " + std::to_string(microbatches) +
                         " micro-batches of whole samples; use a multiple of " + std::to_string(per_step));
}

Status CheckPipelineShape(int64_t global_batch, int ranks, int replicas, int microbatches, int devices,
                          int tensor_parallel) {
  const auto at_least_one = [](int64_t value, const char* what) {
    return value >= 1 ? Status::Ok()
                      : Status::Invalid(std::string(what) + " must be at least 1, got " + std::to_string(value));
  };
  GPIPE_RETURN_IF_ERROR(at_least_one(global_batch, "the global batch"));
  GPIPE_RETURN_IF_ERROR(at_least_one(ranks, "K (ranks per pipeline)"));
  GPIPE_RETURN_IF_ERROR(at_least_one(replicas, "D (replicas)"));
  GPIPE_RETURN_IF_ERROR(at_least_one(microbatches, "M (micro-batches per replica)"));
  if (devices > 0) GPIPE_RETURN_IF_ERROR(CheckDevicesFit(ranks, replicas, devices, tensor_parallel));
  return CheckBatchSplit(global_batch, replicas, microbatches);
}

Status ValidatePlan(const Plan& plan, const std::string& where) {
  GPIPE_RETURN_IF_ERROR(ValidateStages(plan, where));
  GPIPE_RETURN_IF_ERROR(ValidateLayout(plan, where));
  GPIPE_RETURN_IF_ERROR(
      CheckTensorParallel(plan.tensor_parallel, plan.profile, plan.cluster).WithContext(where + ".tensor_parallel"));
  if (plan.sharded_optimizer && plan.replicas < 2) {
    return Status::Invalid(where + ".sharded_optimizer: shards the optimizer's state over the D replicas, and the plan "
                           "has 1; drop it, or plan with D >= 2");
  }
  GPIPE_RETURN_IF_ERROR(
      CheckDevicesFit(plan.num_ranks(), plan.replicas, plan.cluster.devices, plan.tensor_parallel).WithContext(where));
  return CheckBatchSplit(plan.global_batch, plan.replicas, plan.microbatches).WithContext(where + ".global_batch");
}

Status CheckExecutorRuns(const Plan& plan, const std::string& where) {
  if (plan.tensor_parallel == 1) return Status::Ok();
  return Status::Invalid(where + ": splits each layer over t = " + std::to_string(plan.tensor_parallel) +
                         " devices (tensor parallelism), which gpipe-plan plans and simulates but does not run: "
                         "the executor runs each rank on one device; plan with --tensor-parallel 1 for a plan it runs "
                         "(docs/executor.md)");
}

Expected<Plan> PlanFromJson(const nlohmann::json& json, const std::string& where,
                            const std::string& base_dir) {
  GPIPE_RETURN_IF_ERROR(CheckFormat(json, where, kPlanFormat));
  ObjectReader r(json, where);
  r.SetKnownFields(kKnownTop);
  Plan plan;
  plan.profile = ReadPart<Profile>(r, "profile", base_dir, &plan.profile_path, ProfileFromJson,
                                   [](const char* p) { return LoadProfile(p); });
  plan.cluster = ReadPart<Cluster>(r, "cluster", base_dir, &plan.cluster_path, ClusterFromJson,
                                   [](const char* p) { return LoadCluster(p); });
  const std::string schedule = r.String("schedule");
  if (r.status().ok()) {
    Expected<ScheduleKind> kind = ParseScheduleKind(schedule);
    if (kind.ok()) plan.schedule = *kind; else r.Fail("schedule", kind.status().message());
  }
  plan.microbatches = static_cast<int>(r.Integer("microbatches", 1, 1 << 24));
  plan.global_batch = r.Integer("global_batch", 1);
  plan.replicas = static_cast<int>(r.OptionalInteger("replicas", 1, 1 << 20, 1));
  if (r.Has("placement")) {
    const std::string name = r.String("placement");
    if (r.status().ok()) {
      Expected<Placement> placement = ParsePlacement(name);
      if (placement.ok()) plan.placement = *placement; else r.Fail("placement", placement.status().message());
    }
  }
  plan.optimizer = DefaultOptimizer(plan.profile);
  if (r.Has("optimizer")) {
    const std::string name = r.String("optimizer");
    if (r.status().ok()) {
      Expected<Optimizer> optimizer = ParseOptimizer(name);
      if (optimizer.ok()) plan.optimizer = *optimizer; else r.Fail("optimizer", optimizer.status().message());
    }
  }
  if (r.Has("precision")) {
    const std::string precision = r.String("precision");
    if (r.status().ok()) {
      const Status checked = CheckPrecision(precision, plan.profile.dtype,
                                            plan.profile_path.empty() ? "the plan's profile" : plan.profile_path);
      if (!checked.ok()) r.Fail("precision", checked.message());
    }
  }
  plan.tensor_parallel = static_cast<int>(r.OptionalInteger("tensor_parallel", 1, 1 << 16, plan.profile.tensor_parallel));
  plan.sharded_optimizer = r.OptionalBool("sharded_optimizer", false);
  const nlohmann::json* stages = r.Array("stages");
  for (size_t i = 0; stages != nullptr && i < stages->size() && r.status().ok(); ++i) {
    ObjectReader s((*stages)[i], r.Where("stages") + "[" + std::to_string(i) + "]");
    StagePlan stage;
    const nlohmann::json* layers = s.Has("layers") ? s.Raw("layers") : s.Array("layers");
    if (layers != nullptr && s.status().ok()) {
      const bool pair = layers->is_array() && layers->size() == 2 && (*layers)[0].is_number_integer() &&
                        (*layers)[1].is_number_integer();
      // Compared as signed and unsigned apart: a huge unsigned value must not wrap to a small one.
      const auto in_range = [](const nlohmann::json& index) {
        return index.is_number_unsigned() ? index.get<uint64_t>() <= static_cast<uint64_t>(kMaxLayers)
                                          : index.get<int64_t>() >= 0 && index.get<int64_t>() <= kMaxLayers;
      };
      if (!pair) {
        s.Fail("layers", "expected [first, end) as two whole numbers, e.g. [0, 12], got " +
                             Describe(*layers));
      } else if (!in_range((*layers)[0]) || !in_range((*layers)[1])) {
        s.Fail("layers", "layer indices out of range: " + Describe(*layers) + "; layers are numbered from 0");
      } else {
        stage.first_layer = (*layers)[0].get<int>();
        stage.end_layer = (*layers)[1].get<int>();
      }
    }
    stage.rank = static_cast<int>(s.Integer("rank", 0, 1 << 20));
    stage.remat = s.OptionalBool("remat", false);
    if (s.Has("remat_layers")) {
      // "remat_layers": n alone means remat of the first n layers; n = all of them is plain remat.
      stage.remat_layers = static_cast<int>(s.Integer("remat_layers", 1, kMaxLayers));
      if (!s.Has("remat")) stage.remat = true;
      if (stage.remat && stage.remat_layers == stage.num_layers()) stage.remat_layers = 0;
    }
    r.Fail(s.status());
    plan.stages.push_back(stage);
  }
  if (!r.status().ok()) return r.status();
  plan.extra = UnknownFields(json, kKnownTop);
  GPIPE_RETURN_IF_ERROR(ValidatePlan(plan, where));
  return plan;
}

Expected<Plan> LoadPlan(const std::string& path) {
  Expected<nlohmann::json> json = LoadJsonFile(path);
  if (!json.ok()) return json.status();
  const std::string base_dir = std::filesystem::path(path).parent_path().string();
  return PlanFromJson(*json, path, base_dir);
}

nlohmann::json PlanToJson(const Plan& plan) {
  nlohmann::json json = plan.extra;
  json["format"] = kPlanFormat;
  json["profile"] = ProfileToJson(plan.profile);
  json["cluster"] = ClusterToJson(plan.cluster);
  json["schedule"] = ScheduleName(plan.schedule);
  json["microbatches"] = plan.microbatches;
  json["global_batch"] = plan.global_batch;
  json["replicas"] = plan.replicas;
  json["placement"] = PlacementName(plan.placement);
  json["optimizer"] = OptimizerName(plan.optimizer);
  json["precision"] = plan.precision();
  if (plan.tensor_parallel > 1) json["tensor_parallel"] = plan.tensor_parallel;
  if (plan.sharded_optimizer) json["sharded_optimizer"] = true;
  nlohmann::json stages = nlohmann::json::array();
  for (const StagePlan& stage : plan.stages) {
    nlohmann::json entry = {{"layers", {stage.first_layer, stage.end_layer}},
                            {"rank", stage.rank},
                            {"remat", stage.remat}};
    if (stage.remat && stage.remat_layers > 0) entry["remat_layers"] = stage.remat_layers;
    stages.push_back(std::move(entry));
  }
  json["stages"] = std::move(stages);
  return json;
}

}  // namespace gpipe
