#!/usr/bin/env bash
# Session 28, round 8: session 27's prepared dynamic-schedule library e9 (76162e7), its forward
# protocol A/B only (device time was short): dynamic (default) against FOLD_FWD_SCHED=static and
# dynamic with 8-head chunks. Run from the repository root of a tree with session 27's patch
# applied (branch dyn9 = 59f7204 + patches/fwd-dyn-sched-76162e7.patch):
#   OUT=$OUT bash benchmarks/results/session28/scripts/round8_dyn.sh
set -u
source notes/prepared/round_common.sh e9
X=$(L e9)
step fwd_ab 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=FOLD_FWD_SCHED=static,FOLD_FWD_HB_CHUNK=8 \
  python3 -m benchmarks.forward --shapes issue --masks both --flex none --rounds 6 --budget-s 120 \
  --out "$OUT/t" --no-repo-results
find "$OUT/t" -name '*.jsonl' -exec cp {} "$OUT/fwd_ab.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/fwd_ab.jsonl" > "$OUT/fwd_ab.txt" 2>&1; rm -rf "$OUT/t"
cat "$OUT/summary.txt"; cut -c1-400 "$OUT/fwd_ab.txt"
