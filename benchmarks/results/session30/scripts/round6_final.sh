#!/usr/bin/env bash
# Session 30, round 6: main d8670e0 (the sliced scan reverted; library f30 built from it). The
# page tests with lengths that cross a page boundary at every size, the kv-bounds tests with the
# row-by-row coverage test on the owner form, and the decode API / step-check GPU tests.
#   OUT=$OUT bash benchmarks/results/session30/scripts/round6_final.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh f30
X=$(L f30)
chk tests 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode_pages.py tests/python/test_gpu_kv_bounds.py \
  tests/python/test_decode_step_checks.py tests/python/test_decode_api.py
echo "== round 6 checks failed: $fail" >> "$OUT/summary.txt"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -12
