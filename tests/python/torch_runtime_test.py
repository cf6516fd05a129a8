#!/usr/bin/env python3
"""Our plans in PyTorch's own pipeline runtime (python/gpipe_plan/torch.py) train to our executor's
losses.

For GPT-2 from models/examples (Hugging Face, 4 blocks, its LM head tied to the token embedding),
K=2 over Gloo on the CPU, for every schedule (gpipe, 1f1b, interleaved-1f1b, zb-h1,
interleaved-zb, zb-v, dualpipe-v) it
  1. plans with `gpipe-plan plan --schedule S --stages 2 --microbatches 4 --global-batch 8`
     (a made-up profile of GPT-2's six layers: only the cut matters to the losses);
  2. trains 3 steps with our executor (`gpipe-plan run PLAN --model gpt2.json --record`);
  3. trains the same plan 3 steps in PyTorch's runtime under torchrun (2 processes), from the
     same seed, so the same initial weights and the same batches, three ways:
       csv        our exported order (`export --format pytorch-csv`) through
                  _PipelineScheduleRuntime._load_csv, PyTorch adding its own sends and receives;
       class      PyTorch's schedule class for the schedule (ScheduleGPipe, ...), our cut;
       csv-comms  our order with our sends and receives (`--with-communication`), each rank's
                  receives from a peer posted in the order the peer sends (PyTorch's runtime
                  matches untagged: over Gloo a receive out of that order would take another
                  micro-batch's tensor, and gpipe_plan.torch would refuse the CSV);
  4. compares each step's loss (the mean over the global batch) with the executor's: the first
     step's difference and the largest absolute and relative difference over the steps, within
     1e-5 relative. The weights and the batches are the same, so the first step's losses are
     equal bit for bit; later steps may differ by a rounding of torch.optim.AdamW, which moves
     its first moment with lerp_ where LibTorch's AdamW (our executor's) multiplies and adds:
     with LibTorch's update written in Python (zb-v and interleaved-zb below, optimizer_fn=)
     every step's loss is our executor's bit for bit.
Beyond the schedules: remat (zb-v, every stage recomputing: torch.utils.checkpoint inside
PyTorch's split backward), D=2 replicas (K=2 x D=2, 4 processes), weights from a safetensors file
PyTorch wrote (`run --init-weights` against init_weights=), the other data kinds with the training
recipe (a token file with AdamW, weight decay, clipping and warm-up then cosine decay; Megatron's
indexed files with decay_1d; random tokens with SGD and momentum; ResNet-18 from torchvision, batch
norm, on synthetic images), and the command line (`torchrun -m gpipe_plan.torch`).

Usage: torch_runtime_test.py GPIPE_PLAN_BINARY [--keep DIR]
(about 2 minutes on the 2-core development machine; needs torch, transformers, torchvision,
safetensors)
"""
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
MODEL = os.path.join(REPO, "models", "examples", "gpt2.json")
CLUSTER = os.path.join(REPO, "profiles", "clusters", "cpu-2.json")
SCHEDULES = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "interleaved-zb", "zb-v", "dualpipe-v"]
RUNTIMES = ["csv", "class", "csv-comms"]
STEPS = 3
TOLERANCE = 1e-5  # relative, per step


def sh(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}\n{r.stdout[-2000:]}")
    return r


def data_cases(binary, tmp):
    """(case, model file, schedule, extra plan flags, M) for the data kinds beyond the text."""
    examples = os.path.join(REPO, "models", "examples")
    sh([sys.executable, os.path.join(REPO, "scripts", "prepare_tokens.py"),
        os.path.join(REPO, "models", "text", "public-domain.txt"), tmp, "--megatron"])

    def model(name, base, **fields):
        with open(os.path.join(examples, base)) as f:
            doc = json.load(f)
        doc.pop("learning_rate", None)
        doc["python"] = os.path.join(examples, doc["python"])
        doc.update(fields)
        path = os.path.join(tmp, name + ".json")
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    recipe = {"learning_rate": 1e-3, "betas": [0.9, 0.95], "weight_decay": 0.1, "clip_grad_norm": 0.5,
              "schedule": {"warmup_steps": 1, "decay": "cosine", "decay_steps": 3, "min_learning_rate": 1e-4}}
    tokens = model("gpt2-tokens-file", "gpt2-tokens.json", training=recipe,
                   data={"kind": "tokens-file", "path": os.path.join(tmp, "train.bin"), "dtype": "uint16"})
    megatron = model("gpt2-megatron", "gpt2-tokens.json", training=dict(recipe, decay_1d=True),
                     data={"kind": "megatron", "path": os.path.join(tmp, "train_text_document")})
    random_tokens = model("gpt2-random", "gpt2.json", training={"learning_rate": 0.01},
                          data={"kind": "random-tokens"})
    resnet = model("resnet18", "resnet18-python.json")
    return [("tokens-file, AdamW recipe", tokens, "zb-v", [], 4),
            ("megatron, decay_1d", megatron, "interleaved-1f1b", [], 4),
            ("random-tokens, momentum", random_tokens, "1f1b", ["--optimizer", "momentum"], 4),
            ("resnet18, images", resnet, "1f1b", [], 2)]


def fake_profile(tmp, layers=6):
    layer = {"forward_ms": 1, "backward_ms": 2, "backward_weight_ms": 1, "param_bytes": 1000,
             "activation_bytes": 1000, "output_bytes": 100}
    path = os.path.join(tmp, f"profile-{layers}.json")
    with open(path, "w") as f:
        json.dump({"format": "gpipe-profile/1", "model": "gpt2", "device": "cpu", "microbatch_size": 2,
                   "dtype": "fp32", "layers": [dict(layer, name=f"layer{i}") for i in range(layers)]}, f)
    return path


def make_plan(binary, tmp, name, schedule, remat="off", replicas=1, microbatches=4, batch=8, extra=(), layers=6):
    path = os.path.join(tmp, f"plan-{name}.json")
    cluster = CLUSTER
    if replicas > 1:
        cluster = os.path.join(tmp, "cpu-4.json")
        with open(cluster, "w") as f:
            json.dump({"format": "gpipe-cluster/1", "name": "cpu-4", "devices": 4, "device_memory_bytes": 8 << 30,
                       "link": {"bandwidth_bytes_per_s": 1e9, "latency_ms": 0.05}}, f)
    sh([binary, "plan", "--profile", fake_profile(tmp, layers), "--cluster", cluster, "--global-batch", str(batch),
        "--stages", "2", "--microbatches", str(microbatches), "--schedule", schedule, "--remat", remat,
        "--replicas", str(replicas), "--oversubscribe", "-q", "-o", path, *extra])
    return path


def executor_losses(binary, tmp, plan, name, init_weights=None, model=MODEL):
    out = os.path.join(tmp, f"run-{name}.json")
    cmd = [binary, "run", plan, "--model", model, "--steps", str(STEPS), "--record", out]
    if init_weights:
        cmd += ["--init-weights", init_weights]
    sh(cmd, cwd=tmp)
    with open(out) as f:
        return [s["loss"] for s in json.load(f)["steps"]]


def torchrun(nproc, args, timeout=300):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--master-port", str(free_port())] + args
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_runs(binary, tmp, name, jobs, nproc=2):
    """jobs: [(plan, runtime, init_weights)] run one after another in one torchrun job; returns
    {runtime or index: losses or the error line}."""
    spec = os.path.join(tmp, f"jobs-{name}.json")
    out = os.path.join(tmp, f"torch-{name}.json")
    with open(spec, "w") as f:
        json.dump({"binary": binary, "model": MODEL, "steps": STEPS, "jobs": jobs}, f)
    r = torchrun(nproc, [os.path.abspath(__file__), "--worker", spec, out])
    if not os.path.exists(out):
        raise AssertionError(f"{name}: the torchrun job wrote no results (exit {r.returncode}):\n{r.stderr[-4000:]}")
    with open(out) as f:
        results = json.load(f)
    if r.returncode != 0:
        results.append({"error": f"torchrun exit {r.returncode}: {r.stderr.strip().splitlines()[-1:]}"})
    return results


def libtorch_adamw(groups, training):
    """LibTorch's AdamW update (torch/csrc/api/src/optim/adamw.cpp), the one our executor runs:
    the first moment as m x beta1 + g x (1 - beta1), where torch.optim.AdamW takes
    m.lerp_(g, 1 - beta1), which rounds differently."""
    import torch

    class LibTorchAdamW(torch.optim.Optimizer):
        @torch.no_grad()
        def step(self):
            for g in self.param_groups:
                b1, b2 = g["betas"]
                for p in g["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state.update(step=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                    state["step"] += 1
                    p.mul_(1 - g["lr"] * g["weight_decay"])
                    bias1, bias2 = 1 - b1 ** state["step"], 1 - b2 ** state["step"]
                    state["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                    state["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                    denom = (state["v"].sqrt() / bias2 ** 0.5).add_(g["eps"])
                    p.addcdiv_(state["m"], denom, value=-g["lr"] / bias1)

    return LibTorchAdamW(groups, dict(lr=training["learning_rate"], betas=training["betas"], eps=training["eps"],
                                      weight_decay=training["weight_decay"]))


def worker(spec_path, out_path):
    """Under torchrun: runs each job with gpipe_plan.torch.train; rank 0 writes the results."""
    import torch.distributed as dist
    from gpipe_plan.torch import PlanError, train
    with open(spec_path) as f:
        spec = json.load(f)
    results = []
    for plan, runtime, init_weights, exact, *model in spec["jobs"]:
        try:
            losses = train(plan, model[0] if model else spec["model"], steps=spec["steps"], binary=spec["binary"], runtime=runtime,
                           init_weights=init_weights, timeout_s=60, optimizer_fn=libtorch_adamw if exact else None)
            results.append({"runtime": runtime, "losses": losses})
        except PlanError as e:  # raised on every rank alike, before the first step: the group is fine
            results.append({"runtime": runtime, "refused": str(e)})
        except Exception as e:  # noqa: BLE001 -- a failure inside a collective: stop here
            results.append({"runtime": runtime, "error": f"{type(e).__name__}: {str(e)[:500]}"})
            break
    if dist.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    if not any("error" in r for r in results):
        dist.barrier()
    dist.destroy_process_group()


def compare(want, got):
    """(first step's absolute difference, largest absolute, largest relative difference)."""
    if len(want) != len(got):
        return float("inf"), float("inf"), float("inf")
    diffs = [abs(a - b) for a, b in zip(want, got)]
    return diffs[0], max(diffs), max(d / abs(a) for d, a in zip(diffs, want))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
        return 0
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    binary = os.path.abspath(sys.argv[1])
    keep = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
    tmp = keep or tempfile.mkdtemp(prefix="torch-runtime-test-")
    os.makedirs(tmp, exist_ok=True)
    os.environ["GPIPE_CACHE_DIR"] = os.path.join(tmp, "cache")
    started = time.time()
    rows, failures = [], []

    def check(case, runtime, want, result, exact=False):
        if "losses" in result:
            first_d, abs_d, rel_d = compare(want, result["losses"])
            ok = abs_d == 0 if exact else rel_d <= TOLERANCE
            rows.append((case, runtime, "equal" if ok else "DIFFER", first_d, abs_d, rel_d, result["losses"][-1],
                         want[-1]))
            if not ok:
                failures.append(f"{case} {runtime}: losses {result['losses']} against the executor's {want}")
        else:
            rows.append((case, runtime, "FAILED", None, None, None, None, want[-1]))
            failures.append(f"{case} {runtime}: {result.get('refused') or result.get('error')}")

    # Every 2-process run in one torchrun job (a job's start costs seconds on 2 cores).
    cases = []  # (case, runtime, executor's losses, job index)
    jobs = []
    for schedule in SCHEDULES:
        plan = make_plan(binary, tmp, schedule, schedule)
        want = executor_losses(binary, tmp, plan, schedule)
        for runtime in RUNTIMES:
            cases.append((schedule, runtime, want, len(jobs), False))
            jobs.append((plan, runtime, None, False))

    # Remat in a V: every stage recomputes its forward (torch.utils.checkpoint) inside PyTorch's
    # split backward (I then W).
    plan = make_plan(binary, tmp, "zb-v-remat", "zb-v", remat="on")
    cases.append(("zb-v, remat on", "csv", executor_losses(binary, tmp, plan, "zb-v-remat"), len(jobs), False))
    jobs.append((plan, "csv", None, False))

    # With LibTorch's AdamW update in place of torch.optim.AdamW's, the losses are bit for bit
    # our executor's: the rest of the difference above is the optimizer's rounding.
    for schedule in ("zb-v", "interleaved-zb"):
        plan = os.path.join(tmp, f"plan-{schedule}.json")
        with open(os.path.join(tmp, f"run-{schedule}.json")) as f:
            want = [s["loss"] for s in json.load(f)["steps"]]
        cases.append((f"{schedule}, LibTorch AdamW", "csv", want, len(jobs), True))
        jobs.append((plan, "csv", None, True))

    # Weights PyTorch made (another seed), saved with safetensors: --init-weights and init_weights=.
    import torch
    from safetensors.torch import save_model
    sys.path.insert(0, os.path.join(REPO, "models", "examples"))
    import gpt2
    torch.manual_seed(99)
    weights = os.path.join(tmp, "from-pytorch.safetensors")
    save_model(gpt2.build(), weights)
    plan = os.path.join(tmp, "plan-1f1b.json")
    cases.append(("1f1b, init weights", "csv", executor_losses(binary, tmp, plan, "1f1b-init", init_weights=weights),
                  len(jobs), False))
    jobs.append((plan, "csv", weights, False))

    # The other data kinds and the training recipe, each against the executor: a token file with
    # AdamW, weight decay, clipping at 0.5 and warm-up then cosine decay; Megatron's indexed files
    # with decay_1d; random tokens with SGD and momentum; ResNet-18 (torchvision, batch norm) on
    # synthetic images.
    for case, model, schedule, extra, microbatches in data_cases(binary, tmp):
        plan = make_plan(binary, tmp, case.split(",")[0], schedule, microbatches=microbatches, extra=extra,
                         layers=11 if "resnet" in case else 6)
        cases.append((case, "csv", executor_losses(binary, tmp, plan, case.split(",")[0], model=model), len(jobs),
                      False))
        jobs.append((plan, "csv", None, False, model))

    results = torch_runs(binary, tmp, "k2", jobs)
    for case, runtime, want, index, exact in cases:
        result = results[index] if index < len(results) else {"error": "not run: " + str(results[-1:])}
        check(case, runtime, want, result, exact=exact)

    # Two replicas of a 2-rank pipeline (4 processes): gradients summed over the replicas.
    plan = make_plan(binary, tmp, "1f1b-d2", "1f1b", replicas=2, microbatches=2)
    want = executor_losses(binary, tmp, plan, "1f1b-d2")
    check("1f1b, K=2 x D=2", "csv", want, torch_runs(binary, tmp, "1f1b-d2", [(plan, "csv", None, False)], nproc=4)[0])

    # The command line: torchrun -m gpipe_plan.torch, its record.
    plan = os.path.join(tmp, "plan-zb-h1.json")
    record = os.path.join(tmp, "cli-zb-h1.json")
    r = torchrun(2, ["-m", "gpipe_plan.torch", plan, "--model", MODEL, "--steps", str(STEPS), "--binary", binary,
                     "--record", record])
    if r.returncode != 0 or not os.path.exists(record):
        rows.append(("zb-h1, command line", "csv", "FAILED", None, None, None, None, None))
        failures.append(f"torchrun -m gpipe_plan.torch failed ({r.returncode}): {r.stderr[-2000:]}")
    else:
        with open(record) as f:
            doc = json.load(f)
        with open(os.path.join(tmp, "run-zb-h1.json")) as f:
            want = [s["loss"] for s in json.load(f)["steps"]]
        check("zb-h1, command line", "csv", want, {"losses": [s["loss"] for s in doc["steps"]]})
        if not (doc["throughput_samples_per_s"] > 0 and f"{STEPS} steps in PyTorch's runtime" in r.stdout):
            failures.append(f"the command line's output or record is off: {r.stdout[-500:]}")

    print(f"GPT-2 (models/examples/gpt2.json), K=2 over Gloo, global batch 8, M=4, {STEPS} steps: "
          f"our executor against PyTorch {torch.__version__}'s runtime, same plan and seed")
    print(f"{'case':<30} {'runtime':<10} {'result':<8} {'step 1 diff':>11} {'max abs diff':>13} {'max rel diff':>13} "
          f"{'last loss (torch)':>18} {'(executor)':>11}")
    for case, runtime, result, first_d, abs_d, rel_d, last, want_last in rows:
        fmt = (lambda v: f"{v:.3e}" if v is not None else "-")
        print(f"{case:<30} {runtime:<10} {result:<8} {fmt(first_d):>11} {fmt(abs_d):>13} {fmt(rel_d):>13} "
              f"{(f'{last:.8f}' if last is not None else '-'):>18} "
              f"{(f'{want_last:.8f}' if want_last is not None else '-'):>11}")
    print(f"{time.time() - started:.0f} s; files in {tmp}" if keep else f"{time.time() - started:.0f} s")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print("ok: every run within", TOLERANCE, "relative of the executor's losses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
