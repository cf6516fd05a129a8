#!/usr/bin/env bash
# On a machine with a GPU: the first-run prediction on CUDA (issue 13, point 8). Builds against
# this machine's torch, then for the tiny GPT and a larger transformer (models/gpt-768-gpu.json:
# 8 blocks of width 768, sequence 512, about 190 MiB of activations per block at micro-batch 8)
# profiles the layers and step costs on cuda, plans K=1 pinned, runs it over NCCL and compares,
# and prints one table. Never part of CI; nothing here runs without a GPU.
#   bash scripts/gpu-first-run.sh [OUT_DIR]
# Header-only dependencies (nlohmann/json, CLI11) come from Debian's packages where apt works, or
# from CMAKE_PREFIX_PATH / CPATH set by the caller (carry them in an ignored folder).
# Two ranks on one GPU over NCCL are not possible (NCCL refuses two ranks on one device); issue
# 14's NCCL-faithful wire is what will check K=2 there.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/gpipe-gpu}
BUILD_DIR=${BUILD_DIR:-build-gpu}
STEPS=${STEPS:-10}
mkdir -p "$OUT"
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no usable GPU: this script is for the lent GPU machine")'
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPIPE_WITH_TORCH=ON -DGPIPE_BUILD_TESTS=OFF \
  -DGPIPE_BUILD_BENCHMARKS=OFF -DCMAKE_PREFIX_PATH="$TORCH_PREFIX;${CMAKE_PREFIX_PATH:-}" >"$OUT/cmake.log"
cmake --build "$BUILD_DIR" --target gpipe-plan -j "$(nproc)" >"$OUT/build.log"
BIN="$BUILD_DIR/gpipe-plan"
"$BIN" profile-links --ranks 1 --device cuda -o "$OUT/cluster.json" >"$OUT/links.txt" 2>&1 || \
  python3 - "$OUT/cluster.json" <<'EOF'
import json, sys, torch
# One GPU: no link to measure; its memory is the device's.
json.dump({"format": "gpipe-cluster/1", "name": "one-gpu", "devices": 1,
           "device_memory_bytes": torch.cuda.get_device_properties(0).total_memory,
           "link": {"bandwidth_bytes_per_s": 1e11, "latency_ms": 0.01}}, open(sys.argv[1], "w"))
EOF
printf '%-14s %4s %12s %12s %9s %14s %14s\n' model M predicted_ms measured_ms error peak_predicted peak_measured
for spec in "tiny-gpt:64:4" "gpt-768-gpu:32:4"; do
  IFS=: read -r model batch m <<<"$spec"
  "$BIN" profile --model "models/$model.json" --device cuda --microbatch-size $((batch / m)) --repeats 20 \
    -o "$OUT/$model-profile.json" >"$OUT/$model-profile.txt" 2>&1
  "$BIN" plan --profile "$OUT/$model-profile.json" --cluster "$OUT/cluster.json" --global-batch "$batch" \
    --stages 1 --replicas 1 --microbatches "$m" -q -o "$OUT/$model-plan.json" >"$OUT/$model-plan.txt"
  "$BIN" run "$OUT/$model-plan.json" --model "models/$model.json" --device cuda --steps "$STEPS" \
    --record "$OUT/$model-run.json" >"$OUT/$model-run.txt" 2>&1
  "$BIN" compare "$OUT/$model-plan.json" "$OUT/$model-run.json" --json >"$OUT/$model-compare.json"
  python3 - "$OUT/$model-compare.json" "$model" "$m" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
ranks = c.get("ranks", [{}])
pp = max((r.get("predicted_peak_memory_bytes", 0) for r in ranks), default=0) / 2**20
pm = max((r.get("measured_peak_memory_bytes", 0) for r in ranks), default=0) / 2**20
print(f"{sys.argv[2]:14s} {sys.argv[3]:>4s} {c['predicted_step_ms']:12.2f} {c['measured_step_ms']:12.2f} "
      f"{100 * c['step_error']:+8.1f}% {pp:11.1f} MiB {pm:11.1f} MiB")
EOF
done
