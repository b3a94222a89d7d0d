#!/usr/bin/env bash
# Session 26, round 6 (library `e5`: the review's host / test refactor, device code byte-identical
# to e4): the training GPU tests, then a diagnostic forward protocol A/B of the tile order's chunk
# size (FOLD_FWD_HB_CHUNK 4 / 9 / 33 pairs) for MHA (8, 2048, 16/16, 128), the shape furthest
# from cuDNN, whose ncu showed more DRAM traffic than cuDNN's.
#   OUT=$OUT bash benchmarks/results/session26/scripts/round6_review.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh e5
X=$(L e5)
chk train_tests 120 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
step fwd_ab 100 env FOLD_ATTENTION_LIBRARY=$X \
  FOLD_BENCH_VARIANTS=FOLD_FWD_HB_CHUNK=4,FOLD_FWD_HB_CHUNK=9,FOLD_FWD_HB_CHUNK=33 \
  python3 -m benchmarks.forward --shapes issue --masks both --flex none --rounds 6 --budget-s 80 \
  --out "$OUT/fab" --no-repo-results
find "$OUT/fab" -name '*.jsonl' -exec cp {} "$OUT/ab_forward.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/ab_forward.jsonl" > "$OUT/ab_forward.txt" 2>&1
rm -rf "$OUT/fab"
echo "== round 6 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
