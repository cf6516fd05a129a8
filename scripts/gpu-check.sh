#!/usr/bin/env bash
# The GPU checks in one go, for the lent GPU machine (one H200, 16 cores; issue 14 point 7). Builds
# against that machine's torch (Release, Ninja, gpipe-plan and executor_tests), runs the executor
# tests that accept a CUDA device, probes the links when there are two GPUs or more, then for the
# tiny GPT and a transformer with hundreds of MB of activations (models/gpt-768-gpu.json) profiles
# on cuda (the transformer in fp32 and in bf16 mixed precision, `profile --precision bf16`), plans K=1 and K=2, runs K=1 over real NCCL (one rank) and K=2 with both stages on one
# GPU over the NCCL-faithful in-process wire, and compares. Prints ONE table at the end, one row per
# check; exits 1 if any check failed (the table is printed either way), 2 without a GPU.
# Meant to finish in under 8 minutes: every stage runs under `timeout`, within one overall deadline.
#   bash scripts/gpu-check.sh [OUT_DIR]          on the GPU machine
#   bash scripts/gpu-check.sh --pack-deps DIR    here: copy the build's headers and GoogleTest into DIR
# Header-only dependencies (nlohmann/json, CLI11), Gloo's headers (c10d includes them, the torch
# wheel lacks them) and GoogleTest come from the machine's packages, or from CMAKE_PREFIX_PATH /
# CPATH set by the caller, or from .deps/gpu (ignored by git: pack it with --pack-deps and carry it),
# as scripts/gpu-first-run.sh does. Never part of CI; nothing here runs without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

# The executor tests that accept a CUDA device (they read GPIPE_TEST_DEVICE=cuda): a gtest filter.
# A filter that matches no test is a failed check, not a pass. The bf16/fp16 equivalence cases are
# left out: their one-process reference computes on the CPU, whose 16-bit products round otherwise
# than cuBLAS's; bf16 on the GPU is checked by the profile/plan/run/compare rows below.
TEST_FILTER=${TEST_FILTER:-'*Nccl*:*K1*:-*MixedPrecision*'}
OUT=${1:-/tmp/gpipe-gpu-check}
BUILD_DIR=${BUILD_DIR:-build-gpu}
STEPS=${STEPS:-6}                   # training steps per run (compare drops the first)
DEADLINE_S=${DEADLINE_S:-470}       # the whole script, build included
DEPS=${DEPS:-.deps/gpu}             # a --pack-deps folder, used when present
# model:global batch:micro-batches:precision (micro-batch size = batch / micro-batches), as
# gpu-first-run.sh; bf16 runs under autocast with fp32 master weights (docs/executor.md).
SPECS=(gpt-768-gpu:32:4:fp32 gpt-768-gpu:32:4:bf16 tiny-gpt:64:4:fp32)  # most telling first, should time run short

if [ "${1:-}" = "--pack-deps" ]; then
  dir=${2:?"usage: $0 --pack-deps DIR (e.g. .deps/gpu, then carry it)"}
  lib=/usr/lib/x86_64-linux-gnu
  mkdir -p "$dir/include" "$dir/lib/x86_64-linux-gnu/cmake" "$dir/share/cmake"
  for h in nlohmann CLI gloo gtest gmock; do cp -rL "/usr/include/$h" "$dir/include/"; done
  cp -L "$lib"/libgtest.a "$lib"/libgtest_main.a "$lib"/libgmock.a "$lib"/libgmock_main.a "$dir/lib/x86_64-linux-gnu/"
  cp -rL "$lib/cmake/GTest" "$dir/lib/x86_64-linux-gnu/cmake/"
  cp -rL /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$dir/share/cmake/"
  du -sh "$dir"
  exit 0
fi

START=$SECONDS
ROWS=()      # what|result|predicted ms|measured ms|error|peak predicted|peak measured|samples/s|note
FAILED=0
row() {
  ROWS+=("$1|$2|${3:--}|${4:--}|${5:--}|${6:--}|${7:--}|${8:--}|${9:-}")
  [ "$2" = FAIL ] && FAILED=1
  return 0
}
print_table() {
  echo
  printf '%-34s %-6s %10s %10s %8s %11s %11s %10s  %s\n' check result pred_ms meas_ms error peak_pred peak_meas samples/s note
  local r
  for r in "${ROWS[@]}"; do
    IFS='|' read -r what result pred meas err pp pm sps note <<<"$r"
    printf '%-34s %-6s %10s %10s %8s %11s %11s %10s  %s\n' "$what" "$result" "$pred" "$meas" "$err" "$pp" "$pm" "$sps" "$note"
  done
  echo "(files under $OUT; $((SECONDS - START)) s)"
}
# Seconds for the next stage: its own limit, cut to what the overall deadline leaves.
budget() {
  local left=$((DEADLINE_S - (SECONDS - START) - 5))
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
# Runs a stage under timeout; its output goes to $OUT/$1.txt. Returns the command's status.
stage() {
  local name=$1 limit
  limit=$(budget "$2")
  shift 2
  if [ "$limit" -le 0 ]; then
    echo "out of time before $name" >"$OUT/$name.txt"
    return 124
  fi
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.txt" 2>&1
}
# The last line of a stage's log, for the table's note.
last_line() { tail -n 1 "$OUT/$1.txt" 2>/dev/null | tr '|' '/' | cut -c1-80; }
finish() {
  print_table
  exit "$FAILED"
}

mkdir -p "$OUT"
if ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>"$OUT/gpu.txt"; then
  echo "gpu-check: no usable GPU here (python3's torch sees no CUDA device; see $OUT/gpu.txt):" \
       "this script is for the lent GPU machine" >&2
  row "GPU present" FAIL "" "" "" "" "" "" "torch.cuda.is_available() is false"
  print_table
  exit 2
fi
GPUS=$(python3 -c 'import torch; print(torch.cuda.device_count())')
GPU_NAME=$(python3 -c 'import torch; print(torch.cuda.get_device_name(0))')
GPU_BYTES=$(python3 -c 'import torch; print(torch.cuda.get_device_properties(0).total_memory)')
row "GPU present" ok "" "" "" "" "" "" "$GPUS x $GPU_NAME, $((GPU_BYTES >> 30)) GiB"

# Build.
PREFIX="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)');${CMAKE_PREFIX_PATH:-}"
if [ -d "$DEPS" ]; then
  deps_dir=$(realpath "$DEPS")
  PREFIX="$PREFIX;$deps_dir"
  export CPATH="$deps_dir/include${CPATH:+:$CPATH}"
fi
for tool in cmake ninja; do
  command -v "$tool" >/dev/null || { row "build" FAIL "" "" "" "" "" "" "$tool is not installed"; finish; }
done
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
configure() {
  stage "cmake-tests-$1" 120 cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPIPE_WITH_TORCH=ON \
    -DGPIPE_BUILD_TESTS="$1" -DGPIPE_BUILD_BENCHMARKS=OFF -DCMAKE_PREFIX_PATH="$PREFIX" "${LAUNCHER[@]}"
}
TARGETS=(gpipe-plan executor_tests)
if ! configure ON; then
  # Most likely no GoogleTest: build the CLI alone so that the runs are still checked.
  TARGETS=(gpipe-plan)
  row "executor tests (cuda)" FAIL "" "" "" "" "" "" "not built: cmake with tests failed ($(last_line cmake-tests-ON))"
  configure OFF || { row "build" FAIL "" "" "" "" "" "" "cmake: $(last_line cmake-tests-OFF)"; finish; }
fi
built_at=$SECONDS
if ! stage build 330 cmake --build "$BUILD_DIR" --target "${TARGETS[@]}" -j "$(nproc)"; then
  row "build (${TARGETS[*]})" FAIL "" "" "" "" "" "" "$(last_line build)"
  finish
fi
row "build (${TARGETS[*]})" ok "" "" "" "" "" "" "$((SECONDS - built_at)) s, -j $(nproc)"
BIN="$BUILD_DIR/gpipe-plan"

# Executor tests on cuda.
if [ -x "$BUILD_DIR/executor_tests" ] && [[ " ${TARGETS[*]} " == *" executor_tests "* ]]; then
  stage executor-tests 90 env GPIPE_TEST_DEVICE=cuda "$BUILD_DIR/executor_tests" --gtest_filter="$TEST_FILTER"
  status=$?
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$OUT/executor-tests.txt" | tail -n 1)
  failed=$(grep -c '^\[  FAILED  \] [A-Za-z]' "$OUT/executor-tests.txt")
  if [ "$status" -eq 0 ] && [ "${passed:-0}" -gt 0 ]; then
    row "executor tests (cuda)" ok "" "" "" "" "" "" "$passed passed, filter $TEST_FILTER"
  elif [ "$status" -eq 0 ]; then
    row "executor tests (cuda)" FAIL "" "" "" "" "" "" "filter $TEST_FILTER matched no test"
  else
    row "executor tests (cuda)" FAIL "" "" "" "" "" "" "exit $status: ${passed:-0} passed, $failed failed ($OUT/executor-tests.txt)"
  fi
fi

# Links: NCCL needs one GPU per rank, so only with two GPUs or more.
if [ "$GPUS" -ge 2 ]; then
  if stage profile-links 60 "$BIN" profile-links --ranks 2 --device cuda --repeats 10 --timeout 30 -o "$OUT/links.json"; then
    if figures=$(python3 - "$OUT/links.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
links = c.get("links", [])
kinds = sorted({l.get("kind", "none") for l in links})
l = links[0] if links else {}
print(f"{l.get('from')}->{l.get('to')}: {l.get('latency_ms', 0) * 1e3:.1f} us, "
      f"{l.get('bandwidth_bytes_per_s', 0) / 1e9:.1f} GB/s; kinds {','.join(kinds)}")
sys.exit(0 if links and "none" not in kinds else 1)
EOF
); then
      row "profile-links (cuda, 2 ranks)" ok "" "" "" "" "" "" "$figures"
    else row "profile-links (cuda, 2 ranks)" FAIL "" "" "" "" "" "" "a link without a kind: $figures"; fi
  else
    row "profile-links (cuda, 2 ranks)" FAIL "" "" "" "" "" "" "$(last_line profile-links)"
  fi
else
  row "profile-links (cuda)" skip "" "" "" "" "" "" "1 GPU: NCCL refuses two ranks on one device"
fi

# The cluster the plans are made for: this GPU (two stages share it for K=2; their link is a copy
# on the device).
python3 - "$OUT/cluster.json" "$GPU_BYTES" <<'EOF'
import json, sys
json.dump({"format": "gpipe-cluster/1", "name": "one-gpu", "devices": 1, "device_memory_bytes": int(sys.argv[2]),
           "link": {"bandwidth_bytes_per_s": 1e11, "latency_ms": 0.01}}, open(sys.argv[1], "w"))
EOF

# Profile, plan, run, compare.
for spec in "${SPECS[@]}"; do
  IFS=: read -r model batch m precision <<<"$spec"
  name="$model-$precision"
  if ! stage "$name-profile" 75 "$BIN" profile --model "models/$model.json" --device cuda --precision "$precision" \
         --microbatch-size $((batch / m)) --warmup 2 --repeats 10 -o "$OUT/$name-profile.json"; then
    row "$model $precision profile (cuda)" FAIL "" "" "" "" "" "" "$(last_line "$name-profile")"
    continue
  fi
  row "$model $precision profile (cuda)" ok "" "" "" "" "" "" "micro-batch $((batch / m))"
  for k in 1 2; do
    what="$model $precision K=$k M=$m"
    if [ "$k" -eq 1 ]; then
      how=(--device cuda)
      what="$what nccl"
    else
      how=(--in-process --wire nccl --device cuda)
      what="$what in-proc nccl"
    fi
    if ! stage "$name-k$k-plan" 30 "$BIN" plan --profile "$OUT/$name-profile.json" --cluster "$OUT/cluster.json" \
           --devices "$k" --global-batch "$batch" --stages "$k" --replicas 1 --microbatches "$m" -q \
           -o "$OUT/$name-k$k-plan.json"; then
      row "$what" FAIL "" "" "" "" "" "" "plan: $(last_line "$name-k$k-plan")"
      continue
    fi
    if ! stage "$name-k$k-run" 60 "$BIN" run "$OUT/$name-k$k-plan.json" --model "models/$model.json" "${how[@]}" \
           --steps "$STEPS" --timeout 45 --record "$OUT/$name-k$k-run.json"; then
      row "$what" FAIL "" "" "" "" "" "" "run: $(last_line "$name-k$k-run")"
      continue
    fi
    # The JSON alone on stdout; what compare says on stderr goes to the .txt.
    if ! timeout "$(budget 20)" "$BIN" compare "$OUT/$name-k$k-plan.json" "$OUT/$name-k$k-run.json" --json \
           >"$OUT/$name-k$k-compare.json" 2>"$OUT/$name-k$k-compare.txt"; then
      row "$what" FAIL "" "" "" "" "" "" "compare: $(last_line "$name-k$k-compare")"
      continue
    fi
    if figures=$(python3 - "$OUT/$name-k$k-compare.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
ranks = c.get("ranks", [{}])
pp = max((r.get("predicted_peak_memory_bytes", 0) for r in ranks), default=0) / 2**20
pm = max((r.get("measured_peak_memory_bytes", 0) for r in ranks), default=0) / 2**20
print(f"{c['predicted_step_ms']:.2f}|{c['measured_step_ms']:.2f}|{100 * c['step_error']:+.1f}%|"
      f"{pp:.0f} MiB|{pm:.0f} MiB|{c['measured_throughput_samples_per_s']:.0f}")
EOF
); then
      IFS='|' read -r pred meas err pp pm sps <<<"$figures"
      row "$what" ok "$pred" "$meas" "$err" "$pp" "$pm" "$sps" "$STEPS steps"
    else
      row "$what" FAIL "" "" "" "" "" "" "unreadable compare JSON ($OUT/$name-k$k-compare.json)"
    fi
  done
done
finish
