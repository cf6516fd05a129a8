#!/usr/bin/env bash
# Predicted against measured on the first run, with no calibration: profile (layers and step
# costs), profile-links (links and the all-reduce), then for each configuration a pinned plan, a
# run and compare. Prints one line per configuration and the median and largest |step-time
# error|. A benchmark, not a test: run it on a quiet machine.
#   bash bench/first_run.sh [MODEL] [OUT_DIR]
#   LINK_RANKS=2 CONFIGS="2:1:6:1f1b:off 2:1:6:zb-h1:off" STEPS=20 bash bench/first_run.sh models/small-cnn.json /tmp/cnn
# A configuration is K:D:M:schedule:remat; the default set covers K and D in {1,2}, four schedules
# and remat on and off at M = 4 and 6.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/gpipe-plan}
MODEL=${1:-models/tiny-gpt.json}
OUT=${2:-/tmp/gpipe-first-run}
STEPS=${STEPS:-12}
BATCH=${BATCH:-48}
CONFIGS=${CONFIGS:-"1:1:4:gpipe:off 1:2:4:gpipe:off 2:1:4:gpipe:off 2:1:6:1f1b:off 2:1:6:1f1b:on 2:1:6:zb-h1:off
  2:1:6:zb-h1:on 2:1:6:interleaved-1f1b:off 2:1:4:gpipe:on 2:2:4:1f1b:off"}
mkdir -p "$OUT"
"$BIN" profile --model "$MODEL" --microbatch-size 4,8,12,24 --repeats 20 -o "$OUT/profile.json" >"$OUT/profile.txt" 2>/dev/null
"$BIN" profile-links --ranks "${LINK_RANKS:-4}" -o "$OUT/cluster.json" >"$OUT/links.txt"
errors=()
printf '%-28s %12s %12s %9s\n' configuration predicted_ms measured_ms error
for config in $CONFIGS; do
  IFS=: read -r K D M S R <<<"$config"
  name="k$K-d$D-m$M-$S-remat-$R"
  extra=()
  [ "$S" = interleaved-1f1b ] && extra=(--chunks 2)
  if ! "$BIN" plan --profile "$OUT/profile.json" --cluster "$OUT/cluster.json" --global-batch "$BATCH" \
      --devices $((K * D)) --stages "$K" --replicas "$D" --microbatches "$M" --schedule "$S" --remat "$R" \
      "${extra[@]}" -q -o "$OUT/$name-plan.json" >/dev/null 2>"$OUT/$name-plan.err"; then
    printf '%-28s %s\n' "$name" "no plan: $(head -c 120 "$OUT/$name-plan.err")"
    continue
  fi
  "$BIN" run "$OUT/$name-plan.json" --model "$MODEL" --steps "$STEPS" --record "$OUT/$name-run.json" >/dev/null 2>&1
  "$BIN" compare "$OUT/$name-plan.json" "$OUT/$name-run.json" --json >"$OUT/$name-compare.json"
  read -r predicted measured error < <(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))
print(c["predicted_step_ms"], c["measured_step_ms"], c["step_error"])' "$OUT/$name-compare.json")
  printf '%-28s %12.2f %12.2f %+8.1f%%\n' "$name" "$predicted" "$measured" "$(python3 -c "print(100*$error)")"
  errors+=("$error")
done
python3 -c '
import statistics, sys
e = [abs(float(x)) for x in sys.argv[1:]]
if e: print(f"|step-time error|: median {100*statistics.median(e):.1f}%, largest {100*max(e):.1f}% over {len(e)} configurations")
' "${errors[@]}"
