#!/usr/bin/env bash
# Session 28, round 3: the scan warps in the producer's order (library k2) against round 2's
# block order (k1, 3-8% slower than the plain forward). Forward protocol A/B of k2: default
# (scan) against FOLD_TRAIN_KV_BOUNDS=0 (the plain forward); the bounds tests and racecheck.
#   OUT=$OUT bash benchmarks/results/session28/scripts/round3_order.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh k2
X=$(L k2)
chk kvb_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_kv_bounds.py
chk racecheck 150 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool racecheck \
  --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
step fwd_ab 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=FOLD_TRAIN_KV_BOUNDS=0 \
  python3 -m benchmarks.forward --shapes issue --masks both --flex none --rounds 6 \
  --budget-s 90 --out "$OUT/t_fwd" --no-repo-results
find "$OUT/t_fwd" -name '*.jsonl' -exec cp {} "$OUT/fwd_ab.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/fwd_ab.jsonl" > "$OUT/fwd_ab.txt" 2>&1; rm -rf "$OUT/t_fwd"
echo "== round 3 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"; cat "$OUT/fwd_ab.txt"
