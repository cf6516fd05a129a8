#!/usr/bin/env bash
# One command for a fresh machine: install what is missing (Debian packages and LibTorch), build,
# and run the main job on the built-in default, the whole loop: profile the tiny GPT's layers (and
# what a step costs beyond them) and the links between two CPU ranks; plan under a per-device
# memory budget in which the model does not fit on one rank, so that the plan is a pipeline
# (K >= 2) that rematerializes where memory demands; simulate the plan; train the tiny GPT on it
# for real (two processes over Gloo); and compare the run with its prediction.
#   bash scripts/setup.sh
#   BUILD_DIR=out STEPS=50 bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
install_missing_packages
install_torch

BUILD_DIR=${BUILD_DIR:-build}
STEPS=${STEPS:-20}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPIPE_WITH_TORCH=ON \
  -DCMAKE_PREFIX_PATH="$(torch_cmake_prefix)" ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" --target gpipe-plan

echo
# --ranks-per-node 2: the main job's cluster is this machine's two ranks.
echo "== gpipe-plan profile --model models/tiny-gpt.json --microbatch-size 8,1,2,4,16,32 --ranks-per-node 2 =="
"$BUILD_DIR/gpipe-plan" profile --model models/tiny-gpt.json --microbatch-size 8,1,2,4,16,32 --ranks-per-node 2 \
  -o "$BUILD_DIR/tiny-gpt-profile.json"
echo
echo "== gpipe-plan profile-links --ranks 2 =="
"$BUILD_DIR/gpipe-plan" profile-links --ranks 2 -o "$BUILD_DIR/cpu-2.json"
echo
# The budget: 85% of the least memory any one-rank plan needs (every layer rematerialized, one
# sample per micro-batch), so that no plan with K = 1 fits and the planner must cut the model.
ONE_RANK_BYTES=$("$BUILD_DIR/gpipe-plan" plan --profile "$BUILD_DIR/tiny-gpt-profile.json" --cluster "$BUILD_DIR/cpu-2.json" \
  --global-batch 64 --stages 1 --replicas 1 --microbatches 64 --remat on --json -q |
  python3 -c 'import json, sys; print(int(json.load(sys.stdin)["prediction"]["ranks"][0]["peak_memory_bytes"]))')
BUDGET=$((ONE_RANK_BYTES * 85 / 100))
echo
echo "The tiny GPT needs at least $((ONE_RANK_BYTES / 1024)) KiB on one rank (K=1, every layer rematerialized,"
echo "micro-batches of one sample). The main job gives each device $((BUDGET / 1024)) KiB: the model does not fit"
echo "on one rank, so the plan must be a pipeline, as GPipe is for."
echo
echo "== gpipe-plan plan --profile $BUILD_DIR/tiny-gpt-profile.json --cluster $BUILD_DIR/cpu-2.json --global-batch 64 --memory $BUDGET =="
"$BUILD_DIR/gpipe-plan" plan --profile "$BUILD_DIR/tiny-gpt-profile.json" --cluster "$BUILD_DIR/cpu-2.json" \
  --global-batch 64 --memory "$BUDGET" -o "$BUILD_DIR/tiny-gpt-plan.json"
echo
echo "== gpipe-plan simulate $BUILD_DIR/tiny-gpt-plan.json =="
"$BUILD_DIR/gpipe-plan" simulate "$BUILD_DIR/tiny-gpt-plan.json" --svg "$BUILD_DIR/tiny-gpt-plan.svg" \
  --trace "$BUILD_DIR/tiny-gpt-plan.trace.json"
echo
echo "== gpipe-plan run $BUILD_DIR/tiny-gpt-plan.json --model models/tiny-gpt.json --steps $STEPS =="
"$BUILD_DIR/gpipe-plan" run "$BUILD_DIR/tiny-gpt-plan.json" --model models/tiny-gpt.json --steps "$STEPS" \
  --record "$BUILD_DIR/tiny-gpt-run.json" --svg "$BUILD_DIR/tiny-gpt-run.svg" --trace "$BUILD_DIR/tiny-gpt-run.trace.json"
echo
echo "== gpipe-plan compare $BUILD_DIR/tiny-gpt-plan.json $BUILD_DIR/tiny-gpt-run.json =="
"$BUILD_DIR/gpipe-plan" compare "$BUILD_DIR/tiny-gpt-plan.json" "$BUILD_DIR/tiny-gpt-run.json"
