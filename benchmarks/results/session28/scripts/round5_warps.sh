#!/usr/bin/env bash
# Session 28, round 5 (library k4, branch kvb-dry): where the scan's forward cost comes from, part
# two. Forward protocol A/B, one process: default (scan, 3 warps) / FOLD_TRAIN_KV_BOUNDS=0 (the
# plain forward) / FOLD_FWD_KV_WARPS=1 (one scan warp) / FOLD_FWD_KV_NOMEMSET=1 (the scan without
# its memset: wrong bounds, timing only) / FOLD_FWD_KV_BOUNDS=dry (as round 4).
#   OUT=$OUT bash benchmarks/results/session28/scripts/round5_warps.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh k4
X=$(L k4)
step fwd_ab 150 env FOLD_ATTENTION_LIBRARY=$X \
  FOLD_BENCH_VARIANTS=FOLD_TRAIN_KV_BOUNDS=0,FOLD_FWD_KV_WARPS=1,FOLD_FWD_KV_NOMEMSET=1,FOLD_FWD_KV_BOUNDS=dry \
  python3 -m benchmarks.forward --shapes issue --masks both --flex none --rounds 6 \
  --budget-s 120 --out "$OUT/t_fwd" --no-repo-results
find "$OUT/t_fwd" -name '*.jsonl' -exec cp {} "$OUT/fwd_ab.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/fwd_ab.jsonl" > "$OUT/fwd_ab.txt" 2>&1; rm -rf "$OUT/t_fwd"
cat "$OUT/summary.txt"; cat "$OUT/fwd_ab.txt"
