#!/usr/bin/env bash
# One command that runs every test: installs what is missing, builds everything with warnings as
# errors, and runs the whole CTest suite (unit tests, example plans, profile regeneration check,
# install check). .ci/run calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
install_missing_packages

BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPIPE_WERROR=ON ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)"
