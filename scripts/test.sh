#!/usr/bin/env bash
# One command that runs every test: installs what is missing, builds with warnings as errors, and
# runs the whole CTest suite in two builds:
#   build-core/  without LibTorch: the planner, simulator and CLI (unit tests, example plans,
#                profile regeneration check, install check), proving that planning needs no torch;
#   build/       with LibTorch: the executor (gradient equivalence of every schedule against one
#                process, real multi-process runs over Gloo, two nodes on loopback, checkpoints,
#                faults), the tests labelled "executor".
# .ci/run calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
install_missing_packages
install_torch

cmake -S . -B build-core -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPIPE_WERROR=ON -DGPIPE_WITH_TORCH=OFF ${CMAKE_ARGS:-}
cmake --build build-core
ctest --test-dir build-core --output-on-failure -j "$(nproc)"

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPIPE_WERROR=ON -DGPIPE_WITH_TORCH=ON \
  -DCMAKE_PREFIX_PATH="$(torch_cmake_prefix)" -DGPIPE_BUILD_BENCHMARKS=OFF ${CMAKE_ARGS:-}
cmake --build build --target gpipe-plan executor_tests
ctest --test-dir build --output-on-failure -L executor -j "$(nproc)"
