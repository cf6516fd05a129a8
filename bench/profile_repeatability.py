#!/usr/bin/env python3
"""Profiles a model twice with gpipe-plan profile and compares the two runs layer by layer: does
each median agree with the other within the spreads the profiler reports (half the interquartile
range of each run, added)? Also prints each run's sum of layers against its whole-model step.

  python3 bench/profile_repeatability.py [--binary build/gpipe-plan] [--model models/tiny-gpt.json]
      [--microbatch-size 8] [--repeats 20]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def profile(args, path):
    cmd = [args.binary, "profile", "--model", args.model, "--microbatch-size", str(args.microbatch_size),
           "--repeats", str(args.repeats), "-o", path]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{result.stderr}")
    with open(path) as f:
        return json.load(f)["measurements"][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(REPO, "build", "gpipe-plan"))
    ap.add_argument("--model", default=os.path.join(REPO, "models", "tiny-gpt.json"))
    ap.add_argument("--microbatch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [profile(args, os.path.join(tmp, f"p{i}.json")) for i in (1, 2)]
    agree = total = 0
    print(f"{'layer':<10} {'pass':<9} {'run 1 ms':>16} {'run 2 ms':>16} {'|diff|':>8} {'spreads':>8}  agree")
    for l1, l2 in zip(runs[0]["layers"], runs[1]["layers"]):
        for key in ("forward", "backward"):
            a, b = l1[key], l2[key]
            diff = abs(a["median_ms"] - b["median_ms"])
            spread = a["spread_ms"] + b["spread_ms"]
            ok = diff <= spread
            agree += ok
            total += 1
            print(f"{l1['name']:<10} {key:<9} {a['median_ms']:8.3f} ±{a['spread_ms']:.3f} {b['median_ms']:8.3f} "
                  f"±{b['spread_ms']:.3f} {diff:8.3f} {spread:8.3f}  {'yes' if ok else 'NO'}")
    print(f"{agree} of {total} per-layer times agree within the reported spreads")
    for i, run in enumerate(runs, 1):
        whole = run["whole_model"]["median_ms"]
        print(f"run {i}: sum of layers {run['sum_of_layers_ms']:.3f} ms, whole model {whole:.3f} ms "
              f"({100 * (run['sum_of_layers_ms'] - whole) / whole:+.1f}%)")


if __name__ == "__main__":
    main()
