#!/usr/bin/env bash
# Session 21, round 8: the forward's tile-order chunk of 64 pairs against the default, A/B in the
# forward protocol (graphed, L2 flushed, one process; FOLD_BENCH_VARIANTS=FOLD_FWD_HB_CHUNK=64)
# on the training shapes, causal and full (library `final` = main). Information for a rule; the
# published forward run is not replaced (the variant arm would compete as "ours").
#   OUT=$OUT bash benchmarks/results/session21/scripts/round8_fwd_chunk_ab.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh final
F=$(L final)
step ab 200 env FOLD_ATTENTION_LIBRARY=$F FOLD_BENCH_VARIANTS=FOLD_FWD_HB_CHUNK=64 python3 -m benchmarks.forward \
  --shapes issue --masks both --flex none --rounds 6 --budget-s 130 --out "$OUT/ab" --no-repo-results
find "$OUT/ab" -name '*.jsonl' -exec cp {} "$OUT/ab_forward.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/ab_forward.jsonl" > "$OUT/ab_table.txt" 2>&1
rm -rf "$OUT/ab"
cat "$OUT/ab_table.txt" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
