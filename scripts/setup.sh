#!/usr/bin/env bash
# One command for a fresh machine: install what is missing, build, and run the main job on the
# built-in default (a shipped plan for the tiny GPT profile on two CPU ranks).
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
echo "== gpipe-plan simulate profiles/plans/tiny-gpt-gpipe.json =="
"$BUILD_DIR/gpipe-plan" simulate profiles/plans/tiny-gpt-gpipe.json --svg "$BUILD_DIR/tiny-gpt-gpipe.svg"
