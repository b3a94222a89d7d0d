#!/usr/bin/env bash
# Prepared in session 26 (not run): repeat round 6's tile-order chunk lead for causal MHA at
# D 128 (notes/training_kernels.md "Session 26", last paragraph). Library `e5` (= main's device
# code at b10aeab; `.ab/e5.so.xz`). Two forward protocol A/B runs (two processes) of
# FOLD_FWD_HB_CHUNK 2 / 4 / 6 / 8 query heads per chunk against the default rule; the shape that
# matters is (8, 2048, 16/16, 128) causal (the only causal MHA D 128 case), the others show what
# a general rule would cost.
#   OUT=$OUT bash notes/prepared/next_round_chunk.sh
set -u
cd "$(dirname "$0")/../.."
source notes/prepared/round_common.sh e5
X=$(L e5)
for n in 1 2; do
  step fwd_ab$n 150 env FOLD_ATTENTION_LIBRARY=$X \
    FOLD_BENCH_VARIANTS=FOLD_FWD_HB_CHUNK=2,FOLD_FWD_HB_CHUNK=4,FOLD_FWD_HB_CHUNK=6,FOLD_FWD_HB_CHUNK=8 \
    python3 -m benchmarks.forward --shapes issue --masks causal --flex none --rounds 6 --budget-s 120 \
    --out "$OUT/fab" --no-repo-results
  find "$OUT/fab" -name '*.jsonl' -exec cp {} "$OUT/ab_forward$n.jsonl" \; 2>/dev/null
  python3 scripts/ab_table.py "$OUT/ab_forward$n.jsonl" > "$OUT/ab_forward$n.txt" 2>&1
  rm -rf "$OUT/fab"
done
cat "$OUT/summary.txt"; grep -h "B8-S2048-H16/16-D128" "$OUT"/ab_forward*.txt
