#!/usr/bin/env bash
# Fuzzes every file loader (profile, cluster, plan, model, run record) and the command-line parser
# with libFuzzer, under AddressSanitizer and UndefinedBehaviorSanitizer, for a fixed time each.
#
#   bash scripts/fuzz.sh                 # 60 s per target, all six targets
#   bash scripts/fuzz.sh 5               # 5 s per target (a smoke run)
#   bash scripts/fuzz.sh 300 plan model  # some targets only
#
# Targets: profile cluster plan model run_record cli_flags. Each starts from the shipped files
# (profiles/, profiles/clusters/, profiles/plans/, models/), fuzz/seeds/ and the regression inputs
# of tests/fuzz_regressions/, plus what earlier runs found (build-fuzz/corpus/, kept between runs).
# A loader must accept an input, and then write a file that loads back the same, or reject it with
# one line naming the file (fuzz/load_input.h); a crash, a hang (10 s), more than 2 GiB or a
# sanitizer report also fails. What fails is saved in build-fuzz/artifacts/TARGET/; the script
# then exits 1 and says how to replay it. Keep such an input, once fixed, in
# tests/fuzz_regressions/FORMAT/: core_tests replays every file there (FuzzRegressions).
# The table at the end gives each target's executions, seconds and failures (docs/hardening.md).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-${FUZZ_SECONDS:-60}}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(profile cluster plan model run_record cli_flags)

source scripts/deps.sh
install_fuzz_packages
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGPIPE_SANITIZE=address,undefined -DGPIPE_BUILD_FUZZERS=ON -DGPIPE_BUILD_TESTS=OFF \
  -DGPIPE_BUILD_BENCHMARKS=OFF -DGPIPE_WERROR=ON >/dev/null
cmake --build build-fuzz --target "${targets[@]/#/fuzz_}"

# The seed files of a target: the shipped files of its format, fuzz/seeds/ and the regression inputs.
seeds_of() {
  case "$1" in
    profile) ls profiles/*.json tests/fuzz_regressions/profile/* ;;
    cluster) ls profiles/clusters/*.json tests/fuzz_regressions/cluster/* ;;
    plan) ls profiles/plans/*.json fuzz/seeds/plan/* tests/fuzz_regressions/plan/* ;;
    model) ls models/*.json tests/fuzz_regressions/model/* ;;
    run_record) ls fuzz/seeds/run-record/* tests/fuzz_regressions/run-record/* ;;
    cli_flags) ls fuzz/seeds/cli/* ;;
  esac 2>/dev/null || true
}

failed=0
summary=""
for target in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$target
  artifacts=build-fuzz/artifacts/$target
  log=build-fuzz/fuzz-$target.log
  mkdir -p "$corpus" "$artifacts"
  dict=fuzz/formats.dict
  [ "$target" = cli_flags ] && dict=fuzz/cli.dict
  seeds=$(seeds_of "$target" | paste -sd, -)
  echo "fuzzing $target for $seconds s ($(seeds_of "$target" | wc -l) seed files)"
  start=$(date +%s%N)
  rc=0
  # Stdin from /dev/null: nothing a loader opens may wait on a terminal.
  "build-fuzz/fuzz/fuzz_$target" "$corpus" -seed_inputs="$seeds" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -dict="$dict" -artifact_prefix="$artifacts/" -print_final_stats=1 \
    </dev/null >"$log" 2>&1 || rc=$?
  elapsed=$(awk -v ns=$(( $(date +%s%N) - start )) 'BEGIN { printf "%.1f", ns / 1e9 }')
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ "$rc" -ne 0 ]; then
    failed=1
    echo "  FAILED (exit $rc): $(grep -m1 -E 'ERROR|misbehaved|runtime error|what\(\)' "$log" || true)"
    echo "  input: $(grep -o "Test unit written to .*" "$log" | tail -1 | cut -d' ' -f5-)"
    echo "  replay: build-fuzz/fuzz/fuzz_$target FILE; full log: $log"
  fi
  summary+=$(printf '%-11s %12s %8s %10s %6s\n' "$target" "${runs:-?}" "$elapsed" \
    "$(find "$corpus" -type f | wc -l)" "$([ "$rc" -ne 0 ] && echo 1 || echo 0)")$'\n'
done

printf '\n%-11s %12s %8s %10s %6s\n' target executions seconds corpus failed
printf '%s' "$summary"
exit $failed
