#!/usr/bin/env python3
"""GPT-3 175B against Megatron-LM's published figures (Narayanan et al., SC'21).

For each cluster size, three plans of the shipped GPT-3 175B A100 profile at global batch 1,536:
the planner's best (t searched), the best with t pinned to 1, and Megatron's layout pinned
(tensor 8 x pipeline 12; pipeline 16 where 12 x 8 does not divide the GPUs). Each row gives the
predicted step, TFLOP/s per GPU and the largest peak memory, next to the paper's figure.

TFLOP/s per GPU counts FLOPs as the paper does (its eq. 3, four passes: the recompute it ran
counted): 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), over the step and the GPUs; "model" counts three
passes, 72 B s l h^2 (1 + s/(6h) + V/(12 l h)), whatever the plan recomputes.

Usage: python3 bench/megatron_anchor.py [BINARY] [--devices 384,768,1024,1536,4096] [--time-limit S]
(S: the planner's --time-limit; default 0, every search to the end)
"""
import argparse
import json
import os
import subprocess
import sys
import time

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PROFILE = os.path.join(SOURCE, "profiles", "gpt3-175b-a100-80gb.json")
CLUSTER = os.path.join(SOURCE, "profiles", "clusters", "a100-80gb-32.json")
BATCH, SEQ, LAYERS, HIDDEN, VOCAB = 1536, 2048, 96, 12288, 51200  # the paper's GPT-3 (V padded to 51,200)
# The paper's TFLOP/s per GPU at batch 1,536 (counting recompute): Table 2 (tensor 8 x pipeline 12)
# on 384, 768 and 1,536 GPUs, and section 5.1's 1,024-GPU figure.
PAPER = {384: 153, 768: 149, 1024: 140, 1536: 141}


def paper_flops():
    return 96 * BATCH * SEQ * LAYERS * HIDDEN ** 2 * (1 + SEQ / (6 * HIDDEN) + VOCAB / (16 * LAYERS * HIDDEN))


def model_flops():
    return 72 * BATCH * SEQ * LAYERS * HIDDEN ** 2 * (1 + SEQ / (6 * HIDDEN) + VOCAB / (12 * LAYERS * HIDDEN))


def plan(binary, devices, extra, time_limit):
    args = [binary, "plan", "--profile", PROFILE, "--cluster", CLUSTER, "--devices", str(devices),
            "--global-batch", str(BATCH), "--json", "-q"] + extra
    args += ["--time-limit", str(time_limit)]
    start = time.monotonic()
    result = subprocess.run(args, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if result.returncode != 0:
        return None, seconds, " ".join(args[1:])
    return json.loads(result.stdout), seconds, " ".join(args[1:])


def describe(p):
    t = p.get("tensor_parallel", 1)
    k = max(s["rank"] for s in p["stages"]) + 1
    remat = sum(1 for s in p["stages"] if s.get("remat"))
    v = len(p["stages"]) // k
    shape = p["schedule"] + (f" v={v}" if p["schedule"].startswith("interleaved") else "")
    zero = " ZeRO-1" if p.get("sharded_optimizer") else ""
    return f"{shape}, t={t} K={k} D={p['replicas']}{zero} M={p['microbatches']}, remat {remat}/{len(p['stages'])}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("binary", nargs="?", default=os.path.join(SOURCE, "build-core", "gpipe-plan"))
    parser.add_argument("--devices", default="384,768,1024,1536,4096")
    parser.add_argument("--time-limit", type=float, default=0, help="the planner's (default 0: no limit)")
    args = parser.parse_args()
    print("| GPUs | plan | layout | predicted step | TFLOP/s per GPU (paper's count) | model TFLOP/s | peak memory | gap | planner time | paper |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for devices in [int(d) for d in args.devices.split(",")]:
        pipeline = 12 if devices % (8 * 12) == 0 else 16
        paper = PAPER.get(devices)
        paper_text = f"{paper} TFLOP/s, {paper_flops() / (devices * paper * 1e12):.1f} s" if paper else "-"
        for name, extra in [("best", []), ("t = 1", ["--tensor-parallel", "1"]),
                            (f"Megatron 8 x {pipeline}", ["--tensor-parallel", "8", "--stages", str(pipeline)])]:
            p, seconds, command = plan(args.binary, devices, extra, args.time_limit)
            if p is None:
                print(f"| {devices} | {name} | no plan fits | - | - | - | - | - | {seconds:.1f} s | {paper_text} |")
                continue
            pred = p["prediction"]
            step = pred["step_time_ms"] / 1e3
            peak = pred["peak_memory_bytes"] / 2 ** 30
            gap = pred["gap"]
            print(f"| {devices} | {name} | {describe(p)} | {step:.2f} s | {paper_flops() / (devices * step) / 1e12:.0f} | "
                  f"{model_flops() / (devices * step) / 1e12:.0f} | {peak:.1f} GiB | "
                  f"{'0' if gap == 0 else f'{100 * gap:.1f}%'} | {seconds:.1f} s | {paper_text} |")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
