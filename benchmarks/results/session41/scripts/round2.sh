#!/usr/bin/env bash
# Session 41: session 40's round2.sh, with the whole GPU suite run on x40 (main + the window and
# sinks kernel patches, with their tests applied) instead of m40: it covers main's host checks and
# the library that lands if round1 passes. p40 = main + session39's precheck patch.
#   1. every GPU test on x40; 2. the precheck patch's tests (p40);
#   3. session 38's backward chunk A/B; 4. the eager decode step, re-measured.
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m40 p40 x40
M=$(L m40)
P=$(L p40)
X=$(L x40)
P1=benchmarks/results/session40/patches/window-kernels-prepared.patch
P2=benchmarks/results/session40/patches/sinks-kernels-prepared.patch
INC=(--include "python/*" --include "tests/*" --include "scripts/*")
git apply "${INC[@]}" "$P1" && git apply "${INC[@]}" "$P2"
chk gpu_all 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging tests/python
git apply -R "${INC[@]}" "$P2" && git apply -R "${INC[@]}" "$P1"
PRE=benchmarks/results/session39/patches/decode-precheck-large-keys-prepared.patch
git apply --include 'python/*' --include 'tests/*' "$PRE"
chk precheck_tests 120 env FOLD_ATTENTION_LIBRARY=$P python3 -m pytest -q -p no:logging \
  tests/python/test_decode_step_checks.py tests/python/test_decode_api.py
git apply -R --include 'python/*' --include 'tests/*' "$PRE"
SHP="8,2048,16,16,128;16,1024,32,8,128;8,2048,32,32,64;4,4096,32,8,128;2,8192,32,8,128"
step chunk_a 100 env FOLD_ATTENTION_LIBRARY=$M FOLD_TIME_SHAPES="$SHP" python3 scripts/time_backward_variants.py \
  default FOLD_BWD_HB_CHUNK=4 FOLD_BWD_HB_CHUNK=2
step chunk_b 100 env FOLD_ATTENTION_LIBRARY=$M FOLD_TIME_SHAPES="$SHP" python3 scripts/time_backward_variants.py \
  FOLD_BWD_HB_CHUNK=2 FOLD_BWD_HB_CHUNK=4 default
step eager_step 60 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/decode_eager_step.py \
  --shapes "1,8192,9,3,64;1,4096,64,8,128" --steps 100 --rounds 5
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/gpu_all.log "$LOGS"/precheck_tests.log | tail -4
for f in "$LOGS"/chunk_*.log "$LOGS"/eager_step.log; do echo "-- $(basename $f)"; grep -v "^\s*$" $f | tail -14; done
