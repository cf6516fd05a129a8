// gpipe-plan run PLAN.json --model MODEL: train a model on a plan for real. Without RANK/WORLD_SIZE
// (or SLURM's variables) in the environment it is the launcher: it starts this node's ranks as
// processes of this same binary, which find those variables and train. Rank 0 writes the record.
#include <cstdlib>
#include <filesystem>
#include <map>
#include <ostream>

#include "cli/commands.h"
#include "cli/pictures.h"
#include "core/files.h"
#include "core/model.h"
#include "core/plan.h"
#include "core/run_record.h"
#include "core/safetensors.h"
#include "core/text.h"
#include "core/units.h"
#include "executor/launcher.h"
#include "executor/python_export.h"
#include "simulator/report.h"
#include "simulator/trace.h"
#ifdef GPIPE_WITH_TORCH
#include "executor/worker.h"
#endif

namespace gpipe::cli {
namespace {

#ifdef GPIPE_WITH_TORCH

#endif

class RunCommand : public Command {
 public:
  explicit RunCommand(CLI::App& app) {
    app.add_option("PLAN", plan_path_, "A gpipe-plan/1 file (from 'gpipe-plan plan -o')")->required();
    app.add_option("--model", model_path_, "A gpipe-model/1 file (see models/ and docs/formats.md)")->required();
    app.add_option("--steps", steps_, "Training steps (one optimizer step per global batch)")->check(CLI::Range(1, 1 << 30));
    app.add_option("--threads-per-rank", threads_, "Intra-op CPU threads of each rank")->check(CLI::Range(1, 1024));
    app.add_option("--record", record_path_, "Write the run record (gpipe-run/1 JSON) here");
    pictures_.Add(app, "the last step's measured timeline");
    app.add_option("--device", device_, "cpu (Gloo) or cuda (one GPU per rank, NCCL)")->check(CLI::IsMember({"cpu", "cuda"}));
    app.add_option("--checkpoint-dir", checkpoint_dir_, "Save checkpoints here (atomically)");
    app.add_option("--checkpoint-every", checkpoint_every_, "Save every N steps (and after the last) (default: with --checkpoint-dir, after the last step only)")->check(CLI::Range(1, 1 << 30));
    app.add_flag("--resume", resume_, "Continue from the latest checkpoint in --checkpoint-dir");
    app.add_option("--save-weights", save_weights_,
                   "After the last step, write the whole model's weights here as one safetensors file, named as "
                   "the model's nn.Sequential names them (every checkpoint holds them too: step-N/model.safetensors)");
    app.add_option("--eval-every", eval_every_,
                   "Evaluate on the data's validation set every N steps and after the last (docs/formats.md: "
                   "data.validation, data.validation_fraction); the loss is printed and in the record")
        ->check(CLI::Range(1, 1 << 30));
    app.add_option("--eval-batches", eval_batches_, "Batches (each the global batch) per evaluation")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--init-weights", init_weights_,
                   "Start from the weights in this safetensors file (one that --save-weights wrote, or a PyTorch "
                   "state_dict saved with safetensors) instead of the seeded initial weights");
    app.add_option("--timeout", timeout_s_, "Seconds any rank waits for another before giving up with an error")
        ->check(CLI::Range(1, 86400));
    app.add_flag("--in-process", in_process_, "Run every rank as a thread of this process (no c10d; for checks)");
    app.add_option("--wire", wire_,
                   "With --in-process: exact (messages matched by tag) or nccl (NCCL's rules: one ordered queue per "
                   "pair, tags ignored, a send done only when received; a plan that would hang on NCCL stops with "
                   "\"would deadlock on NCCL\")")
        ->check(CLI::IsMember({"exact", "nccl"}))
        ->capture_default_str();
    app.add_option("--nnodes", nnodes_, "Machines in the job (run one launcher on each)")->check(CLI::Range(1, 1 << 16));
    app.add_option("--node-rank", node_rank_, "This machine's index among --nnodes")->check(CLI::Range(0, 1 << 16));
    app.add_option("--master-addr", master_addr_, "Where rank 0 serves the rendezvous (default 127.0.0.1: loopback only)");
    app.add_option("--master-port", master_port_, "Its port (default: a free one below the ports the kernel hands out itself, single node only)")->check(CLI::Range(1, 65535));
    app.footer(
        "Examples:\n"
        "  gpipe-plan run build/tiny-gpt-plan.json --model models/tiny-gpt.json --steps 20 --record run.json\n"
        "  gpipe-plan run PLAN.json --model models/tiny-gpt.json --checkpoint-dir ckpt --checkpoint-every 5\n"
        "  gpipe-plan run PLAN.json --model models/tiny-gpt.json --checkpoint-dir ckpt --resume --steps 40\n"
        "  gpipe-plan run PLAN.json --model models/examples/gpt2.json --save-weights gpt2.safetensors\n"
        "    then in Python: seq = build(); safetensors.torch.load_model(seq, \"gpt2.safetensors\")\n"
        "  gpipe-plan run PLAN.json --model models/examples/gpt2.json --init-weights gpt2.safetensors (fine-tune)\n"
        "  your own token file (scripts/prepare_tokens.py), evaluated every 50 steps on its validation set:\n"
        "    gpipe-plan run PLAN.json --model models/examples/gpt2-tokens.json --steps 300 --eval-every 50 --eval-batches 4\n"
        "  a model written in Python (\"python\": \"file.py:build\", traced once before the ranks start):\n"
        "    gpipe-plan run gpt2-plan.json --model models/examples/gpt2.json --steps 5\n"
        "  in bf16 mixed precision: a plan made from a `profile --precision bf16` profile runs in bf16:\n"
        "    gpipe-plan profile --model M --precision bf16 -o p.json; gpipe-plan plan --profile p.json ... -o plan.json\n"
        "    gpipe-plan run plan.json --model M --steps 300\n"
        "  check a plan under NCCL's rules on the CPU before a GPU run:\n"
        "    gpipe-plan run PLAN.json --model models/tiny-gpt.json --in-process --wire nccl --steps 2\n"
        "  two machines: gpipe-plan run PLAN.json --model M --nnodes 2 --node-rank 0|1 --master-addr HOST --master-port 29500\n"
        "  under torchrun or srun (RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS set), each process joins the job.\n"
        "One process per rank (K x D of the plan), Gloo on CPU, NCCL on GPUs. A progress line per step shows\n"
        "the loss, learning rate, gradient norm, evaluation loss (when evaluated), samples/s and time left; the\n"
        "record holds them and every rank's action times and peak memory. The optimizer's settings, schedule\n"
        "and clipping are the model file's \"training\" section (docs/formats.md). The plan's precision (its\n"
        "profile's dtype) is what the layers compute in: bf16 and fp16 under autocast with fp32 weights, gradients\n"
        "and optimizer state; fp16 with a dynamic loss scale, a step with inf/nan gradients skipped on every rank.");
  }

  int Run(std::ostream& out, std::ostream& err) override {
    Expected<Plan> plan = LoadPlan(plan_path_);
    if (!plan.ok()) return Fail(err, "run", plan.status());
    if (Status runs = CheckExecutorRuns(*plan, plan_path_); !runs.ok()) return Fail(err, "run", runs);
    Expected<ModelSpec> model = LoadModel(model_path_);
    if (!model.ok()) return Fail(err, "run", model.status());
    if (checkpoint_every_ > 0 && checkpoint_dir_.empty()) {
      return Fail(err, "run", Status::Usage("--checkpoint-every needs --checkpoint-dir"));
    }
    if (resume_ && checkpoint_dir_.empty()) return Fail(err, "run", Status::Usage("--resume needs --checkpoint-dir"));
    if (resume_ && !init_weights_.empty()) {
      return Fail(err, "run", Status::Usage("--init-weights and --resume: the checkpoint holds the weights to resume "
                                            "from; drop one of them"));
    }
    // Checked before any rank starts: a bad file is one line, and no training is lost to a
    // folder that does not exist when the weights are written at the end.
    if (!init_weights_.empty()) {
      if (Expected<SafetensorsFile> file = OpenSafetensors(init_weights_); !file.ok()) {
        return Fail(err, "run", file.status().WithContext("--init-weights"));
      }
    }
    if (eval_every_ > 0 && !model->data.validation && model->data.validation_fraction <= 0 &&
        model->data.kind != DataKind::kRandomTokens && model->data.kind != DataKind::kSyntheticImages) {
      return Fail(err, "run", Status::Usage("--eval-every: the model's data has no validation set; add "
                                            "\"validation_fraction\": 0.05 or \"validation\": {files} to its \"data\""));
    }
    if (!save_weights_.empty()) {
      const std::filesystem::path folder = std::filesystem::absolute(save_weights_).parent_path();
      std::error_code error;
      if (!std::filesystem::is_directory(folder, error)) {
        return Fail(err, "run", Status::Usage("--save-weights " + save_weights_ + ": the folder " + folder.string() +
                                              " does not exist; create it first"));
      }
    }
#ifndef GPIPE_WITH_TORCH
    (void)out;
    return Fail(err, "run", Status::Invalid(kNoExecutor));
#else
    if (Status exported = executor::ExportPythonModel(&*model); !exported.ok()) return Fail(err, "run", exported);
    executor::RunSettings settings;
    settings.steps = steps_;
    settings.threads_per_rank = threads_;
    settings.device = device_;
    settings.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000));
    settings.checkpoint_dir = checkpoint_dir_;
    settings.checkpoint_every = checkpoint_every_ > 0 ? checkpoint_every_ : (checkpoint_dir_.empty() ? 0 : steps_);
    settings.resume = resume_;
    settings.init_weights = init_weights_;
    settings.save_weights = save_weights_;
    settings.eval_every = eval_every_;
    settings.eval_batches = eval_batches_;
    settings.wire = wire_;
    if (wire_ != "exact" && !in_process_) {
      return Fail(err, "run", Status::Usage("--wire applies to --in-process runs; a job of processes uses c10d "
                                            "(Gloo on CPU, NCCL with --device cuda)"));
    }
    if (in_process_) {
      Expected<RunRecord> record = executor::TrainInProcess(*plan, *model, settings);
      if (!record.ok()) return Fail(err, "run", record.status());
      return Finish(*plan, *record, out, err);
    }
    Expected<std::optional<executor::WorkerEnv>> env = executor::WorkerEnvFrom(executor::EnvironmentMap());
    if (!env.ok()) return Fail(err, "run", env.status());
    if (env->has_value()) {
      Expected<std::optional<RunRecord>> record = executor::RunWorker(*plan, *model, **env, settings, out);
      if (!record.ok()) {
        executor::RecordRankFailure((*env)->rank);
        return Fail(err, "run", record.status());
      }
      return record->has_value() ? Finish(*plan, **record, out, err) : kExitOk;
    }
    return Launch(*plan, *model, err);
#endif
  }

 private:
#ifdef GPIPE_WITH_TORCH
  int Launch(const Plan& plan, const ModelSpec& model, std::ostream& err) {
    const Expected<Schedule> runnable = executor::CheckRunnable(plan, model, 0);
    if (!runnable.ok()) return Fail(err, "run", runnable.status());
    executor::LaunchOptions launch;
    launch.nnodes = nnodes_;
    launch.node_rank = node_rank_;
    launch.world_size = plan.num_ranks() * plan.replicas;
    if (launch.world_size % nnodes_ != 0) {
      return Fail(err, "run", Status::Usage("--nnodes " + std::to_string(nnodes_) + " does not divide the plan's " +
                                       std::to_string(launch.world_size) + " ranks (K x D)"));
    }
    if (node_rank_ >= nnodes_) {
      return Fail(err, "run", Status::Usage("--node-rank " + std::to_string(node_rank_) + " must be below --nnodes " +
                                       std::to_string(nnodes_)));
    }
    if (nnodes_ > 1 && master_port_ == 0) {
      return Fail(err, "run", Status::Usage("--nnodes " + std::to_string(nnodes_) +
                                       ": give every launcher the same --master-addr and --master-port"));
    }
    launch.master_addr = master_addr_;
    launch.master_port = master_port_ > 0 ? master_port_ : executor::FreeLoopbackPort();
    if (master_addr_ != "127.0.0.1" && master_addr_ != "localhost") {
      err << "gpipe-plan run: the rendezvous is on " << master_addr_ << ":" << launch.master_port
          << ", reachable from other machines (the default is loopback only)\n";
    }
    launch.grace = std::chrono::milliseconds(static_cast<int64_t>(std::min(timeout_s_, 10.0) * 1000));
    launch.argv = {executor::SelfExecutable(), "run", plan_path_, "--model", model_path_, "--steps", std::to_string(steps_),
                   "--threads-per-rank", std::to_string(threads_), "--device", device_,
                   "--timeout", Format("%g", timeout_s_)};
    const auto add = [&](const char* flag, const std::string& value) {
      if (!value.empty()) launch.argv.insert(launch.argv.end(), {flag, value});
    };
    add("--record", record_path_);
    add("--trace", pictures_.trace_path);
    add("--svg", pictures_.svg_path);
    add("--checkpoint-dir", checkpoint_dir_);
    if (checkpoint_every_ > 0) add("--checkpoint-every", std::to_string(checkpoint_every_));
    if (resume_) launch.argv.push_back("--resume");
    add("--init-weights", init_weights_);
    add("--save-weights", save_weights_);
    if (eval_every_ > 0) add("--eval-every", std::to_string(eval_every_));
    add("--eval-batches", std::to_string(eval_batches_));
    err << Sprintf("gpipe-plan run: starting %d rank%s on this node (%d in the job), rendezvous %s:%d\n",
                  launch.world_size / nnodes_, launch.world_size / nnodes_ == 1 ? "" : "s", launch.world_size,
                  launch.master_addr.c_str(), launch.master_port);
    const int status = executor::LaunchRanks(launch, err);
    return status == 0 ? kExitOk : kExitFailure;
  }
#endif

  int Finish(const Plan& plan, RunRecord& record, std::ostream& out, std::ostream& err) {
    record.plan = plan_path_;
    if (!record_path_.empty()) {
      const Status written = WriteFileAtomically(record_path_, RunRecordToJson(record).dump(1) + "\n");
      if (!written.ok()) return Fail(err, "run", written);
    }
    if (pictures_.any() && !record.steps.empty()) {
      const int step = record.steps.back().step;
      const Status written =
          pictures_.Write(TimelineFromRecord(record, step, PlanTitle(plan, "measured (step " + std::to_string(step + 1) + ")")));
      if (!written.ok()) return Fail(err, "run", written);
    }
    out << FormatRunSummary(record);
    if (!record_path_.empty()) out << "record written to " << record_path_ << "\n";
    return kExitOk;
  }

  std::string plan_path_, model_path_, record_path_, device_ = "cpu", checkpoint_dir_, master_addr_ = "127.0.0.1";
  std::string init_weights_, save_weights_;
  int eval_every_ = 0, eval_batches_ = 1;
  int steps_ = 10, threads_ = 1, checkpoint_every_ = 0, nnodes_ = 1, node_rank_ = 0, master_port_ = 0;
  double timeout_s_ = 60;
  bool resume_ = false, in_process_ = false;
  std::string wire_ = "exact";
  PictureFlags pictures_;
};

}  // namespace

std::unique_ptr<Command> MakeRunCommand(CLI::App& app) { return std::make_unique<RunCommand>(app); }

}  // namespace gpipe::cli
