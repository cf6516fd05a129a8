#!/usr/bin/env python3
"""Predicted against measured on the first run: issue 13's targets, as a benchmark (not a test).

For one model: profile (layers at every micro-batch size the matrix needs, and the step costs with
as many co-located ranks as the matrix puts on this machine), profile-links (links, send issue
and the gradient all-reduce), then for each configuration K:D:M:schedule:remat a pinned plan, and
--rounds runs of every configuration, interleaved (round 1 runs them all, then round 2, ...). A
configuration is judged on its median round: this machine has fast spells as well as slow ones
(one rank of the tiny GPT measured 188 ms in one round and 255-306 ms in nine others), and the
profile's figures are medians.

Reported:
  - the machine's drift: the layers profiled again at the end, their time over the first profile's;
  - uncalibrated: |step-time error| and |peak-memory error| (largest over ranks), median and largest
    over every configuration, error = (predicted - measured) / measured;
  - calibrated: `gpipe-plan calibrate` fitted on the configurations whose M is in --calibrate-on,
    judged (compare --cluster) on the others, the held-out ones;
  - the planner's own choice (nothing pinned, uncalibrated, --devices the matrix's largest K x D),
    run the same rounds, against the fastest configuration measured; then the two head to head,
    --head-to-head more runs of each taken in turn, median against median. The matrix's fastest is
    the least of 56 noisy figures and reads fast by its luck (in one CNN matrix its two rounds
    measured 27.18 and 32.93 ms); run again beside the pick, it reads as it runs.
Everything is kept in OUT (plans, run records, compare JSON) and summary.json.

  python3 bench/first_run.py --model models/tiny-gpt.json --out /tmp/fr-gpt
  python3 bench/first_run.py --model models/small-cnn.json --out /tmp/fr-cnn --rounds 3
  python3 bench/first_run.py --configs "2:1:6:1f1b:off 2:1:6:zb-h1:off" --rounds 1
  python3 bench/first_run.py --model models/small-cnn.json --out /tmp/fr-cnn --head-to-head-only
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

MS = [1, 2, 3, 4, 6, 8, 16]


def default_configs():
    """Every K in {1,2}, D in {1,2}, schedule and remat, each at two of the M values, the M values
    taken in turn so that each of them appears; interleaved 1F1B (v=2) needs M a multiple of K."""
    combos = []
    for k in (1, 2):
        schedules = ["gpipe", "1f1b", "zb-h1"] + (["interleaved-1f1b"] if k > 1 else [])
        for d in (1, 2):
            for s in schedules:
                for r in ("off", "on"):
                    combos.append((k, d, s, r))
    configs, turn = [], 0
    for k, d, s, r in combos:
        allowed = [m for m in MS if s != "interleaved-1f1b" or m % k == 0]
        chosen = []
        while len(chosen) < 2:
            m = MS[turn % len(MS)]
            turn += 1
            if m in allowed and m not in chosen:
                chosen.append(m)
        configs += [f"{k}:{d}:{m}:{s}:{r}" for m in chosen]
    return configs


def sh(args, log=None, check=True):
    with open(log, "w") if log else open(os.devnull, "w") as out:
        p = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT if log else subprocess.DEVNULL)
    if check and p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(args)}" + (f"; see {log}" if log else ""))
    return p.returncode


def compare(binary, plan, record, cluster=None):
    args = [binary, "compare", plan, record, "--json"] + (["--cluster", cluster] if cluster else [])
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def run_plan(a, out, name, tag):
    """One run of OUT/NAME-plan.json, recorded as OUT/NAME-TAG.json and compared with its plan:
    (compare's JSON, the record's path), or None when the run failed (said, with its log)."""
    record = out(f"{name}-{tag}.json")
    rc = sh([a.bin, "run", out(name + "-plan.json"), "--model", a.model, "--steps", str(a.steps), "--record", record],
            out(f"{name}-{tag}.log"), check=False)
    if rc != 0:
        print(f"{name} {tag}: run failed, see {out(f'{name}-{tag}.log')}")
        return None
    return compare(a.bin, out(name + "-plan.json"), record), record


def peak_memory_error(c):
    """The largest |peak-memory error| over the ranks."""
    errors = [abs(r["predicted_peak_memory_bytes"] - r["measured_peak_memory_bytes"]) / r["measured_peak_memory_bytes"]
              for r in c["ranks"] if r.get("measured_peak_memory_bytes")]
    return max(errors) if errors else None


def layer_time_ratios(start, end):
    """Per micro-batch size: the sum of the layers' forward and backward medians in `end` over `start`."""
    def sums(path):
        return {m["microbatch_size"]: sum(l["forward"]["median_ms"] + l["backward"]["median_ms"] for l in m["layers"])
                for m in json.load(open(path))["measurements"]}
    a, b = sums(start), sums(end)
    return {size: b[size] / a[size] for size in sorted(a) if size in b and a[size] > 0}


def stats(values):
    values = [v for v in values if v is not None]
    if not values:
        return "none"
    return f"median {100 * statistics.median(values):.1f}%, largest {100 * max(values):.1f}% over {len(values)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/tiny-gpt.json")
    ap.add_argument("--out", default="/tmp/gpipe-first-run")
    ap.add_argument("--bin", default="build/gpipe-plan")
    ap.add_argument("--configs", help="K:D:M:schedule:remat ... (default: the covering matrix)")
    ap.add_argument("--batch", type=int, default=96, help="global batch (divisible by D x M for every configuration)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=20, help="profiler repeats per layer")
    ap.add_argument("--calibrate-on", default="2,16", help="M values the calibration is fitted on")
    ap.add_argument("--no-planner-check", action="store_true")
    ap.add_argument("--head-to-head", type=int, default=5,
                    help="runs of the planner's pick and of the matrix's fastest, in turn, after the matrix (0: none)")
    ap.add_argument("--head-to-head-only", action="store_true",
                    help="only the head to head, on the plans and summary.json an earlier run left in --out")
    a = ap.parse_args()
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    os.makedirs(a.out, exist_ok=True)
    configs = [tuple(c.split(":")) for c in (a.configs.split() if a.configs else default_configs())]
    configs = [(int(k), int(d), int(m), s, r) for k, d, m, s, r in configs]
    for k, d, m, s, r in configs:
        if a.batch % (d * m):
            sys.exit(f"--batch {a.batch} does not split into D x M = {d} x {m}")
    most_ranks = max(k * d for k, d, *_ in configs)
    sizes = sorted({a.batch // (d * m) for _, d, m, *_ in configs})
    first = min(sizes, key=lambda b: abs(b - 8))
    sizes = [first] + [b for b in sizes if b != first]
    out = lambda name: os.path.join(a.out, name)
    if a.head_to_head_only:
        summary = json.load(open(out("summary.json")))
        if "planner_choice" not in summary:
            sys.exit(f"{out('summary.json')} has no planner_choice: run the bench without --no-planner-check first")
        summary["planner_choice"]["head_to_head"] = head_to_head(a, out, summary["planner_choice"]["fastest"])
        json.dump(summary, open(out("summary.json"), "w"), indent=1)
        return

    print(f"profiling {a.model} at micro-batch sizes {sizes}, 1..{most_ranks} ranks per node", flush=True)
    sh([a.bin, "profile", "--model", a.model, "--microbatch-size", ",".join(map(str, sizes)), "--repeats",
        str(a.repeats), "--ranks-per-node", str(most_ranks), "-o", out("profile.json")], out("profile.txt"))
    sh([a.bin, "profile-links", "--ranks", str(max(2, most_ranks)), "-o", out("cluster.json")], out("links.txt"))

    planned = []
    for k, d, m, s, r in configs:
        name = f"k{k}-d{d}-m{m}-{s}-remat-{r}"
        extra = ["--chunks", "2"] if s == "interleaved-1f1b" else []
        rc = sh([a.bin, "plan", "--profile", out("profile.json"), "--cluster", out("cluster.json"), "--global-batch",
                 str(a.batch), "--devices", str(k * d), "--stages", str(k), "--replicas", str(d), "--microbatches",
                 str(m), "--schedule", s, "--remat", r, "-q", "-o", out(name + "-plan.json")] + extra,
                out(name + "-plan.log"), check=False)
        if rc != 0:
            print(f"{name}: no plan ({open(out(name + '-plan.log')).read().strip()[:160]})")
            continue
        planned.append((name, (k, d, m, s, r)))
    runs = list(planned)
    if not a.no_planner_check:
        sh([a.bin, "plan", "--profile", out("profile.json"), "--cluster", out("cluster.json"), "--global-batch",
            str(a.batch), "--devices", str(most_ranks), "-q", "-o", out("pick-plan.json")], out("pick-plan.log"))
        runs.append(("pick", None))

    measured = {}  # name -> [(measured ms, compare json, record)], one per round
    for rnd in range(a.rounds):
        for i, (name, _) in enumerate(runs):
            ran = run_plan(a, out, name, f"run{rnd}")
            if ran is None:
                continue
            c, record = ran
            measured.setdefault(name, []).append((c["measured_step_ms"], c, record))
            print(f"\rround {rnd + 1}/{a.rounds}: {i + 1}/{len(runs)} runs", end="", flush=True)
    print()
    # Each configuration is judged on its median round (the lower middle one of an even count): this
    # machine has fast spells as well as slow ones, and the profile's figures are medians too.
    best = {name: sorted(rounds, key=lambda r: r[0])[(len(rounds) - 1) // 2] for name, rounds in measured.items()}

    # The machine's drift over the bench: the layers profiled again, against the first profile.
    sh([a.bin, "profile", "--model", a.model, "--microbatch-size", ",".join(map(str, sizes)), "--repeats",
        str(a.repeats), "--ranks-per-node", "1", "-o", out("profile-end.json")], out("profile-end.txt"))
    drift = layer_time_ratios(out("profile.json"), out("profile-end.json"))
    print("the layers' time at the end over the start, per micro-batch size: " +
          ", ".join(f"{b}: {r:.3f}" for b, r in drift.items()))

    calibrate_on = {int(m) for m in a.calibrate_on.split(",") if m}
    fit = [best[n][2] for n, cfg in planned if n in best and cfg[2] in calibrate_on]
    held = [(n, cfg) for n, cfg in planned if n in best and cfg[2] not in calibrate_on]
    calibrated = {}
    if fit and held:
        sh([a.bin, "calibrate", *fit, "--cluster", out("cluster.json"), "-o", out("calibrated-cluster.json")],
           out("calibrate.log"))
        for n, _ in held:
            calibrated[n] = compare(a.bin, out(n + "-plan.json"), best[n][2], out("calibrated-cluster.json"))

    print(f"{'configuration':34} {'predicted':>10} {'measured':>10} {'error':>8} {'memory':>8} {'calibrated':>10}")
    rows = []
    for name, cfg in planned:
        if name not in best:
            continue
        _, c, _ = best[name]
        mem = peak_memory_error(c)
        cal = calibrated.get(name)
        rows.append({"config": name, "predicted_ms": c["predicted_step_ms"], "measured_ms": c["measured_step_ms"],
                     "step_error": c["step_error"], "peak_memory_error": mem,
                     "calibrated_step_error": cal["step_error"] if cal else None, "fitted_on": cfg[2] in calibrate_on})
        mem_text = "" if mem is None else f"{100 * mem:.1f}%"
        cal_text = ("fit" if cfg[2] in calibrate_on else "") if cal is None else f"{100 * cal['step_error']:+.1f}%"
        print(f"{name:34} {c['predicted_step_ms']:10.2f} {c['measured_step_ms']:10.2f} {100 * c['step_error']:+7.1f}% "
              f"{mem_text:>8} {cal_text:>10}")
    summary = {"model": a.model, "batch": a.batch, "rounds": a.rounds, "steps": a.steps, "configs": rows,
               "drift_end_over_start": drift}
    print(f"uncalibrated |step-time error|: {stats([abs(r['step_error']) for r in rows])}")
    print(f"uncalibrated |peak-memory error| (largest rank): {stats([r['peak_memory_error'] for r in rows])}")
    print(f"calibrated on M in {sorted(calibrate_on)}, held out: "
          f"{stats([abs(r['calibrated_step_error']) for r in rows if r['calibrated_step_error'] is not None])}")
    # By layout: the errors differ most between layouts (ranks per node against the node's cores).
    layouts = {}
    for r in rows:
        k, d = (int(part[1:]) for part in r["config"].split("-")[:2])
        layouts.setdefault((k, d), []).append(r)
    summary["by_layout"] = {}
    for (k, d), group in sorted(layouts.items()):
        errors = [abs(r["step_error"]) for r in group]
        summary["by_layout"][f"K={k} D={d}"] = {"median": statistics.median(errors), "largest": max(errors),
                                                 "configurations": len(group)}
        print(f"  K={k} D={d} ({k * d} rank{'s' if k * d > 1 else ''}): |step-time error| {stats(errors)}")
    if "pick" in best and rows:
        fastest = min(rows, key=lambda r: r["measured_ms"])
        pick = json.load(open(out("pick-plan.json")))
        chosen = f"{pick['schedule']} K={len({s['rank'] for s in pick['stages']})} D={pick.get('replicas', 1)} " \
                 f"M={pick['microbatches']}"
        ms = best["pick"][0]
        summary["planner_choice"] = {"plan": chosen, "predicted_ms": best["pick"][1]["predicted_step_ms"],
                                     "measured_ms": ms, "fastest": fastest["config"], "fastest_ms": fastest["measured_ms"],
                                     "slower_than_fastest": ms / fastest["measured_ms"] - 1}
        print(f"planner's choice {chosen}: predicted {best['pick'][1]['predicted_step_ms']:.2f} ms, measured {ms:.2f} ms; "
              f"fastest of the matrix {fastest['config']} {fastest['measured_ms']:.2f} ms "
              f"({100 * (ms / fastest['measured_ms'] - 1):+.1f}%)")
        if a.head_to_head > 0:
            summary["planner_choice"]["head_to_head"] = head_to_head(a, out, fastest["config"])
    json.dump(summary, open(out("summary.json"), "w"), indent=1)


def head_to_head(a, out, fastest):
    """The planner's pick and the matrix's fastest configuration run --head-to-head times each, in
    turn (pick, fastest, pick, ...), and judged median against median."""
    times = {"pick": [], fastest: []}
    for rnd in range(a.head_to_head):
        for name in times:
            ran = run_plan(a, out, name, f"h2h{rnd}")
            if ran is not None:
                times[name].append(ran[0]["measured_step_ms"])
        print(f"\rhead to head: {rnd + 1}/{a.head_to_head}", end="", flush=True)
    print()
    if not times["pick"] or not times[fastest]:
        sys.exit("the head to head has no run of the pick or of the fastest configuration")
    pick_ms, fastest_ms = statistics.median(times["pick"]), statistics.median(times[fastest])
    print(f"head to head, {a.head_to_head} runs each in turn: the pick {pick_ms:.2f} ms (median; "
          f"{min(times['pick']):.2f}-{max(times['pick']):.2f}), {fastest} {fastest_ms:.2f} ms "
          f"({min(times[fastest]):.2f}-{max(times[fastest]):.2f}): {100 * (pick_ms / fastest_ms - 1):+.1f}%")
    return {"runs": a.head_to_head, "pick_ms": times["pick"], "fastest_ms": times[fastest],
            "pick_median_ms": pick_ms, "fastest_median_ms": fastest_ms, "slower_than_fastest": pick_ms / fastest_ms - 1}


if __name__ == "__main__":
    main()
