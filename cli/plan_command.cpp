// gpipe-plan plan: the fastest plan that fits, with the alternatives and, when nothing fits, why.
#include <chrono>
#include <cmath>
#include <iostream>
#include <optional>
#include <ostream>

#include "api/answers.h"
#include "api/plan_request.h"
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

class PlanCommand : public Command {
 public:
  explicit PlanCommand(CLI::App& app) {
    app.add_option("--profile", profile_path_, "A gpipe-profile/1 file")->required();
    app.add_option("--cluster", cluster_path_, "A gpipe-cluster/1 file")->required();
    app.add_option("--global-batch", options_.global_batch, "Samples per training step")->required();
    app.add_option("--devices", options_.devices, "Use this many devices instead of the cluster file's");
    app.add_option("--memory", options_.memory, "Per-device memory instead of the cluster file's, e.g. 80GB (= 74.51 GiB, as cards are sold) or 80GiB");
    app.add_option("--stages", options_.stages, "Pin K, the ranks of one pipeline");
    app.add_option("--replicas", options_.replicas, "Pin D, the data-parallel copies of the pipeline");
    app.add_option("--microbatches", options_.microbatches, "Pin M, micro-batches per replica and step");
    app.add_option("--schedule", options_.schedule, "Pin the schedule: gpipe, 1f1b, interleaved-1f1b, zb-h1, interleaved-zb, zb-v, dualpipe-v");
    app.add_option("--chunks", options_.chunks, "Pin v, stages per rank of interleaved-1f1b and interleaved-zb (zb-v and dualpipe-v: 2)");
    app.add_option("--remat", options_.remat,
                   "Rematerialization (recompute a forward in the backward instead of keeping activations): auto (by "
                   "layer: a stage recomputes the fewest of its first layers that make it fit, only where memory "
                   "demands it), stages (a stage recomputes all its layers or none), on (every stage, all), off");
    app.add_option("--placement", options_.placement, "Pin the placement: pipeline-major or replica-major");
    app.add_option("--tensor-parallel", options_.tensor_parallel,
                   "Pin t, the devices of a node that split each layer (Megatron-style; devices = t x K x D). "
                   "Searched over the sizes the profile prices (its tensor_parallel_measurements) by default");
    app.add_option("--sharded-optimizer", options_.sharded_optimizer,
                   "ZeRO-1 (Megatron's distributed optimizer): the optimizer's state sharded over the D replicas. "
                   "auto (default: on wherever D > 1, as it never slows a step and holds less), on, off")
        ->check(CLI::IsMember({"auto", "on", "off"}));
    app.add_option("--optimizer", options_.optimizer, "sgd, momentum, adam, adam-mixed (default: by the profile's dtype)");
    app.add_option("--precision", options_.precision,
                   "fp32, bf16 or fp16: what the layers compute in (weights, gradients and optimizer state stay fp32); "
                   "default and only choice: the profile's dtype, as `profile --precision` measured it")
        ->check(CLI::IsMember(Precisions()));
    app.add_flag("--oversubscribe", options_.oversubscribe,
                 "Also search layouts with more ranks on a node than it computes at once (a CPU profile's cores "
                 "over threads per rank); left out by default unless K and D are both pinned, as their "
                 "predictions are too kind (docs/planner.md)");
    app.add_option("--max-nodes", options_.max_nodes, "Partition-search budget per configuration");
    app.add_option("--time-limit", options_.time_limit_s,
                   "Stop after this many seconds with the best plan and its gap so far (default " +
                       std::to_string(static_cast<int>(api::kDefaultTimeLimitS)) +
                       "; 0: no limit, search every configuration to the end). The whole command keeps to it: when "
                       "no plan is found by half of it, the other half goes to the report of what would fit");
    app.add_option("--gap", options_.gap,
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
    request->started_at_s = ClockOf(*request)();  // one limit for the search and the report of what would fit
    Expected<SearchResult> result = SearchPlans(*request);
    if (!result.ok()) {
      // The search's complaints about the request name K, D, M and the batch; name the flags too.
      return Fail(err, "plan", result.status().usage() ? result.status().WithContext(api::PinFlags(options_)) : result.status());
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (json_) {
      out << api::PlanAnswer(*request, *result).dump(2) << "\n";
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
    Expected<Profile> profile = LoadProfile(profile_path_);
    if (!profile.ok()) return profile.status();
    Expected<Cluster> cluster = LoadCluster(cluster_path_);
    if (!cluster.ok()) return cluster.status();
    return api::MakePlanRequest(std::move(*profile), std::move(*cluster), profile_path_, options_);
  }

  std::string profile_path_, cluster_path_, output_path_;
  api::PlanOptions options_;
  PictureFlags pictures_;
  bool json_ = false;
  bool quiet_ = false;
};

}  // namespace

std::unique_ptr<Command> MakePlanCommand(CLI::App& app) { return std::make_unique<PlanCommand>(app); }

}  // namespace gpipe::cli
