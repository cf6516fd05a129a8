#!/usr/bin/env python3
"""Write the planner's benchmark families as gpipe-plan profile and cluster files, seeded.

Usage (Python 3, standard library only):

    python3 bench/planner_families.py --out DIR [--seed 16]

writes, for L in 64, 256 and 1,024 layers,

    DIR/uniform-L.json     identical blocks: forward 1 ms, backward 2 ms, 100 MiB of parameters and
                           100 MiB of activations each, 16 MiB messages
    DIR/uneven-L.json      every layer drawn at random: forward 0.05-2 ms, backward 0.1-4 ms,
                           parameters 1-200 MiB, activations 1-200 MiB, messages 1-32 MiB
    DIR/heavy-ends-L.json  uniform blocks between a first and a last layer (embedding, head) each
                           5-20x a block (times, parameters, activations drawn per layer)
    DIR/bimodal-L.json     uniform blocks with every fourth layer 10x (as MoE layers)

and DIR/cluster-N.json for N in 8, 16, 32 and 64 devices of 80 GiB in nodes of 8: 25 GB/s and
0.01 ms inside a node, 12.5 GB/s and 0.05 ms between nodes.

Times and bytes are per sample (microbatch_size 1; fp32, so Adam keeps 4x the parameter bytes);
backward_weight_ms is half of backward_ms (so zb-h1 is searched too). The fifth family,
memory-tight, is uneven-L.json under a budget of 1.05x the least memory any plan needs, which
only the planner can compute: bench/planner_bench computes it and reports it (counter
budget_gib) for `plan --memory`.

The same --seed writes the same files on every run and every Python 3 (random.Random seeded with
a string). bench/planner_bench reads them from the directory CMake generates them into.
"""
from __future__ import annotations

import argparse
import json
import os
import random

MIB = 1 << 20
LAYERS = (64, 256, 1024)
DEVICES = (8, 16, 32, 64)
FAMILIES = ("uniform", "uneven", "heavy-ends", "bimodal")


def layer(name, forward_ms, backward_ms, param_bytes, activation_bytes, output_bytes):
    return {
        "name": name,
        "forward_ms": round(forward_ms, 6),
        "backward_ms": round(backward_ms, 6),
        "backward_weight_ms": round(backward_ms / 2, 6),
        "param_bytes": int(param_bytes),
        "activation_bytes": int(activation_bytes),
        "output_bytes": int(output_bytes),
    }


def block(name, scale=1.0):
    return layer(name, 1.0 * scale, 2.0 * scale, 100 * MIB * scale, 100 * MIB * scale, 16 * MIB)


def family_layers(family: str, n: int, rng: random.Random):
    if family == "uniform":
        return [block(f"block{i}") for i in range(n)]
    if family == "uneven":
        return [layer(f"layer{i}", rng.uniform(0.05, 2), rng.uniform(0.1, 4), rng.uniform(1, 200) * MIB,
                      rng.uniform(1, 200) * MIB, rng.uniform(1, 32) * MIB) for i in range(n)]
    if family == "heavy-ends":
        ends = [rng.uniform(5, 20) for _ in range(2)]
        return ([block("embedding", ends[0])] + [block(f"block{i}") for i in range(n - 2)] +
                [block("head", ends[1])])
    if family == "bimodal":
        return [block(f"moe{i}", 10.0) if i % 4 == 3 else block(f"block{i}") for i in range(n)]
    raise ValueError(family)


def profile(family: str, n: int, seed: int):
    rng = random.Random(f"{seed}-{family}-{n}")
    return {
        "format": "gpipe-profile/1",
        "model": f"{family}-{n}",
        "device": "synthetic",
        "microbatch_size": 1,
        "dtype": "fp32",
        "input_bytes": 16 * MIB,
        "source": f"bench/planner_families.py --seed {seed}: the planner's '{family}' benchmark family, "
                  f"{n} layers (synthetic; see the script's docstring)",
        "layers": family_layers(family, n, rng),
    }


def cluster(n: int):
    return {
        "format": "gpipe-cluster/1",
        "name": f"families-{n}",
        "devices": n,
        "device_memory_bytes": 80 * 1024 * MIB,
        "link": {"bandwidth_bytes_per_s": 25_000_000_000, "latency_ms": 0.01},
        "nodes": {"devices_per_node": 8,
                  "inter_node_link": {"bandwidth_bytes_per_s": 12_500_000_000, "latency_ms": 0.05}},
        "source": "bench/planner_families.py: devices of 80 GiB in nodes of 8 (synthetic)",
    }


def write(path: str, doc: dict):
    text = json.dumps(doc, indent=1) + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory to write the files into")
    parser.add_argument("--seed", type=int, default=16, help="seed of the random families (default 16)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for family in FAMILIES:
        for n in LAYERS:
            write(os.path.join(args.out, f"{family}-{n}.json"), profile(family, n, args.seed))
    for n in DEVICES:
        write(os.path.join(args.out, f"cluster-{n}.json"), cluster(n))


if __name__ == "__main__":
    main()
