#!/usr/bin/env bash
# Session 28, round 9 (library k7 = a564386, main after the review's fixes: zeros for an
# all-empty batch, FOLD_BWD_KV_BOUNDS checked; device code unchanged but for a comment): the
# bounds tests (one new) and the training suite.
#   OUT=$OUT bash benchmarks/results/session28/scripts/round9_review.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh k7
X=$(L k7)
chk kvb_tests 120 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_kv_bounds.py
chk train_tests 120 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
echo "== round 9 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
