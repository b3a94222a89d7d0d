#!/usr/bin/env bash
# Session 24, round 2 (library `d2`: the forward's D 64 default on three consumer warpgroups with
# 192 x 128 tiles, v1.2-2wg for the previous form; the decode front's unrolled form at small grids
# on by default, FOLD_DECODE_FRONT_UNROLL=0 for the loop): training and decode GPU tests, memcheck /
# racecheck of the whole smoke and synccheck of its training part (2 forward CTAs), the forward
# protocol (published). (Cut to fit the session's last device time: the front's A/B is round 1's.)
# Everything lands in $OUT/r2.tgz (the device returns a limited number of files).
#   OUT=$OUT bash benchmarks/results/session24/scripts/round2_defaults.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh d2
X=$(L d2)
R=$(mktemp -d)/r2 && mkdir -p "$R"
pack() { cp "$OUT/summary.txt" "$R/" 2>/dev/null; tar czf "$OUT/r2.tgz" -C "$(dirname "$R")" r2 -C "$(dirname "$LOGS")" logs; }
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
chk decode_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m "gpu or not gpu" -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_decode_step_checks.py
pack
step fwd_protocol 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m benchmarks.forward --shapes issue --masks both \
  --flex none --rounds 6 --budget-s 90 --out "$R/fwd" --no-repo-results
pack
for tool in memcheck racecheck; do
  chk ${tool} 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_FWD_CTAS=2 compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py
  pack
done
chk synccheck 100 env FOLD_ATTENTION_LIBRARY=$X FOLD_FWD_CTAS=2 compute-sanitizer --tool synccheck \
  --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
echo "== round 2 checks failed: $fail" >> "$OUT/summary.txt"
pack
rm -f "$OUT/logs.tgz"
tail -n 60 "$OUT/summary.txt"
