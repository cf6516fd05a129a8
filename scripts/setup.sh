#!/usr/bin/env bash
# One command for a fresh machine: install what is missing (Debian packages and LibTorch), build,
# and run the main job on the built-in default, the whole loop: profile the tiny GPT's layers and
# the links between two CPU ranks, plan on those measurements, simulate the plan, then train the
# tiny GPT on it for real (two processes over Gloo) and write the run record.
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
echo "== gpipe-plan profile --model models/tiny-gpt.json --microbatch-size 4,8,16,32 =="
"$BUILD_DIR/gpipe-plan" profile --model models/tiny-gpt.json --microbatch-size 4,8,16,32 \
  -o "$BUILD_DIR/tiny-gpt-profile.json"
echo
echo "== gpipe-plan profile-links --ranks 2 =="
"$BUILD_DIR/gpipe-plan" profile-links --ranks 2 -o "$BUILD_DIR/cpu-2.json"
echo
echo "== gpipe-plan plan --profile $BUILD_DIR/tiny-gpt-profile.json --cluster $BUILD_DIR/cpu-2.json --global-batch 64 =="
"$BUILD_DIR/gpipe-plan" plan --profile "$BUILD_DIR/tiny-gpt-profile.json" --cluster "$BUILD_DIR/cpu-2.json" \
  --global-batch 64 -o "$BUILD_DIR/tiny-gpt-plan.json"
echo
echo "== gpipe-plan simulate $BUILD_DIR/tiny-gpt-plan.json =="
"$BUILD_DIR/gpipe-plan" simulate "$BUILD_DIR/tiny-gpt-plan.json" --svg "$BUILD_DIR/tiny-gpt-plan.svg" \
  --trace "$BUILD_DIR/tiny-gpt-plan.trace.json"
echo
echo "== gpipe-plan run $BUILD_DIR/tiny-gpt-plan.json --model models/tiny-gpt.json --steps $STEPS =="
"$BUILD_DIR/gpipe-plan" run "$BUILD_DIR/tiny-gpt-plan.json" --model models/tiny-gpt.json --steps "$STEPS" \
  --record "$BUILD_DIR/tiny-gpt-run.json" --svg "$BUILD_DIR/tiny-gpt-run.svg" --trace "$BUILD_DIR/tiny-gpt-run.trace.json"
