#!/usr/bin/env python3
"""Training throughput of two gpipe-plan binaries side by side: K=2 pipelines over Gloo (two
processes on loopback, one thread each), interleaved, best of --repeats, and the ratio new/old.
It answers one question: did a change to the executor's wire make Gloo runs slower?

For each model and each (schedule, M): one plan (pinned K=2, D=1), then `run --steps S` with the
OLD and the NEW binary in turn (each first in every other repeat), --repeats times; each run's throughput is its record's
throughput_samples_per_s (global batch / median step after the first); the best run of each binary
is reported with the ratio NEW/OLD. The small CNN (models/small-cnn.json, profiled here on the fly)
is the held-out case next to the tiny GPT the wire was developed on.

Usage:
  python3 bench/wire_speed.py OLD_BINARY NEW_BINARY [--repeats 3] [--steps 6] [--json out.json]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = [
    # model file, profile (None: profile it with NEW), global batch, [(schedule, M)]
    ("models/tiny-gpt.json", "profiles/tiny-gpt-cpu.json", 128,
     [("gpipe", 1), ("gpipe", 2), ("1f1b", 4), ("1f1b", 8), ("zb-h1", 8)]),
    ("models/small-cnn.json", None, 96, [("1f1b", 3), ("gpipe", 6), ("zb-h1", 12)]),
]


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    cluster = os.path.join(REPO, "profiles", "clusters", "cpu-2.json")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model, profile, batch, configs in CASES:
            model_path = os.path.join(REPO, model)
            name = os.path.splitext(os.path.basename(model))[0]
            if profile is None:
                profile = os.path.join(tmp, name + "-profile.json")
                run([args.new, "profile", "--model", model_path, "--microbatch-size", "8", "--repeats", "3",
                     "-o", profile])
            else:
                profile = os.path.join(REPO, profile)
            for schedule, m in configs:
                plan = os.path.join(tmp, f"{name}-{schedule}-{m}.json")
                run([args.new, "plan", "--profile", profile, "--cluster", cluster, "--global-batch", str(batch),
                     "--stages", "2", "--replicas", "1", "--microbatches", str(m), "--schedule", schedule,
                     "--remat", "off", "-q", "-o", plan])
                best = {"old": 0.0, "new": 0.0}
                for repeat in range(args.repeats):
                    # Each binary goes first in every other repeat, so neither always runs on a
                    # machine the other just warmed (or slowed).
                    for which in (("old", "new") if repeat % 2 == 0 else ("new", "old")):
                        record = os.path.join(tmp, "record.json")
                        run([getattr(args, which), "run", plan, "--model", model_path, "--steps", str(args.steps),
                             "--record", record], cwd=REPO)
                        with open(record) as f:
                            best[which] = max(best[which], json.load(f)["throughput_samples_per_s"])
                row = {"model": name, "schedule": schedule, "M": m, "old": best["old"], "new": best["new"],
                       "ratio": best["new"] / best["old"]}
                rows.append(row)
                print(f"{name:10s} {schedule:8s} M={m:<3d} old {row['old']:8.1f}  new {row['new']:8.1f} samples/s"
                      f"  new/old {row['ratio']:.3f}", flush=True)
    ratios = sorted(r["ratio"] for r in rows)
    print(f"median new/old {ratios[len(ratios) // 2]:.3f}, lowest {ratios[0]:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
