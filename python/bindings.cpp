// gpipe_plan._core: the planner, simulator and exporter for Python, over JSON text. Each function
// calls what the CLI's subcommand calls (api/answers.h, api/plan_request.h, core/'s loaders), so
// it gives the CLI's answers; errors arrive as gpipe_plan.Error or gpipe_plan.UsageError (a
// ValueError: the arguments are wrong) with the CLI's one-line message. python/gpipe_plan/__init__.py
// turns dicts and paths into these arguments and the JSON text back into dicts.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "api/answers.h"
#include "api/plan_request.h"
#include "core/cluster.h"
#include "core/plan.h"
#include "core/profile.h"

namespace nb = nanobind;

namespace gpipe::python {
namespace {

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct Usage : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

template <typename T>
T Take(Expected<T> value) {
  if (value.ok()) return std::move(*value);
  if (value.status().usage()) throw Usage(value.status().message());
  throw Failure(value.status().message());
}

nlohmann::json Parse(const std::string& text, const std::string& what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Usage(what + ": not JSON: " + e.what());
  }
}

// A source is a file's path (is_path) or the file's JSON text.
Profile ProfileOf(const std::string& source, bool is_path) {
  return Take(is_path ? LoadProfile(source) : ProfileFromJson(Parse(source, "profile"), "profile"));
}
Cluster ClusterOf(const std::string& source, bool is_path) {
  return Take(is_path ? LoadCluster(source) : ClusterFromJson(Parse(source, "cluster"), "cluster"));
}
Plan PlanOf(const std::string& source, bool is_path) {
  return Take(is_path ? LoadPlan(source) : PlanFromJson(Parse(source, "plan"), "plan", "."));
}

// The keyword arguments of gpipe_plan.plan, as JSON, into the CLI's options: the same names as
// the flags, with underscores (time_limit is --time-limit).
api::PlanOptions OptionsOf(const nlohmann::json& json) {
  api::PlanOptions o;
  const auto number = [](const nlohmann::json& value, const std::string& key) {
    if (!value.is_number()) throw Usage("--" + key + ": must be a number, got " + value.dump());
    return value.get<double>();
  };
  const auto whole = [&](const nlohmann::json& value, const std::string& key) {
    if (!value.is_number_integer()) throw Usage("--" + key + ": must be a whole number, got " + value.dump());
    return value.get<int64_t>();
  };
  const auto text = [](const nlohmann::json& value, const std::string& key) {
    if (!value.is_string()) throw Usage("--" + key + ": must be a string, got " + value.dump());
    return value.get<std::string>();
  };
  for (const auto& [name, value] : json.items()) {
    std::string key = name;
    for (char& c : key) c = c == '_' ? '-' : c;
    if (value.is_null()) continue;
    if (key == "global-batch") o.global_batch = whole(value, key);
    else if (key == "devices") o.devices = static_cast<int>(whole(value, key));
    else if (key == "stages") o.stages = static_cast<int>(whole(value, key));
    else if (key == "replicas") o.replicas = static_cast<int>(whole(value, key));
    else if (key == "microbatches") o.microbatches = static_cast<int>(whole(value, key));
    else if (key == "chunks") o.chunks = static_cast<int>(whole(value, key));
    else if (key == "tensor-parallel") o.tensor_parallel = static_cast<int>(whole(value, key));
    else if (key == "memory") o.memory = value.is_number_integer() ? std::to_string(value.get<int64_t>()) : text(value, key);
    else if (key == "schedule") o.schedule = text(value, key);
    else if (key == "placement") o.placement = text(value, key);
    else if (key == "optimizer") o.optimizer = text(value, key);
    else if (key == "precision") o.precision = text(value, key);
    else if (key == "remat") o.remat = text(value, key);
    else if (key == "sharded-optimizer") {
      o.sharded_optimizer = value.is_boolean() ? (value.get<bool>() ? "on" : "off") : text(value, key);
    } else if (key == "oversubscribe") {
      if (!value.is_boolean()) throw Usage("--oversubscribe: must be True or False, got " + value.dump());
      o.oversubscribe = value.get<bool>();
    } else if (key == "max-nodes") o.max_nodes = whole(value, key);
    else if (key == "time-limit") o.time_limit_s = number(value, key);
    else if (key == "gap") o.gap = number(value, key);
    else {
      throw Usage("unknown option \"" + name + "\"; the options are plan's flags with underscores: devices, memory, "
                  "stages, replicas, microbatches, schedule, chunks, remat, placement, tensor_parallel, "
                  "sharded_optimizer, optimizer, precision, oversubscribe, max_nodes, time_limit, gap");
    }
  }
  return o;
}

}  // namespace
}  // namespace gpipe::python

NB_MODULE(_core, m) {
  using namespace gpipe;
  using namespace gpipe::python;
  nb::exception<Failure>(m, "Error", PyExc_RuntimeError);
  nb::exception<Usage>(m, "UsageError", PyExc_ValueError);
  m.def("profile", [](const std::string& source, bool is_path) { return ProfileToJson(ProfileOf(source, is_path)).dump(); },
        "A profile from a file's path or JSON text, checked, as JSON text.");
  m.def("cluster", [](const std::string& source, bool is_path) { return ClusterToJson(ClusterOf(source, is_path)).dump(); },
        "A cluster from a file's path or JSON text, checked, as JSON text.");
  m.def(
      "plan",
      [](const std::string& profile, bool profile_is_path, const std::string& cluster, bool cluster_is_path,
         const std::string& options_json) {
        const api::PlanOptions options = OptionsOf(Parse(options_json, "options"));
        SearchRequest request =
            Take(api::MakePlanRequest(ProfileOf(profile, profile_is_path), ClusterOf(cluster, cluster_is_path),
                                      profile_is_path ? profile : std::string("profile"), options));
        request.started_at_s = ClockOf(request)();  // one limit for the search and the report of what would fit
        Expected<SearchResult> result = SearchPlans(request);
        if (!result.ok() && result.status().usage()) {
          throw Usage(result.status().WithContext(api::PinFlags(options)).message());
        }
        return api::PlanAnswer(request, Take(std::move(result))).dump();
      },
      "What `gpipe-plan plan --json` prints: the best plan with its prediction and alternatives, or why none fits.");
  m.def(
      "simulate",
      [](const std::string& plan, bool is_path) { return Take(api::SimulateAnswer(PlanOf(plan, is_path))).dump(); },
      "What `gpipe-plan simulate --json` prints for a plan.");
  m.def(
      "export",
      [](const std::string& plan, bool is_path, const std::string& format, bool with_communication) {
        Expected<std::string> text = api::ExportAnswer(PlanOf(plan, is_path), format, with_communication);
        // (as the CLI: the plan's file names the error)
        if (!text.ok() && is_path) return Take(Expected<std::string>(text.status().WithContext(plan)));
        return Take(std::move(text));
      },
      "What `gpipe-plan export --format FORMAT` writes for a plan.");
}
