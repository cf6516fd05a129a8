#include "api/plan_request.h"

#include <cmath>
#include <utility>

#include "core/cluster.h"
#include "core/plan.h"
#include "core/schedule/validate.h"
#include "core/units.h"
#include "simulator/cost_model.h"
#include "simulator/tensor_parallel.h"

namespace gpipe::api {

Expected<SearchRequest> MakePlanRequest(Profile profile, Cluster cluster, const std::string& profile_where,
                                        const PlanOptions& o) {
  SearchRequest request;
  request.profile = std::move(profile);
  request.cluster = std::move(cluster);
  if (o.global_batch < 1) return Status::Usage("--global-batch: must be at least 1, got " + std::to_string(o.global_batch));
  request.global_batch = o.global_batch;
  if (o.devices) {
    if (*o.devices < 1) return Status::Usage("--devices: must be at least 1, got " + std::to_string(*o.devices));
    request.cluster.devices = *o.devices;
    if (request.cluster.devices_per_node && request.cluster.devices % *request.cluster.devices_per_node != 0) {
      request.cluster.devices_per_node.reset();  // a what-if that breaks the node layout: one node
    }
    // Links between devices that are no longer there go (the plan's cluster must load again).
    std::erase_if(request.cluster.links, [&](const LinkOverride& link) {
      return link.from >= request.cluster.devices || link.to >= request.cluster.devices;
    });
  }
  if (o.memory) {
    Expected<int64_t> bytes = ParseBytes(*o.memory);
    if (!bytes.ok()) return bytes.status().WithContext("--memory").AsUsage();
    if (*bytes <= 0) return Status::Usage("--memory: must be more than 0");
    if (*bytes < kMinDeviceMemoryBytes) {
      return Status::Usage("--memory: " + *o.memory + " is " + std::to_string(*bytes) +
                           " bytes, less than 64 KiB; a bare number is bytes: did you mean " + *o.memory +
                           "GiB? (or MiB, GB, ...)");
    }
    request.cluster.device_memory_bytes = *bytes;
  }
  const auto positive = [](const std::optional<int>& value, const char* flag) {
    return !value || *value >= 1 ? Status::Ok()
                                 : Status::Usage(std::string(flag) + ": must be at least 1, got " + std::to_string(*value));
  };
  GPIPE_RETURN_IF_ERROR(positive(o.stages, "--stages"));
  GPIPE_RETURN_IF_ERROR(positive(o.replicas, "--replicas"));
  GPIPE_RETURN_IF_ERROR(positive(o.microbatches, "--microbatches"));
  GPIPE_RETURN_IF_ERROR(positive(o.chunks, "--chunks"));
  GPIPE_RETURN_IF_ERROR(positive(o.tensor_parallel, "--tensor-parallel"));
  if (o.tensor_parallel) {
    const Status fits = CheckTensorParallel(*o.tensor_parallel, request.profile, request.cluster);
    if (!fits.ok()) return fits.WithContext("--tensor-parallel " + std::to_string(*o.tensor_parallel)).AsUsage();
  }
  request.tensor_parallel = o.tensor_parallel;
  if (o.sharded_optimizer != "auto" && o.sharded_optimizer != "on" && o.sharded_optimizer != "off") {
    return Status::Usage("--sharded-optimizer: \"" + o.sharded_optimizer + "\" is not one of auto, on, off");
  }
  if (o.sharded_optimizer != "auto") request.sharded_optimizer = o.sharded_optimizer == "on";
  request.ranks = o.stages;
  request.replicas = o.replicas;
  request.microbatches = o.microbatches;
  request.chunks = o.chunks;
  if (o.schedule) {
    Expected<ScheduleKind> kind = ParseScheduleKind(*o.schedule);
    if (!kind.ok()) return kind.status().WithContext("--schedule").AsUsage();
    request.schedule = *kind;
  }
  Expected<RematPolicy> remat = ParseRematPolicy(o.remat);
  if (!remat.ok()) return remat.status().WithContext("--remat").AsUsage();
  request.remat = *remat;
  if (o.placement) {
    Expected<Placement> placement = ParsePlacement(*o.placement);
    if (!placement.ok()) return placement.status().WithContext("--placement").AsUsage();
    request.placement = *placement;
  }
  if (o.precision) {
    const Status checked = CheckPrecision(*o.precision, request.profile.dtype, profile_where);
    if (!checked.ok()) {
      return Status::Invalid(checked.message() + ", or leave --precision out to plan in " + request.profile.dtype)
          .WithContext("--precision " + *o.precision);
    }
  }
  request.optimizer = DefaultOptimizer(request.profile);
  if (o.optimizer) {
    Expected<Optimizer> optimizer = ParseOptimizer(*o.optimizer);
    if (!optimizer.ok()) return optimizer.status().WithContext("--optimizer").AsUsage();
    request.optimizer = *optimizer;
  }
  if (o.max_nodes < 1) return Status::Usage("--max-nodes: must be at least 1");
  request.max_nodes = o.max_nodes;
  request.oversubscribe = o.oversubscribe;
  if (!(o.time_limit_s >= 0) || !std::isfinite(o.time_limit_s)) {
    return Status::Usage("--time-limit: must be a number of seconds, 0 for no limit, got " + std::to_string(o.time_limit_s));
  }
  if (o.time_limit_s > 0) request.time_limit_s = o.time_limit_s;
  if (!(o.gap >= 0) || !std::isfinite(o.gap)) {
    return Status::Usage("--gap: must be a fraction at least 0 (0.01 for 1%), got " + std::to_string(o.gap));
  }
  request.target_gap = o.gap;
  return request;
}

std::string PinFlags(const PlanOptions& o) {
  std::string flags = "--global-batch " + std::to_string(o.global_batch);
  const auto add = [&flags](const char* flag, const std::optional<int>& value) {
    if (value) flags += std::string(" ") + flag + " " + std::to_string(*value);
  };
  add("--devices", o.devices);
  add("--tensor-parallel", o.tensor_parallel);
  add("--stages", o.stages);
  add("--replicas", o.replicas);
  add("--microbatches", o.microbatches);
  if (o.schedule) flags += " --schedule " + *o.schedule;
  add("--chunks", o.chunks);
  return flags;
}

}  // namespace gpipe::api
