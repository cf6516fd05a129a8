#!/usr/bin/env python3
"""The planner's benchmark families as a Markdown table, from planner_bench's JSON output.

    build-core/bench/planner_bench --benchmark_filter=Family --benchmark_out=families.json \\
        --benchmark_out_format=json
    python3 bench/planner_families_table.py families.json

One row per run: family, layers, devices, target gap, remat policy, CPU time of the search (one core), the gap
it reached (best step / lower bound - 1), proven (gap 0), the best step and the bound, and the
configuration that holds the bound.
"""
import json
import sys


def main():
    runs = json.load(open(sys.argv[1], encoding="utf-8"))["benchmarks"]
    print("| family | layers | devices | target | remat | CPU time | gap | proven | best step | lower bound | bound from |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        if run.get("error_occurred"):
            continue
        parts = run["name"].split("/")
        label = run.get("label", "")
        family = label.split(" ")[0]
        bound_from = label.split("; bound: ")[1] if "; bound: " in label else ""
        target = "proof" if parts[4] == "0" else f"{int(parts[4]) / 1e4:g}%"
        remat = "auto" if len(parts) < 6 or parts[5] == "0" else "stages"
        gap = run["gap"]
        gap_text = "no plan" if gap < 0 else f"{100 * gap:.2f}%"
        step_text = "none found" if gap < 0 else f"{run['step_ms'] / 1e3:.3f} s"
        print(f"| {family} | {parts[2]} | {parts[3]} | {target} | {remat} | {run['cpu_time'] / 1e3:.2f} s | {gap_text} | "
              f"{'yes' if run['proven'] else 'no'} | {step_text} | "
              f"{run['lower_bound_ms'] / 1e3:.3f} s | {bound_from} |")


if __name__ == "__main__":
    main()
