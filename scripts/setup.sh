#!/usr/bin/env bash
# One command for a fresh machine: install what is missing, build, and run the main job on the
# built-in default: plan the tiny GPT profile on two CPU ranks, then simulate the plan it wrote.
#   bash scripts/setup.sh            # build into build/ and simulate the default plan
#   BUILD_DIR=out bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
install_missing_packages

BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" --target gpipe-plan

echo
echo "== gpipe-plan plan --profile profiles/tiny-gpt-cpu.json --cluster profiles/clusters/cpu-2.json --global-batch 64 =="
"$BUILD_DIR/gpipe-plan" plan --profile profiles/tiny-gpt-cpu.json --cluster profiles/clusters/cpu-2.json \
  --global-batch 64 -o "$BUILD_DIR/tiny-gpt-plan.json"
echo
echo "== gpipe-plan simulate $BUILD_DIR/tiny-gpt-plan.json =="
"$BUILD_DIR/gpipe-plan" simulate "$BUILD_DIR/tiny-gpt-plan.json" --svg "$BUILD_DIR/tiny-gpt-plan.svg" \
  --trace "$BUILD_DIR/tiny-gpt-plan.trace.json"
