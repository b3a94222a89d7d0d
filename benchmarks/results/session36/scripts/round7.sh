#!/usr/bin/env bash
# Session 36, round 7: the overlap bit test with v8 caches (the review's coverage gap: the dense
# ring reads v8 planes before its wait; an append that grows the V exponent re-quantises them), on
# main's library m41 (tests only changed).
#   OUT=$OUT bash benchmarks/results/session36/scripts/round7.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m41
X=$(L m41)
chk overlap_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "overlap_same_bits"
echo "== round 7 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -n 8
grep -hE "FAILED|Error" "$LOGS"/overlap_tests.log | head -20
