#!/usr/bin/env python3
"""Peak activation memory per rank with and without rematerialization, measured by gpipe-plan run.

For the tiny GPT on K=2 ranks under GPipe, M in {1,4,8}, a fixed global batch: each rank's
activation peak is the last step's peak minus what the rank held as the step began (parameters and
optimizer state), both from the executor's counting allocator (see docs/executor.md). GPipe's
claim: without remat a rank keeps all M micro-batches' activations (A, the same total for any M at
a fixed global batch); with remat only its stage input per micro-batch plus one micro-batch's
activations while it recomputes: M * input(b) + A / M. Both also hold the stage's gradients (G,
as many bytes as its parameters), so the claim printed is M * input + (no-remat - G) / M + G. The cut
is fixed at the middle layer for every M.

  python3 bench/remat_memory.py [--binary build/gpipe-plan] [--global-batch 64] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args):
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{result.stderr}")
    return result


def measure(binary, tmp, model, batch, m, remat):
    plan = os.path.join(tmp, f"plan-{m}-{remat}.json")
    run([binary, "plan", "--profile", os.path.join(REPO, "profiles", "tiny-gpt-cpu.json"),
         "--cluster", os.path.join(REPO, "profiles", "clusters", "cpu-2.json"), "--global-batch", str(batch),
         "--stages", "2", "--microbatches", str(m), "--schedule", "gpipe", "--remat", remat, "--replicas", "1",
         "-o", plan])
    # The same cut for every M (the planner would move it), so that only M and remat change.
    with open(plan) as f:
        doc = json.load(f)
    layers = len(doc["profile"]["layers"]) if isinstance(doc.get("profile"), dict) else 6
    cut = layers // 2
    for stage, (first, end) in zip(doc["stages"], ((0, cut), (cut, layers))):
        stage["layers"] = [first, end]
    with open(plan, "w") as f:
        json.dump(doc, f)
    record = os.path.join(tmp, f"run-{m}-{remat}.json")
    run([binary, "run", plan, "--model", model, "--steps", "2", "--record", record])
    with open(record) as f:
        rec = json.load(f)
    with open(plan) as f:
        stages = json.load(f)["stages"]
    return rec, stages


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(REPO, "build", "gpipe-plan"))
    ap.add_argument("--model", default=os.path.join(REPO, "models", "tiny-gpt.json"))
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    with open(args.model) as f:
        model = json.load(f)
    seq, dim = model["input"]["seq_len"], model["layers"][0]["dim"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in (1, 4, 8):
            b = args.global_batch // m
            measured = {}
            for remat in ("off", "on"):
                rec, stages = measure(args.binary, tmp, args.model, args.global_batch, m, remat)
                for r in rec["ranks"]:
                    measured[(remat, r["rank"])] = r["step_peak_memory_bytes"][-1] - r["step_start_memory_bytes"][-1]
                    measured[("parameters", r["rank"])] = r["parameter_bytes"]
            for rank in (0, 1):
                # A stage's input for one micro-batch: int64 token ids on stage 0, fp32 [b, seq, dim] after.
                stage_input = b * seq * 8 if rank == 0 else b * seq * dim * 4
                # Both peaks also hold the stage's gradients (as many bytes as its parameters).
                grads = measured[("parameters", rank)]
                all_acts = measured[("off", rank)] - grads
                claim = m * stage_input + all_acts / m + grads
                rows.append({"microbatches": m, "rank": rank, "no_remat_bytes": all_acts,
                             "remat_bytes": measured[("on", rank)], "gpipe_claim_bytes": claim,
                             "stage_input_bytes": stage_input})
    mib = 1 << 20
    print(f"tiny GPT, K=2, GPipe, global batch {args.global_batch}: activation peak per rank (step peak minus the "
          f"step's starting memory), MiB")
    print("M  rank  no remat  remat   GPipe claim (M*input + acts/M + grads)  remat/claim  remat/no-remat")
    for r in rows:
        print(f"{r['microbatches']:<2} {r['rank']:<5} {r['no_remat_bytes'] / mib:8.2f}  {r['remat_bytes'] / mib:6.2f}"
              f"   {r['gpipe_claim_bytes'] / mib:8.2f}                            "
              f"{r['remat_bytes'] / r['gpipe_claim_bytes']:5.2f}        {r['remat_bytes'] / r['no_remat_bytes']:5.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
