#!/usr/bin/env bash
# One command that runs every test: installs what is missing, builds with warnings as errors, and
# runs the whole CTest suite in three builds:
#   build-core/  without LibTorch: the planner, simulator and CLI (unit tests, example plans,
#                profile regeneration check, install check), proving that planning needs no torch;
#                then `pip install .` into a fresh virtual environment and the Python API's tests;
#   build-asan/  the same without LibTorch under AddressSanitizer and UndefinedBehaviorSanitizer
#                (-O1, asserts on; any report fails its test), including the table of bad inputs
#                and the replay of the inputs the fuzzers once crashed on (docs/hardening.md);
#   build/       with LibTorch: the executor (gradient equivalence of every schedule against one
#                process, real multi-process runs over Gloo, two nodes on loopback, checkpoints,
#                faults), the tests labelled "executor".
# .ci/run calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
install_missing_packages
install_torch
install_test_models

cmake -S . -B build-core -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPIPE_WERROR=ON -DGPIPE_WITH_TORCH=OFF ${CMAKE_ARGS:-}
cmake --build build-core
ctest --test-dir build-core --output-on-failure -j "$(nproc)"
# pip install . into a fresh virtual environment; the Python API against the installed package.
bash tests/python/install_test.sh

# -O1 with line tables: half the compile time of -O2 -g, the optimization ASan recommends.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DGPIPE_WERROR=ON -DGPIPE_WITH_TORCH=OFF -DGPIPE_SANITIZE=address,undefined -DGPIPE_BUILD_BENCHMARKS=OFF ${CMAKE_ARGS:-}
cmake --build build-asan
# Without the Python regeneration check and the docs' commands (the core build ran them);
# halt_on_error: the first report fails.
ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -E "profiles_regenerate_check|docs_commands"
# Fuzzing is not part of a normal run (the inputs it once crashed on are: core_tests replays them);
# GPIPE_FUZZ_SECONDS=5 adds a smoke run of every fuzz target (scripts/fuzz.sh).
if [ -n "${GPIPE_FUZZ_SECONDS:-}" ]; then bash scripts/fuzz.sh "$GPIPE_FUZZ_SECONDS"; fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPIPE_WERROR=ON -DGPIPE_WITH_TORCH=ON \
  -DCMAKE_PREFIX_PATH="$(torch_cmake_prefix)" -DGPIPE_BUILD_BENCHMARKS=OFF ${CMAKE_ARGS:-}
cmake --build build --target gpipe-plan executor_tests
ctest --test-dir build --output-on-failure -L executor -j "$(nproc)"
