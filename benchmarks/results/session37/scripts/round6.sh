#!/usr/bin/env bash
# Session 37, round 6: library s37f (main 99aad03: the review's remarks; v8 split2's plane-B
# address by integer arithmetic changed the D 128 v8 instances' SASS by a few integer
# instructions). Decode GPU tests (the v8 split2 test now with the SA forms); racecheck and memcheck
# of the smoke (its v8 D 128 G 4 cache keeps the screen: split2's changed v8 instance).
#   OUT=$OUT bash benchmarks/results/session37/scripts/round6.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s37f
X=$(L s37f)
chk decode_tests 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py \
  tests/python/test_decode_accuracy.py
for tool in racecheck memcheck; do
  chk $tool 170 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
echo "== round 6 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|FAILED|SUMMARY" "$LOGS"/*.log | head -20
