#!/usr/bin/env bash
# Session 28, round 4 (library k3, branch kvb-dry): where the scan's forward cost comes from.
# Forward protocol A/B, one process: default (scan) / FOLD_TRAIN_KV_BOUNDS=0 (plain forward) /
# FOLD_FWD_KV_BOUNDS=pass (plain kernel + separate K / V pass) / FOLD_FWD_KV_BOUNDS=dry (the
# scanning instance with its scan warps idle + the pass). dry - pass = the cost of the scanning
# instance's code alone; scan - (dry - pass) - plain = the scan warps' share. The bounds tensor
# now comes from torch.empty (one zero-fill kernel less).
#   OUT=$OUT bash benchmarks/results/session28/scripts/round4_dry.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh k3
X=$(L k3)
step fwd_ab 150 env FOLD_ATTENTION_LIBRARY=$X \
  FOLD_BENCH_VARIANTS=FOLD_TRAIN_KV_BOUNDS=0,FOLD_FWD_KV_BOUNDS=pass,FOLD_FWD_KV_BOUNDS=dry \
  python3 -m benchmarks.forward --shapes issue --masks both --flex none --rounds 6 \
  --budget-s 120 --out "$OUT/t_fwd" --no-repo-results
find "$OUT/t_fwd" -name '*.jsonl' -exec cp {} "$OUT/fwd_ab.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/fwd_ab.jsonl" > "$OUT/fwd_ab.txt" 2>&1; rm -rf "$OUT/t_fwd"
cat "$OUT/summary.txt"; cat "$OUT/fwd_ab.txt"
