#!/usr/bin/env python3
"""Default `plan` (no flags beyond the profile, cluster and batch) on the planner families and the
shipped models, across cluster sizes: wall time and the gap it reports, one run each.

Cases: the families of bench/planner_families.py (uniform, uneven, heavy ends, bimodal; 64, 256
and 1,024 layers; batch 512) on 8, 32, 256, 1,024 and 4,096 devices (the 64-device family cluster
with --devices), and the shipped GPT-3 13B and 175B (A100), GPT-2 1.5B and BERT-Large (H100)
profiles on the same sizes (GPT-3 175B at batch 1,536, the others as in docs/planner.md). Sizes a
batch cannot use (more devices than samples x layers allow) print "no plan".

Usage: python3 bench/planner_speed.py [BINARY] [--families DIR] [--only SUBSTRING] [--sizes 8,32]
       [--time-limit S]   (S: the planner's --time-limit; default: the planner's own default)
Prints a Markdown table, one row per case and one column per size: "wall time, gap" ("no plan"
where nothing fits); with --long, one row per run with the configuration that holds the bound.
"""
import argparse
import json
import os
import subprocess
import sys
import time

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PROFILES = os.path.join(SOURCE, "profiles")


def cases(families):
    out = []
    for family in ["uniform", "uneven", "heavy-ends", "bimodal"]:
        for layers in [64, 256, 1024]:
            out.append((f"{family} {layers} layers", os.path.join(families, f"{family}-{layers}.json"),
                        os.path.join(families, "cluster-64.json"), 512))
    out += [
        ("GPT-3 13B", os.path.join(PROFILES, "gpt3-13b-a100-80gb.json"),
         os.path.join(PROFILES, "clusters", "a100-80gb-32.json"), 512),
        ("GPT-3 175B", os.path.join(PROFILES, "gpt3-175b-a100-80gb.json"),
         os.path.join(PROFILES, "clusters", "a100-80gb-32.json"), 1536),
        ("GPT-2 1.5B", os.path.join(PROFILES, "gpt2-1.5b-h100-80gb.json"),
         os.path.join(PROFILES, "clusters", "h100-80gb-32.json"), 512),
        ("BERT-Large", os.path.join(PROFILES, "bert-large-h100-80gb.json"),
         os.path.join(PROFILES, "clusters", "h100-80gb-32.json"), 256),
    ]
    return out


def run(binary, profile, cluster, batch, devices, time_limit):
    cmd = [binary, "plan", "--profile", profile, "--cluster", cluster, "--global-batch", str(batch),
           "--devices", str(devices), "-q", "--json"]
    if time_limit is not None:
        cmd += ["--time-limit", str(time_limit)]
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    try:
        prediction = json.loads(r.stdout)["prediction"]
    except (ValueError, KeyError):
        return wall, None, (r.stderr.strip().splitlines() or ["no output"])[0][:80]
    return wall, prediction["gap"], prediction.get("lower_bound_configuration", "") or "proven"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary", nargs="?", default=os.path.join(SOURCE, "build-core", "gpipe-plan"))
    parser.add_argument("--families", default=os.path.join(SOURCE, "build-core", "bench", "families"))
    parser.add_argument("--only", default="")
    parser.add_argument("--sizes", default="8,32,256,1024,4096")
    parser.add_argument("--time-limit", type=float, default=None)
    parser.add_argument("--long", action="store_true")
    args = parser.parse_args()
    if not os.path.exists(os.path.join(args.families, "uniform-64.json")):
        sys.exit(f"no families in {args.families}: python3 bench/planner_families.py --out {args.families} --seed 16")
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.long:
        print("| case | devices | time | gap | bound from |")
        print("|---|---|---|---|---|")
    else:
        print("| case | " + " | ".join(f"{d:,} devices" for d in sizes) + " |")
        print("|---|" + "---|" * len(sizes))
    for name, profile, cluster, batch in cases(args.families):
        if args.only and args.only not in name:
            continue
        cells = []
        for devices in sizes:
            wall, gap, source = run(args.binary, profile, cluster, batch, devices, args.time_limit)
            gap_text = "no plan" if gap is None else f"{100 * gap:.2f}%"
            if args.long:
                print(f"| {name} | {devices:,} | {wall:.2f} s | {gap_text} | {source} |", flush=True)
            cells.append(f"{wall:.2f} s, {gap_text}")
        if not args.long:
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
