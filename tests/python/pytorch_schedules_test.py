#!/usr/bin/env python3
"""Our schedules against PyTorch 2.11's torch.distributed.pipelining, through PyTorch's own code.

For every schedule kind, K in 1-4, M in 1-12 (and v in 2-3 for the interleaved kinds) it
  1. exports our order (`gpipe-plan export --format pytorch-csv`), loads it with PyTorch's own
     loader (`_PipelineScheduleRuntime._load_csv`, which validates it and lowers it with PyTorch's
     communication pass) and checks it equals, action for action per rank, the order PyTorch's
     schedule class plans for the same K, v and M (idle slots and REDUCE_GRAD left out, DualPipeV's
     overlapped pairs as their forward then their backward);
  2. exports it with communication (`--with-communication`) and loads that with PyTorch's
     "compute_comms" format;
  3. writes PyTorch's own order as PyTorch writes it (`_dump_csv`, compute-only with idle slots
     and OVERLAP_F_B groups, and PyTorch's lowered compute_comms form) and simulates it with
     `gpipe-plan simulate --schedule-csv`: the prediction equals that of the plan's own schedule;
  4. a CSV that deadlocks is refused with the rank-by-action grid.
Where PyTorch's planned order is itself wrong, the case is named and the test checks that
PyTorch's own validator rejects PyTorch's order there.

Usage: pytorch_schedules_test.py GPIPE_PLAN_BINARY [--wide]
  --wide: K 1-8 and M 1-32, 48, 64 (a few minutes; CTest runs K 1-4, M 1-12 and 16)
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

import torch.distributed.pipelining.schedules as S

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILE = os.path.join(REPO, "profiles", "gpt3-13b-a100-80gb.json")
CLUSTER = os.path.join(REPO, "profiles", "clusters", "a100-80gb-8.json")
LAYERS = 42

LOOP = {"interleaved-1f1b", "interleaved-zb"}
V = {"zb-v", "dualpipe-v"}


def stage_ranks(kind, ranks, stages):
    if kind in V:
        return [s if s < ranks else 2 * ranks - 1 - s for s in range(stages)]
    return [s % ranks for s in range(stages)]


def rounds_ok(ranks, m):
    return m % max(1, m // ranks) == 0


def shapes(wide):
    for kind in ["gpipe", "1f1b", "zb-h1", "interleaved-1f1b", "interleaved-zb", "zb-v", "dualpipe-v"]:
        for ranks in range(1, 9 if wide else 5):
            for m in sorted(set(range(1, 33 if wide else 13)) | {16, 48, 64}):
                if not wide and m > 16:
                    continue
                for chunks in ([2, 3] if kind in LOOP else [1]):
                    if kind in LOOP and not rounds_ok(ranks, m):
                        continue
                    if kind == "dualpipe-v" and m < 2 * ranks:
                        continue
                    stages = ranks * chunks if kind in LOOP else 2 * ranks if kind in V else ranks
                    yield kind, ranks, chunks, stages, m


def write_plan(path, kind, ranks, stages, m):
    cuts = [LAYERS * s // stages for s in range(stages + 1)]
    plan = {"format": "gpipe-plan/1", "profile": PROFILE, "cluster": CLUSTER, "schedule": kind,
            "microbatches": m, "global_batch": m,
            "stages": [{"layers": [cuts[s], cuts[s + 1]], "rank": r}
                       for s, r in enumerate(stage_ranks(kind, ranks, stages))]}
    with open(path, "w") as f:
        json.dump(plan, f)


def run(binary, *args, ok=True):
    p = subprocess.run([binary, *args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


def bare(cls, **attrs):
    """An instance of a PyTorch schedule class without its constructor (which wants real stages
    and a process group): the order depends only on these attributes."""
    obj = cls.__new__(cls)
    for k, v in attrs.items():
        setattr(obj, k, v)
    return obj


def flatten(actions):
    out = []
    for a in actions:
        if a is None or a.computation_type == S.REDUCE_GRAD:
            continue
        out.extend(a.sub_actions if a.sub_actions is not None else [a])
    return [str(a) for a in out]


def pytorch_order(kind, ranks, chunks, stages, m):
    """PyTorch's planned compute order per rank, as its classes build it."""
    rounds = max(1, m // ranks)
    looped = dict(pp_group_size=ranks, n_local_stages=chunks, _n_microbatches=m, number_of_rounds=rounds,
                  microbatches_per_round=m // rounds)
    if kind == "gpipe":
        return bare(S.ScheduleGPipe, _num_stages=ranks, _n_microbatches=m)._get_pipeline_order()
    if kind == "1f1b":
        return bare(S.Schedule1F1B, _num_stages=ranks, _n_microbatches=m)._get_pipeline_order()
    if kind == "interleaved-1f1b":
        s = bare(S.ScheduleInterleaved1F1B, **looped)
        return {r: s._calculate_single_rank_operations(r) for r in range(ranks)}
    if kind in ("interleaved-zb", "zb-h1"):
        s = bare(S.ScheduleInterleavedZeroBubble, **looped)
        s.pipeline_order = {r: s._calculate_single_rank_operations(r) for r in range(ranks)}
        return s._add_bubbles_to_actions(stages)
    if kind == "zb-v":
        s = bare(S.ScheduleZBVZeroBubble, pp_group_size=ranks, _n_microbatches=m, num_stages=stages)
        return {r: s._calculate_single_rank_operations(r) for r in range(ranks)}
    if kind == "dualpipe-v":
        s = bare(S.ScheduleDualPipeV, pp_group_size=ranks, _n_microbatches=m)
        return {r: s._calculate_single_rank_operations(r) for r in range(ranks)}
    raise AssertionError(kind)


def runtime(ranks, stages, m):
    return bare(S._PipelineScheduleRuntime, pp_group_size=ranks, _num_stages=stages, _n_microbatches=m, _stages=[],
                pipeline_order={})


def pytorch_rejects(order, ranks, stages, m):
    try:
        S._validate_schedule(order, ranks, stages, m)
    except (AssertionError, KeyError):
        return True
    return False


def dump_pytorch(order, path):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        for r in sorted(order):
            writer.writerow(order[r])


def step_ms(binary, plan, *extra):
    out = run(binary, "simulate", plan, "--json", *extra).stdout
    return json.loads(out)["step_time_ms"]


def main():
    binary = sys.argv[1]
    wide = "--wide" in sys.argv[2:]
    failures, checked, pytorch_wrong, simulated = [], 0, [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for kind, ranks, chunks, stages, m in shapes(wide):
            name = f"{kind} K={ranks} v={chunks} M={m}"
            plan = os.path.join(tmp, "plan.json")
            write_plan(plan, kind, ranks, stages, m)
            ours_csv = os.path.join(tmp, "ours.csv")
            run(binary, "export", plan, "--format", "pytorch-csv", "-o", ours_csv)
            # 1. PyTorch's loader takes ours, and ours is PyTorch's order.
            rt = runtime(ranks, stages, m)
            rt._load_csv(ours_csv, format="compute_only")
            ours = {r: flatten(rt.pipeline_order[r]) for r in range(ranks)}
            theirs_raw = pytorch_order(kind, ranks, chunks, stages, m)
            theirs = {r: flatten(theirs_raw[r]) for r in range(ranks)}
            checked += 1
            if ours != theirs:
                if pytorch_rejects(theirs_raw, ranks, stages, m):
                    pytorch_wrong.append(name)  # PyTorch's own validator refuses PyTorch's order
                else:
                    bad = [r for r in range(ranks) if ours[r] != theirs[r]]
                    failures.append(f"{name}: rank {bad[0]}\n  ours    {ours[bad[0]]}\n  pytorch {theirs[bad[0]]}")
                continue
            # 2. With communication, as PyTorch's compute_comms.
            comms_csv = os.path.join(tmp, "comms.csv")
            run(binary, "export", plan, "--format", "pytorch-csv", "--with-communication", "-o", comms_csv)
            runtime(ranks, stages, m)._load_csv(comms_csv, format="compute_comms")
            # 3. PyTorch's own files simulate as our plan does (every fourth shape: it costs a run each).
            if checked % 4 == 0 or kind in V:
                expected = step_ms(binary, plan)
                theirs_csv = os.path.join(tmp, "theirs.csv")
                dump_pytorch(theirs_raw, theirs_csv)
                got = step_ms(binary, plan, "--schedule-csv", theirs_csv)
                if abs(got - expected) > 1e-9 * max(1.0, expected):
                    failures.append(f"{name}: PyTorch's CSV simulates to {got} ms, the plan to {expected} ms")
                # PyTorch's lowering refuses its own REDUCE_GRAD in a compute-only file.
                dump_pytorch({r: [a for a in theirs_raw[r] if a is None or a.computation_type != S.REDUCE_GRAD]
                              for r in theirs_raw}, theirs_csv)
                lowered = runtime(ranks, stages, m)
                lowered._load_csv(theirs_csv, format="compute_only")
                lowered._dump_csv(theirs_csv, format="compute_comms")
                p = run(binary, "simulate", plan, "--json", "--schedule-csv", theirs_csv, ok=False)
                if p.returncode != 0:
                    failures.append(f"{name}: PyTorch's lowered compute_comms CSV refused: {p.stderr.strip()[:400]}")
                simulated += 1
        # 4. A CSV that deadlocks: 1F1B K=2 M=2, rank 0 waits in 0B0 for rank 1's 1B0, rank 1 in
        # 1F1 for rank 0's 0F1, which comes after 0B0. And one with a backward missing.
        write_plan(os.path.join(tmp, "plan.json"), "1f1b", 2, 2, 2)
        bad = os.path.join(tmp, "bad.csv")
        for text, expected in [("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n", ["deadlock", ">0RECV_B0<", ">1RECV_F1<"]),
                               ("0F0,0F1,0B0,0B1\n1F0,1B0,1F1\n", ["1B1 is missing"])]:
            with open(bad, "w") as f:
                f.write(text)
            p = run(binary, "simulate", os.path.join(tmp, "plan.json"), "--schedule-csv", bad, ok=False)
            if p.returncode == 0 or not all(e in p.stderr for e in expected):
                failures.append(f"a bad CSV was not refused as expected ({expected}): {p.returncode} {p.stderr}")
    print(f"{checked} shapes checked against PyTorch 2.11's orders; {simulated} of PyTorch's own CSVs simulated")
    if pytorch_wrong:
        # 2.11: Schedule1F1B._get_pipeline_order numbers the last rank's first forward 1, not 0
        # (forward_mb starts at 0 and is incremented before its first use when a rank has no
        # warm-up), on every K and M: its own _validate_schedule refuses it.
        kinds = sorted({n.split()[0] for n in pytorch_wrong})
        print(f"{len(pytorch_wrong)} shapes where PyTorch's planned order fails PyTorch's own validator, so ours "
              f"differs, all of {', '.join(kinds)}: e.g. {pytorch_wrong[0]}")
        if kinds != ["1f1b"]:
            failures.append("PyTorch's order is refused by its own validator for more than 1f1b: " + ", ".join(kinds))
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
