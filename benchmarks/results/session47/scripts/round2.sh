#!/usr/bin/env bash
# Session 47, second device call (carry .ab/f44.*): round 1's eager lead on the backward's CTA
# chunk (FOLD_BWD_HB_CHUNK=4: -7% time at (16, 1024, 32/8, 128) full and -2 to -6% at (4, 4096,
# 32/8, 128) full, both orders) in the backward protocol: graphed, L2 flushed, one process, the
# chunks as FOLD_BENCH_VARIANTS arms beside the default on the issue's shapes, both masks.
#   OUT=$OUT bash benchmarks/results/session47/scripts/round2.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh f44
F=$(L f44)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv >> "$OUT/summary.txt"
step ab 420 env FOLD_ATTENTION_LIBRARY=$F FOLD_BENCH_VARIANTS=FOLD_BWD_HB_CHUNK=4,FOLD_BWD_HB_CHUNK=2 \
  python3 -m benchmarks.backward --shapes issue --masks both --flex none --rounds 4 --budget-s 400 \
  --out "$OUT/ab" --no-repo-results
find "$OUT/ab" -name '*.jsonl' -exec cp {} "$OUT/ab_backward.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/ab_backward.jsonl" > "$OUT/ab_table.txt" 2>&1
rm -rf "$OUT/ab"
cat "$OUT/ab_table.txt" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
