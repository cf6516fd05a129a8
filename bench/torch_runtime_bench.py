#!/usr/bin/env python3
"""Our executor against PyTorch's own pipeline runtime on the same plans: GPT-2 from models/examples,
K=2 over Gloo on this machine's CPU, one thread per rank on both sides.

For each schedule (gpipe, 1f1b, interleaved-1f1b, zb-h1, interleaved-zb, zb-v, dualpipe-v) the bench
plans GPT-2 once (`gpipe-plan plan --schedule S --stages 2 --microbatches M --remat off`, from a
profile measured here), then, round after round, trains that plan with
  executor  `gpipe-plan run PLAN --model gpt2.json --steps N --record R`, and
  pytorch   `torchrun --nproc-per-node 2 -m gpipe_plan.torch PLAN --model gpt2.json --steps N
            --record R` (python/gpipe_plan/torch.py: the plan's order exported as PyTorch's CSV and
            run by _PipelineScheduleRuntime; --runtimes adds PyTorch's schedule classes),
the two sides alternating which goes first from one round to the next. Samples/s is defined alike
on both sides: the global batch over the median step time after the first step, a step's time
being the slowest rank's from a barrier to the end of its optimizer step. Each configuration's
best round is kept (a shared 2-core machine is noisy); the ratio is executor over PyTorch. The
losses of the two sides are compared too (same seed, same batches).

Usage:
  python3 bench/torch_runtime_bench.py [--binary build/gpipe-plan] [--rounds 3] [--steps 12]
      [--global-batch 32] [--microbatches 4] [--profile P.json] [--runtimes csv[,class]]
      [--out DIR] [--json results.json]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(REPO, "models", "examples", "gpt2.json")
CLUSTER = os.path.join(REPO, "profiles", "clusters", "cpu-2.json")
SCHEDULES = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "interleaved-zb", "zb-v", "dualpipe-v"]


def sh(cmd, what, env=None, timeout=900):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode != 0:
        sys.exit(f"torch_runtime_bench: {what} failed (exit {r.returncode}):\n  {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return r


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_record(path):
    with open(path) as f:
        doc = json.load(f)
    return doc["throughput_samples_per_s"], [s["loss"] for s in doc["steps"]], [s["time_ms"] for s in doc["steps"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(REPO, "build", "gpipe-plan"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--global-batch", type=int, default=32)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--profile", default=None, help="a profile of models/examples/gpt2.json (default: measure one)")
    ap.add_argument("--schedules", default=",".join(SCHEDULES))
    ap.add_argument("--runtimes", default="csv", help="gpipe_plan.torch runtimes to time: csv, class, csv-comms")
    ap.add_argument("--out", default=None, help="keep plans and records here (default: a temporary folder)")
    ap.add_argument("--json", default=None, help="also write every figure here")
    args = ap.parse_args()
    binary = os.path.abspath(args.binary)
    if not os.access(binary, os.X_OK):
        sys.exit(f"torch_runtime_bench: --binary {binary}: not an executable; build gpipe-plan with LibTorch first")
    out = os.path.abspath(args.out or tempfile.mkdtemp(prefix="torch-runtime-bench-"))
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, GPIPE_CACHE_DIR=os.path.join(out, "cache"),
               PYTHONPATH=os.path.join(REPO, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runtimes = args.runtimes.split(",")
    mb = args.global_batch // args.microbatches

    profile = args.profile
    if profile is None:
        profile = os.path.join(out, f"gpt2-profile-mb{mb}.json")
        if not os.path.exists(profile):
            print(f"profiling GPT-2 at micro-batch {mb} (a minute or two) ...", flush=True)
            sh([binary, "profile", "--model", MODEL, "--microbatch-size", str(mb), "--ranks-per-node", "2",
                "-o", profile], "gpipe-plan profile", env=env)

    plans = {}
    for schedule in args.schedules.split(","):
        path = os.path.join(out, f"plan-{schedule}.json")
        sh([binary, "plan", "--profile", profile, "--cluster", CLUSTER, "--global-batch", str(args.global_batch),
            "--stages", "2", "--replicas", "1", "--microbatches", str(args.microbatches), "--schedule", schedule,
            "--remat", "off", "-q", "-o", path], f"gpipe-plan plan ({schedule})", env=env)
        with open(path) as f:
            plans[schedule] = [tuple(s["layers"]) for s in json.load(f)["stages"]]

    def run_executor(schedule, r):
        record = os.path.join(out, f"executor-{schedule}-r{r}.json")
        sh([binary, "run", os.path.join(out, f"plan-{schedule}.json"), "--model", MODEL, "--steps", str(args.steps),
            "--record", record], f"gpipe-plan run ({schedule})", env=env)
        return read_record(record)

    def run_torch(schedule, runtime, r):
        record = os.path.join(out, f"torch-{runtime}-{schedule}-r{r}.json")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
               str(free_port()), "-m", "gpipe_plan.torch", os.path.join(out, f"plan-{schedule}.json"), "--model",
               MODEL, "--steps", str(args.steps), "--binary", binary, "--runtime", runtime, "--record", record]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            if not os.path.exists(record):
                sys.exit(f"torch_runtime_bench: gpipe_plan.torch ({schedule}, {runtime}) failed "
                         f"(exit {done.returncode}):\n  {' '.join(cmd)}\n{done.stderr[-3000:]}")
            print(f"  note: {schedule} {runtime} round {r + 1} exited {done.returncode} after writing its record "
                  f"(kept)", flush=True)
        return read_record(record)

    results = {s: {"executor": [], **{rt: [] for rt in runtimes}} for s in plans}
    started = time.time()
    for r in range(args.rounds):
        for i, schedule in enumerate(plans):
            sides = ["executor"] + runtimes
            if (r + i) % 2:
                sides.reverse()
            for side in sides:
                got = run_executor(schedule, r) if side == "executor" else run_torch(schedule, side, r)
                results[schedule][side].append(got)
            print(f"round {r + 1}/{args.rounds} {schedule:<17} " +
                  "  ".join(f"{side} {results[schedule][side][-1][0]:7.1f}/s" for side in ["executor"] + runtimes),
                  flush=True)

    import torch
    print(f"\nGPT-2 (models/examples/gpt2.json: 4 blocks, dim 128, vocab 96, seq 64), K=2 over Gloo, "
          f"1 thread per rank, global batch {args.global_batch}, M={args.microbatches}, remat off, {args.steps} steps "
          f"a run, best of {args.rounds} interleaved rounds; torch {torch.__version__}; {time.time() - started:.0f} s")
    header = "| schedule | stages (layers) | executor samples/s | " + " | ".join(
        f"PyTorch ({rt}) samples/s | executor / PyTorch ({rt}), best; per round" for rt in runtimes) + \
        " | losses, max rel. diff |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    table = {}
    for schedule, sides in results.items():
        best = {side: max(x[0] for x in runs) for side, runs in sides.items()}
        rounds = {side: [round(x[0], 1) for x in runs] for side, runs in sides.items()}
        want = sides["executor"][0][1]
        rel = max(abs(a - b) / abs(a) for side in runtimes for run in sides[side] for a, b in zip(want, run[1]))
        cut = " ".join(f"[{a},{b})" for a, b in plans[schedule])
        # Also each round's ratio of the two sides run back to back, and their median: the pairs see
        # the same load, where the best rounds of the two sides may come from different rounds.
        paired = {rt: [e[0] / t[0] for e, t in zip(sides["executor"], sides[rt])] for rt in runtimes}
        cells = " | ".join(f"{best[rt]:.1f} | {best['executor'] / best[rt]:.2f}; "
                           f"{', '.join(f'{x:.2f}' for x in paired[rt])} (median {statistics.median(paired[rt]):.2f})"
                           for rt in runtimes)
        print(f"| {schedule} | {cut} | {best['executor']:.1f} | {cells} | {rel:.1e} |")
        table[schedule] = {"stages": plans[schedule], "best": best, "rounds": rounds, "paired_ratios": paired,
                           "loss_max_rel_diff": rel}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "torch": torch.__version__, "results": table}, f, indent=1)
    print(f"(every round's samples/s, and the records, in {out})")


if __name__ == "__main__":
    main()
