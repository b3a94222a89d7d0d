#!/usr/bin/env bash
# Session 36, round 6: the review's test fix (tests/python/test_gpu_decode.py: which v8 steps run
# the dense ring follows the planner and FOLD_DECODE_SCREEN / _RING / _V8_RING, so the screened v8
# split is checked bit for bit again; a D 64 G 12 v8 dense case) on main's library m41 (the fix
# changes tests and comments only).
#   OUT=$OUT bash benchmarks/results/session36/scripts/round6.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m41
X=$(L m41)
chk decode_tests 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py
echo "== round 6 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -n 12
grep -hE "FAILED|Error" "$LOGS"/decode_tests.log | head -20
