#!/usr/bin/env bash
# Session 36, round 8: the final read's mends (the ring's partial-chunk zeroing as one loop for
# bf16 / fp16 and v8, which changes every ring instance's SASS; the EPT knob read once): library
# m42. Decode tests, and bf16 / fp16 and v8 hashes against round 5's (m41).
#   OUT=$OUT bash benchmarks/results/session36/scripts/round8.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m42
X=$(L m42)
chk decode_tests 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py
step hash_v8 90 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16 --v8
step hash_bf16 90 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16
echo "== round 8 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | grep "==\|passed\|failed"
cat "$LOGS/hash_v8.log" "$LOGS/hash_bf16.log" | md5sum
