#!/usr/bin/env python3
"""Bring-your-own-model figures (issue 15): for the models of models/examples (torchvision ResNet-18,
Hugging Face GPT-2 with its tied head, a Llama whose boundaries are tuples), each given as
"python": "file.py:build", bench/first_run.py profiles, plans (K=1 and K=2, pinned), runs every
configuration --rounds times interleaved, and compares; this script then prints, per configuration
(its fastest round): first and last loss, samples/s, predicted and measured step time, and predicted
and measured peak memory per rank.

  python3 bench/byo_models.py --out /tmp/byo                 # all three, the default configurations
  python3 bench/byo_models.py --models gpt2 --configs "1:1:4:1f1b:off 2:1:4:1f1b:off"
  python3 bench/byo_models.py --out /tmp/byo --table-only    # reprint from an earlier run
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DEFAULT_CONFIGS = "1:1:4:1f1b:off 2:1:4:1f1b:off 2:1:4:1f1b:on 1:1:8:1f1b:off 2:1:8:1f1b:off 2:1:8:zb-h1:off"


def compare(binary, plan, record):
    out = subprocess.run([binary, "compare", plan, record, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def mib(b):
    return f"{b / 2**20:.1f}"


def table(binary, model, out_dir):
    summary = json.load(open(os.path.join(out_dir, "summary.json")))
    print(f"\n{model}: global batch {summary['batch']}, {summary['steps']} steps, best of {summary['rounds']} rounds")
    print(f"{'configuration':28} {'loss first->last':>18} {'samples/s':>10} {'step pred/meas ms':>19} "
          f"{'peak MiB per rank, pred/meas':>30}")
    for row in summary["configs"]:
        name = row["config"]
        if name == "pick":
            continue
        plan = os.path.join(out_dir, name + "-plan.json")
        runs = [os.path.join(out_dir, f"{name}-run{r}.json") for r in range(summary["rounds"])]
        runs = [r for r in runs if os.path.exists(r)]
        best = max(runs, key=lambda r: json.load(open(r))["throughput_samples_per_s"])
        record = json.load(open(best))
        c = compare(binary, plan, best)
        losses = [s["loss"] for s in record["steps"]]
        memory = "  ".join(f"r{r['rank']} {mib(r['predicted_peak_memory_bytes'])}/{mib(r['measured_peak_memory_bytes'])}"
                           for r in c["ranks"])
        print(f"{name:28} {losses[0]:8.4f}->{losses[-1]:7.4f} {record['throughput_samples_per_s']:10.1f} "
              f"{row['predicted_ms']:9.1f}/{row['measured_ms']:<9.1f} {memory:>30}  ({100 * row['step_error']:+.0f}%)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet18-python gpt2 llama", help="model files in models/examples, without .json")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help="K:D:M:schedule:remat ... (bench/first_run.py)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="/tmp/gpipe-byo")
    ap.add_argument("--bin", default="build/gpipe-plan")
    ap.add_argument("--table-only", action="store_true")
    a = ap.parse_args()
    os.chdir(ROOT)
    os.environ.setdefault("GPIPE_CACHE_DIR", os.path.join(a.out, "cache"))
    for model in a.models.split():
        out_dir = os.path.join(a.out, model)
        if not a.table_only:
            subprocess.run([sys.executable, "bench/first_run.py", "--model", f"models/examples/{model}.json", "--out",
                            out_dir, "--bin", a.bin, "--batch", str(a.batch), "--steps", str(a.steps), "--rounds",
                            str(a.rounds), "--repeats", str(a.repeats), "--configs", a.configs,
                            "--calibrate-on", "4", "--no-planner-check"], check=True)
        table(os.path.abspath(a.bin), model, out_dir)


if __name__ == "__main__":
    main()
