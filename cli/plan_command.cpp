// gpipe-plan plan: the fastest plan that fits, with the alternatives and, when nothing fits, why.
#include <chrono>
#include <cmath>
#include <iostream>
#include <optional>
#include <ostream>

#include "cli/commands.h"
#include "cli/pictures.h"
#include "core/cluster.h"
#include "core/files.h"
#include "core/plan.h"
#include "core/schedule/validate.h"
#include "core/units.h"
#include "planner/infeasible.h"
#include "planner/report.h"
#include "planner/search.h"
#include "simulator/cost_model.h"
#include "simulator/report.h"
#include "simulator/simulator.h"

namespace gpipe::cli {
namespace {

// The search's default limit: it stops with the best plan and its gap so far. On the GPT-3 175B
// profile at 1,024 A100s the full search took 25 s and reached the gap 5 s reach (12.9%).
constexpr double kDefaultTimeLimitS = 8;

class PlanCommand : public Command {
 public:
  explicit PlanCommand(CLI::App& app) {
    app.add_option("--profile", profile_path_, "A gpipe-profile/1 file")->required();
    app.add_option("--cluster", cluster_path_, "A gpipe-cluster/1 file")->required();
    app.add_option("--global-batch", global_batch_, "Samples per training step")->required();
    app.add_option("--devices", devices_, "Use this many devices instead of the cluster file's");
    app.add_option("--memory", memory_, "Per-device memory instead of the cluster file's, e.g. 80GB (= 74.51 GiB, as cards are sold) or 80GiB");
    app.add_option("--stages", stages_, "Pin K, the ranks of one pipeline");
    app.add_option("--replicas", replicas_, "Pin D, the data-parallel copies of the pipeline");
    app.add_option("--microbatches", microbatches_, "Pin M, micro-batches per replica and step");
    app.add_option("--schedule", schedule_, "Pin the schedule: gpipe, 1f1b, interleaved-1f1b, zb-h1, interleaved-zb, zb-v, dualpipe-v");
    app.add_option("--chunks", chunks_, "Pin v, stages per rank of interleaved-1f1b and interleaved-zb (zb-v and dualpipe-v: 2)");
    app.add_option("--remat", remat_,
                   "Rematerialization (recompute a forward in the backward instead of keeping activations): auto (by "
                   "layer: a stage recomputes the fewest of its first layers that make it fit, only where memory "
                   "demands it), stages (a stage recomputes all its layers or none), on (every stage, all), off");
    app.add_option("--placement", placement_, "Pin the placement: pipeline-major or replica-major");
    app.add_option("--tensor-parallel", tensor_parallel_,
                   "Pin t, the devices of a node that split each layer (Megatron-style; devices = t x K x D). "
                   "Searched over the sizes the profile prices (its tensor_parallel_measurements) by default");
    app.add_option("--sharded-optimizer", sharded_optimizer_,
                   "ZeRO-1 (Megatron's distributed optimizer): the optimizer's state sharded over the D replicas. "
                   "auto (default: on wherever D > 1, as it never slows a step and holds less), on, off")
        ->check(CLI::IsMember({"auto", "on", "off"}));
    app.add_option("--optimizer", optimizer_, "sgd, momentum, adam, adam-mixed (default: by the profile's dtype)");
    app.add_option("--precision", precision_,
                   "fp32, bf16 or fp16: what the layers compute in (weights, gradients and optimizer state stay fp32); "
                   "default and only choice: the profile's dtype, as `profile --precision` measured it")
        ->check(CLI::IsMember(Precisions()));
    app.add_flag("--oversubscribe", oversubscribe_,
                 "Also search layouts with more ranks on a node than it computes at once (a CPU profile's cores "
                 "over threads per rank); left out by default unless K and D are both pinned, as their "
                 "predictions are too kind (docs/planner.md)");
    app.add_option("--max-nodes", max_nodes_, "Partition-search budget per configuration");
    app.add_option("--time-limit", time_limit_s_,
                   "Stop after this many seconds with the best plan and its gap so far (default " +
                       std::to_string(static_cast<int>(kDefaultTimeLimitS)) +
                       "; 0: no limit, search every configuration to the end). When nothing fits, the report of "
                       "what would gets as long again");
    app.add_option("--gap", gap_,
                   "Stop once the best plan is within this fraction of the lower bound, e.g. 0.01 for 1% "
                   "(0: search to the end)");
    app.add_option("-o,--output", output_path_, "Write the plan (gpipe-plan/1) to this file");
    app.add_flag("--json", json_, "Print the plan with its prediction as JSON instead of the table");
    pictures_.Add(app, "the best plan's simulated timeline");
    app.add_flag("-q,--quiet", quiet_, "No progress lines on stderr");
    app.footer(
        "Examples:\n"
        "  gpipe-plan plan --profile profiles/gpt3-13b-a100-80gb.json --cluster profiles/clusters/a100-80gb-8.json \\\n"
        "      --global-batch 512\n"
        "  gpipe-plan plan --profile profiles/gpt3-13b-a100-80gb.json --cluster profiles/clusters/a100-80gb-32.json \\\n"
        "      --global-batch 512 --schedule 1f1b --stages 8 -o plan.json\n"
        "  gpipe-plan plan --profile profiles/tiny-gpt-cpu.json --cluster profiles/clusters/cpu-2.json --global-batch 64 \\\n"
        "      --stages 2 --microbatches 2 --schedule gpipe --memory 45MiB\n"
        "      # stage 0 recomputes its first 2 layers, stage 1 its first (0r2, 1r1); --remat stages: 15% slower\n"
        "  gpipe-plan plan --profile P.json --cluster C.json --global-batch 512 --gap 0.01 --time-limit 10\n"
        "      # stop within 1% of the lower bound, or after 10 s with the gap reached so far\n"
        "  gpipe-plan plan --profile profiles/gpt3-175b-a100-80gb.json --cluster profiles/clusters/a100-80gb-32.json \\\n"
        "      --devices 1024 --global-batch 1536 --tensor-parallel 8 --stages 16\n"
        "      # Megatron-LM's layout for GPT-3 175B on 1,024 A100s (tensor 8 x pipeline 16 x data 8)\n"
        "  gpipe-plan plan --profile bf16-profile.json --cluster C.json --global-batch 64 --precision bf16\n"
        "      # a profile made with `gpipe-plan profile --precision bf16`: the plan runs under bf16 autocast\n"
        "The plan written with -o runs through 'gpipe-plan simulate' as it is.");
  }

  int Run(std::ostream& out, std::ostream& err) override {
    Expected<SearchRequest> request = Request();
    if (!request.ok()) return Fail(err, "plan", request.status());
    if (!quiet_) {
      request->progress = [&err, started = std::chrono::steady_clock::now()](size_t done, size_t all, double best) {
        if (std::chrono::steady_clock::now() - started < std::chrono::seconds(1)) return;
        err << "  searched " << done << "/" << all << " configurations"
            << (best < 1e300 ? ", best step " + FormatMs(best) : std::string()) << "\n";
      };
    }
    const auto started = std::chrono::steady_clock::now();
    Expected<SearchResult> result = SearchPlans(*request);
    if (!result.ok()) {
      // The search's complaints about the request name K, D, M and the batch; name the flags too.
      return Fail(err, "plan", result.status().usage() ? result.status().WithContext(PinFlags()) : result.status());
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (json_) {
      out << (result->best ? PlanReportJson(*result) : InfeasibleJson(ExplainInfeasible(*request))).dump(2) << "\n";
    } else {
      out << FormatPlanReport(*request, *result, seconds);
    }
    if (!result->best) return kExitFailure;  // nothing fits: the report said what would
    if (!output_path_.empty()) {
      const Status written = WriteFileAtomically(output_path_, PlanReportJson(*result).dump(1) + "\n");
      if (!written.ok()) return Fail(err, "plan", written);
      if (!json_) out << "\nplan written to " << output_path_ << "\n";
    }
    if (pictures_.any()) {
      const Plan& plan = result->best->plan;
      const SimResult sim = *Simulate(*BuildSchedule(plan), *BuildCostModel(plan));
      const Status written = pictures_.Write(TimelineFromSim(sim, PlanTitle(plan, "planned")));
      if (!written.ok()) return Fail(err, "plan", written);
    }
    return kExitOk;
  }

 private:
  Expected<SearchRequest> Request() const {
    SearchRequest request;
    Expected<Profile> profile = LoadProfile(profile_path_);
    if (!profile.ok()) return profile.status();
    Expected<Cluster> cluster = LoadCluster(cluster_path_);
    if (!cluster.ok()) return cluster.status();
    request.profile = std::move(*profile);
    request.cluster = std::move(*cluster);
    if (global_batch_ < 1) return Status::Usage("--global-batch: must be at least 1, got " + std::to_string(global_batch_));
    request.global_batch = global_batch_;
    if (devices_) {
      if (*devices_ < 1) return Status::Usage("--devices: must be at least 1, got " + std::to_string(*devices_));
      request.cluster.devices = *devices_;
      if (request.cluster.devices_per_node && request.cluster.devices % *request.cluster.devices_per_node != 0) {
        request.cluster.devices_per_node.reset();  // a what-if that breaks the node layout: one node
      }
      // Links between devices that are no longer there go (the plan's cluster must load again).
      std::erase_if(request.cluster.links, [&](const LinkOverride& o) {
        return o.from >= request.cluster.devices || o.to >= request.cluster.devices;
      });
    }
    if (memory_) {
      Expected<int64_t> bytes = ParseBytes(*memory_);
      if (!bytes.ok()) return bytes.status().WithContext("--memory").AsUsage();
      if (*bytes <= 0) return Status::Usage("--memory: must be more than 0");
      if (*bytes < kMinDeviceMemoryBytes) {
        return Status::Usage("--memory: " + *memory_ + " is " + std::to_string(*bytes) +
                             " bytes, less than 64 KiB; a bare number is bytes: did you mean " + *memory_ +
                             "GiB? (or MiB, GB, ...)");
      }
      request.cluster.device_memory_bytes = *bytes;
    }
    const auto positive = [](const std::optional<int>& value, const char* flag) {
      return !value || *value >= 1 ? Status::Ok()
                                   : Status::Usage(std::string(flag) + ": must be at least 1, got " + std::to_string(*value));
    };
    GPIPE_RETURN_IF_ERROR(positive(stages_, "--stages"));
    GPIPE_RETURN_IF_ERROR(positive(replicas_, "--replicas"));
    GPIPE_RETURN_IF_ERROR(positive(microbatches_, "--microbatches"));
    GPIPE_RETURN_IF_ERROR(positive(chunks_, "--chunks"));
    GPIPE_RETURN_IF_ERROR(positive(tensor_parallel_, "--tensor-parallel"));
    if (tensor_parallel_) {
      const Status fits = CheckTensorParallel(*tensor_parallel_, request.profile, request.cluster);
      if (!fits.ok()) return fits.WithContext("--tensor-parallel " + std::to_string(*tensor_parallel_)).AsUsage();
    }
    request.tensor_parallel = tensor_parallel_;
    if (sharded_optimizer_ != "auto") request.sharded_optimizer = sharded_optimizer_ == "on";
    request.ranks = stages_;
    request.replicas = replicas_;
    request.microbatches = microbatches_;
    request.chunks = chunks_;
    if (schedule_) {
      Expected<ScheduleKind> kind = ParseScheduleKind(*schedule_);
      if (!kind.ok()) return kind.status().WithContext("--schedule").AsUsage();
      request.schedule = *kind;
    }
    Expected<RematPolicy> remat = ParseRematPolicy(remat_);
    if (!remat.ok()) return remat.status().WithContext("--remat").AsUsage();
    request.remat = *remat;
    if (placement_) {
      Expected<Placement> placement = ParsePlacement(*placement_);
      if (!placement.ok()) return placement.status().WithContext("--placement").AsUsage();
      request.placement = *placement;
    }
    if (precision_) {
      const Status checked = CheckPrecision(*precision_, request.profile.dtype, profile_path_);
      if (!checked.ok()) {
        return Status::Invalid(checked.message() + ", or leave --precision out to plan in " + request.profile.dtype)
            .WithContext("--precision " + *precision_);
      }
    }
    request.optimizer = DefaultOptimizer(request.profile);
    if (optimizer_) {
      Expected<Optimizer> optimizer = ParseOptimizer(*optimizer_);
      if (!optimizer.ok()) return optimizer.status().WithContext("--optimizer").AsUsage();
      request.optimizer = *optimizer;
    }
    if (max_nodes_ < 1) return Status::Usage("--max-nodes: must be at least 1");
    request.max_nodes = max_nodes_;
    request.oversubscribe = oversubscribe_;
    if (!(time_limit_s_ >= 0) || !std::isfinite(time_limit_s_)) {
      return Status::Usage("--time-limit: must be a number of seconds, 0 for no limit, got " + std::to_string(time_limit_s_));
    }
    if (time_limit_s_ > 0) request.time_limit_s = time_limit_s_;
    if (!(gap_ >= 0) || !std::isfinite(gap_)) {
      return Status::Usage("--gap: must be a fraction at least 0 (0.01 for 1%), got " + std::to_string(gap_));
    }
    request.target_gap = gap_;
    return request;
  }

  // The flags that set the request's shape, as given, e.g. "--global-batch 63 --stages 2
  // --microbatches 2".
  std::string PinFlags() const {
    std::string flags = "--global-batch " + std::to_string(global_batch_);
    const auto add = [&flags](const char* flag, const std::optional<int>& value) {
      if (value) flags += std::string(" ") + flag + " " + std::to_string(*value);
    };
    add("--devices", devices_);
    add("--tensor-parallel", tensor_parallel_);
    add("--stages", stages_);
    add("--replicas", replicas_);
    add("--microbatches", microbatches_);
    if (schedule_) flags += " --schedule " + *schedule_;
    add("--chunks", chunks_);
    return flags;
  }

  std::string profile_path_, cluster_path_, output_path_, remat_ = "auto";
  PictureFlags pictures_;
  int64_t global_batch_ = 0;
  int64_t max_nodes_ = 200'000;
  double time_limit_s_ = kDefaultTimeLimitS;
  double gap_ = 0;
  std::optional<int> devices_, stages_, replicas_, microbatches_, chunks_, tensor_parallel_;
  std::string sharded_optimizer_ = "auto";
  std::optional<std::string> memory_, schedule_, placement_, optimizer_, precision_;
  bool json_ = false;
  bool quiet_ = false;
  bool oversubscribe_ = false;
};

}  // namespace

std::unique_ptr<Command> MakePlanCommand(CLI::App& app) { return std::make_unique<PlanCommand>(app); }

}  // namespace gpipe::cli
