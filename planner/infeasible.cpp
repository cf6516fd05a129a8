#include "planner/infeasible.h"

#include <algorithm>
#include <functional>

#include "core/units.h"
#include "planner/remat_choices.h"

namespace gpipe {
namespace {

constexpr int kByLayerReportLayers = 256;

std::string Describe(const Plan& plan) {
  const int64_t size = plan.microbatch_size();
  return std::string(ScheduleName(plan.schedule)) +
         (plan.tensor_parallel > 1 ? ", t=" + std::to_string(plan.tensor_parallel) : std::string()) +
         ", K=" + std::to_string(plan.num_ranks()) +
         (plan.replicas > 1 ? ", D=" + std::to_string(plan.replicas) : std::string()) + ", M=" +
         std::to_string(plan.microbatches) + " micro-batches of " + std::to_string(size) + " sample" +
         (size == 1 ? "" : "s") + ", remat on " + std::to_string(RematStages(plan)) + " of " +
         std::to_string(plan.num_stages()) + " stages";
}

bool Fits(const SearchRequest& request, int devices, double* least_bytes) {
  // (only whether it fits, and then how much it needs: the program drops every stage past the limit)
  Expected<LeastMemory> least = LeastMemoryOn(request, devices, static_cast<double>(request.cluster.device_memory_bytes));
  if (!least.ok()) return false;
  *least_bytes = least->peak_bytes;
  return least->peak_bytes <= static_cast<double>(request.cluster.device_memory_bytes);
}

}  // namespace

InfeasibleReport ExplainInfeasible(const SearchRequest& asked, const SearchResult* searched) {
  // What fits in memory does not depend on how well the speed is predicted: the layouts the
  // search leaves out for sharing a node's cores (SearchRequest::oversubscribe) count here.
  SearchRequest request = asked;
  request.oversubscribe = true;
  InfeasibleReport report;
  // By layer, the least-memory program prices every n of every stage: on a thousand layers each
  // program takes tens of seconds, and the report runs several. Past kByLayerReportLayers it prices
  // whole stages (an upper bound on what remat by layer needs), and says so.
  if (request.remat == RematPolicy::kAuto && request.profile.num_layers() > kByLayerReportLayers) {
    request.remat = RematPolicy::kStages;
    report.whole_stage_programs = true;
  }
  report.limit_bytes = static_cast<double>(request.cluster.device_memory_bytes);
  report.devices = request.cluster.devices;
  report.global_batch = request.global_batch;
  report.remat_allowed = request.remat != RematPolicy::kOff;
  report.max_tensor_parallel = request.tensor_parallel.value_or(request.profile.TensorParallelSizes().back());
  report.pinned = request.ranks || request.replicas || request.microbatches || request.schedule || request.chunks;
  const std::function<double()> clock = ClockOf(request);
  const double least_started = clock();
  // What one least-memory program on these devices took: the report starts none it would not end
  // by the deadline at that pace (the scan's programs on more devices take longer still).
  double program_s = 0;
  if (searched != nullptr && searched->least_memory && searched->least_memory_remat == request.remat) {
    report.least = *searched->least_memory;  // (the search's own, on these devices)
    program_s = searched->least_memory_s;
  } else {
    if (Expected<LeastMemory> least = LeastMemoryOn(request, request.cluster.devices); least.ok()) {
      report.least = std::move(*least);
    }
    program_s = clock() - least_started;
  }
  SearchRequest free = request;
  free.ranks.reset();
  free.replicas.reset();
  free.microbatches.reset();
  free.schedule.reset();
  free.chunks.reset();
  free.progress = nullptr;
  // The report runs to the request's deadline: the time limit from `started_at_s` where the caller
  // set it (the search's and the report's one limit), else from here. The changes first (a few
  // least-memory programs on these devices), then the scan for the fewest devices gets what is left.
  const std::function<bool()> time_up = DeadlineOf(request, 1.0, &program_s);

  // Changes on these devices, each kept only when a plan then fits; remat and the optimizer are
  // checked with the pins kept, so each change is one the user can make alone.
  const auto fits = [&](const SearchRequest& changed, double* bytes) {
    if (time_up()) {
      report.changes_stopped = true;
      return false;
    }
    return Fits(changed, request.cluster.devices, bytes);
  };
  double bytes = 0;
  if (report.pinned && fits(free, &bytes)) {
    report.changes.push_back({"fewer pins (leave --stages, --replicas, --microbatches, --schedule, --chunks to the search)",
                              "", bytes});
  }
  if (request.remat == RematPolicy::kOff) {
    SearchRequest remat = request;
    remat.remat = RematPolicy::kAuto;
    if (fits(remat, &bytes)) {
      report.changes.push_back({"--remat auto", "recomputes the forward of the stages that need it: a longer step", bytes});
    }
  }
  // Optimizers with less state, the one closest to the chosen first.
  std::vector<Optimizer> lighter;
  for (Optimizer o : {Optimizer::kAdamMixed, Optimizer::kAdam, Optimizer::kMomentum, Optimizer::kSgd}) {
    const std::string& dtype = request.profile.dtype;
    if (StaticBytesPerParamByte(o, dtype) < StaticBytesPerParamByte(request.optimizer, dtype)) lighter.push_back(o);
  }
  // Less state per parameter holds less on every rank of every partition: when the lightest does
  // not fit, none does (one least-memory program instead of one per optimizer).
  double lightest_bytes = -1;  // (checked: fits, with this least memory)
  if (lighter.size() > 1) {
    SearchRequest lightest = request;
    lightest.optimizer = lighter.back();
    if (fits(lightest, &bytes)) {
      lightest_bytes = bytes;
    } else {
      lighter.clear();
    }
  }
  for (Optimizer o : lighter) {
    SearchRequest other = request;
    other.optimizer = o;
    const bool known = o == lighter.back() && lightest_bytes >= 0;
    if (known) bytes = lightest_bytes;
    if (known || fits(other, &bytes)) {
      report.changes.push_back({std::string("--optimizer ") + OptimizerName(o),
                                "less optimizer state per parameter; it changes how the model trains", bytes});
      break;
    }
  }

  report.fewest = FewestDevices(free, std::max(request.cluster.devices, request.profile.num_layers()), time_up,
                                &report.fewest_stopped, report.least ? report.least->peak_bytes : 0.0, &program_s);
  return report;
}

std::string FormatInfeasible(const InfeasibleReport& report) {
  std::string out = "No plan fits in " + FormatMemoryLimit(report.limit_bytes) + " per device on " +
                    std::to_string(report.devices) + " devices at global batch " + std::to_string(report.global_batch) +
                    ".\n";
  if (report.least) {
    const LeastMemory& least = *report.least;
    out += "The smallest plan with one stage per device" +
           std::string(report.pinned ? " and the pinned dimensions" : "") + " needs " + FormatBytes(least.peak_bytes) +
           " per device (" + Describe(least.plan) + "); rank " +
           std::to_string(least.fullest_rank) + " holds " + FormatBytes(least.model_state_bytes) +
           " model state (parameters, gradients, optimizer state) and " + FormatBytes(least.activation_bytes) +
           " activations.\n";
  }
  if (report.fewest) {
    const FewestDevicesResult& fewest = *report.fewest;
    out += "Fewest devices that fit at this batch: " + std::to_string(fewest.devices) + "; the fastest plan there, " +
           Describe(fewest.best.plan) + ", needs " + FormatBytes(fewest.best.peak_memory_bytes) +
           " per device (run it with --devices " + std::to_string(fewest.devices) + ")" +
           (fewest.proven ? "" : "; the search on one device fewer did not finish (its node budget or the time limit), so fewer may fit") +
           ".\n";
  } else if (report.fewest_stopped) {
    out += "Fewest devices that fit at this batch: not found before the time limit (--time-limit; the scan tries "
           "more devices, then bisects, with the least-memory program on each count).\n";
  } else {
    out += "No number of devices is enough at this batch: even one layer per device does not fit.\n";
  }
  if (report.whole_stage_programs) {
    out += "(With this many layers the least-memory figures remat whole stages, not the first layers of one: "
           "remat by layer may need somewhat less.)\n";
  }
  if (report.max_tensor_parallel > 1) {
    out += "(The least-memory figures and the fewest devices come from a program that splits no layer, t = 1, and "
           "a search just below that count; tensor parallelism, up to t = " + std::to_string(report.max_tensor_parallel) +
           " with this profile, holds a share of each layer per device and may fit on fewer: try --devices N with a "
           "multiple of t.)\n";
  }
  if (!report.changes.empty()) {
    out += "On these " + std::to_string(report.devices) + " devices a plan fits with:\n";
    for (const FittingChange& change : report.changes) {
      out += "  " + change.flags + ": least memory " + FormatBytes(change.least_bytes) +
             (change.note.empty() ? "" : " (" + change.note + ")") + "\n";
    }
  } else if (report.changes_stopped) {
    out += "Other changes on these " + std::to_string(report.devices) + " devices (fewer pins, remat, an optimizer "
           "with less state): not all checked before the time limit (--time-limit).\n";
  } else {
    out += "Nothing else makes a plan fit on these " + std::to_string(report.devices) + " devices: the least-memory " +
           "plan already has one stage per device, micro-batches of one sample, 1F1B" +
           (report.remat_allowed ? ", remat" : "") + ", and no optimizer with less state is enough.\n";
  }
  return out;
}

nlohmann::json InfeasibleJson(const InfeasibleReport& report) {
  nlohmann::json json = {{"fits", false},
                         {"memory_limit_bytes", report.limit_bytes},
                         {"devices", report.devices},
                         {"global_batch", report.global_batch},
                         {"pinned", report.pinned}};
  const auto plan_json = [](const Plan& plan) {
    return nlohmann::json{{"schedule", ScheduleName(plan.schedule)},
                          {"ranks", plan.num_ranks()},
                          {"replicas", plan.replicas},
                          {"microbatches", plan.microbatches},
                          {"remat_stages", RematStages(plan)}};
  };
  json["least_memory_bytes"] = report.least ? nlohmann::json(report.least->peak_bytes) : nlohmann::json(nullptr);
  json["least_memory_plan"] = report.least ? plan_json(report.least->plan) : nlohmann::json(nullptr);
  json["fewest_devices"] = report.fewest ? nlohmann::json(report.fewest->devices) : nlohmann::json(nullptr);
  json["fewest_devices_stopped_by_time"] = report.fewest_stopped;
  if (report.fewest) {
    nlohmann::json plan = plan_json(report.fewest->best.plan);
    plan["peak_memory_bytes"] = report.fewest->best.peak_memory_bytes;
    plan["step_time_ms"] = report.fewest->best.step_time_ms;
    json["fewest_devices_plan"] = plan;
  } else {
    json["fewest_devices_plan"] = nullptr;
  }
  nlohmann::json changes = nlohmann::json::array();
  for (const FittingChange& change : report.changes) {
    changes.push_back({{"flags", change.flags}, {"note", change.note}, {"least_memory_bytes", change.least_bytes}});
  }
  json["changes"] = changes;
  json["changes_stopped_by_time"] = report.changes_stopped;
  return json;
}

}  // namespace gpipe
