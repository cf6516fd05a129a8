#!/usr/bin/env python3
"""Issue 42's table: models trained on a prepared token file, K=1 and K=2, with evaluation.

For each model: the text prepared into byte-level token files (scripts/prepare_tokens.py, with
Megatron's .bin/.idx), the model written with that data (a model file of its own, vocabulary 256,
the GPT-3 style recipe: AdamW 0.9/0.95, weight decay 0.1, clipping at 1.0, warm-up then cosine),
profiled, planned with K pinned (the rest the planner's), run for --steps with --eval-every, and
reported: first and last training loss, the last evaluation loss, samples/s (median step after the
first), each rank's peak memory predicted (the plan) and measured (the record).

  python3 bench/train_on_tokens.py --out /tmp/tokens            # tiny GPT and GPT-2, K=1 and K=2, fp32
  python3 bench/train_on_tokens.py --precisions "fp32 bf16" --out /tmp/tokens-bf16
  python3 bench/train_on_tokens.py --models held-out-gpt --data megatron --out /tmp/tokens-held
"""
import argparse
import json
import os
import subprocess
import sys

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = {"learning_rate": 1e-3, "betas": [0.9, 0.95], "weight_decay": 0.1, "clip_grad_norm": 1.0,
          "schedule": {"warmup_steps": 30, "decay": "cosine", "decay_steps": 300, "min_learning_rate": 1e-4}}


def tiny_gpt(dim=64, heads=2, blocks=4, seed=1234):
    layers = [{"type": "embedding", "name": "embedding", "vocab": 256, "dim": dim, "max_seq": 64}]
    layers += [{"type": "transformer-block", "name": f"block{i}", "dim": dim, "heads": heads, "mlp_ratio": 4}
               for i in range(blocks)]
    layers += [{"type": "lm-head", "name": "head", "dim": dim, "vocab": 256}]
    return {"format": "gpipe-model/1", "name": f"gpt-{dim}x{blocks}", "input": {"kind": "tokens", "vocab": 256, "seq_len": 64},
            "seed": seed, "layers": layers}


MODELS = {
    "tiny-gpt": lambda: tiny_gpt(),
    "gpt2": lambda: {"format": "gpipe-model/1", "name": "gpt2-tokens", "input": {"kind": "tokens", "vocab": 256, "seq_len": 64},
                     "seed": 1234, "python": os.path.join(SOURCE, "models", "examples", "gpt2.py") + ":build_bytes"},
    # Not developed against: another width, head count, depth and seed.
    "held-out-gpt": lambda: tiny_gpt(dim=96, heads=3, blocks=3, seed=777),
}


def sh(args, **kw):
    result = subprocess.run(args, capture_output=True, text=True, **kw)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args)} exited {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=os.path.join(SOURCE, "build", "gpipe-plan"))
    parser.add_argument("--models", default="tiny-gpt gpt2")
    parser.add_argument("--data", choices=["tokens-file", "megatron"], default="tokens-file")
    parser.add_argument("--stages", default="1 2")
    parser.add_argument("--precisions", default="fp32", help='e.g. "fp32 bf16": profiled and run in each')
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("GPIPE_CACHE_DIR", os.path.join(args.out, "cache"))
    data = os.path.join(args.out, "data")
    sh([sys.executable, os.path.join(SOURCE, "scripts", "prepare_tokens.py"),
        os.path.join(SOURCE, "models", "text", "public-domain.txt"), data, "--megatron"])
    if args.data == "megatron":
        spec = {"kind": "megatron", "path": os.path.join(data, "train_text_document"),
                "validation": {"path": os.path.join(data, "val_text_document")}}
    else:
        spec = {"kind": "tokens-file", "path": os.path.join(data, "train.bin"), "dtype": "uint16",
                "validation": {"path": os.path.join(data, "val.bin")}}
    rows = []
    for name in args.models.split():
        model = dict(MODELS[name](), data=spec, training=RECIPE)
        model_path = os.path.join(args.out, name + ".json")
        with open(model_path, "w") as f:
            json.dump(model, f)
        for precision in args.precisions.split():
            profile = os.path.join(args.out, f"{name}-{precision}-profile.json")
            sh([args.binary, "profile", "--model", model_path, "--precision", precision, "-o", profile])
            for k in args.stages.split():
                plan = os.path.join(args.out, f"{name}-{precision}-k{k}-plan.json")
                sh([args.binary, "plan", "--profile", profile, "--cluster", os.path.join(SOURCE, "profiles", "clusters", "cpu-2.json"),
                    "--global-batch", str(args.batch), "--stages", k, "--replicas", "1", "-o", plan, "-q"])
                run = os.path.join(args.out, f"{name}-{precision}-k{k}-run.json")
                sh([args.binary, "run", plan, "--model", model_path, "--steps", str(args.steps), "--eval-every", "50",
                    "--eval-batches", "4", "--record", run])
                with open(plan) as f:
                    p = json.load(f)
                with open(run) as f:
                    r = json.load(f)
                predicted = [s["peak_memory_bytes"] for s in p["prediction"]["ranks"]] if "prediction" in p else []
                measured = [rank["peak_memory_bytes"] for rank in r["ranks"]]
                evals = [s["eval_loss"] for s in r["steps"] if "eval_loss" in s]
                rows.append({"model": name, "precision": precision, "K": int(k), "schedule": p["schedule"], "M": p["microbatches"],
                             "first_loss": r["steps"][0]["loss"], "last_loss": r["steps"][-1]["loss"],
                             "eval_loss": evals[-1], "samples_per_s": r["throughput_samples_per_s"],
                             "peak_predicted_mib": [x / 2**20 for x in predicted],
                             "peak_measured_mib": [x / 2**20 for x in measured]})
                row = rows[-1]
                print(f"{name:13s} {precision} K={k} {row['schedule']:8s} M={row['M']:<2d} loss {row['first_loss']:.3f} -> {row['last_loss']:.3f}"
                      f"  eval {row['eval_loss']:.3f}  {row['samples_per_s']:.1f} samples/s  peak MiB predicted "
                      f"{', '.join(f'{x:.1f}' for x in row['peak_predicted_mib'])} measured "
                      f"{', '.join(f'{x:.1f}' for x in row['peak_measured_mib'])}", flush=True)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
