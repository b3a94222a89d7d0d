#!/usr/bin/env bash
# Session 28, round 6 (library k5, branch kvb-dry): the scan with ld.shared in groups (round 5:
# the scan time holds the owned block's stages; one warp was 6-30% slower) and the scanning
# instances at producer 40 / consumers 232 registers (no spills). Checks (bounds tests, training
# suite, racecheck), then the forward A/B (scan / plain / scan without memset) and the backward
# A/B (forward's bounds / ignored).
#   OUT=$OUT bash benchmarks/results/session28/scripts/round6_lds.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh k5
X=$(L k5)
ab() {  # ab NAME MODULE VARIANTS SECONDS
  step $1 $4 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=$3 python3 -m benchmarks.$2 \
    --shapes issue --masks both --flex none --rounds 6 --budget-s $(( $4 - 30 )) \
    --out "$OUT/t_$1" --no-repo-results
  find "$OUT/t_$1" -name '*.jsonl' -exec cp {} "$OUT/$1.jsonl" \; 2>/dev/null
  python3 scripts/ab_table.py "$OUT/$1.jsonl" > "$OUT/$1.txt" 2>&1
  rm -rf "$OUT/t_$1"
}
chk kvb_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_kv_bounds.py
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
chk racecheck 150 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool racecheck \
  --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
ab fwd_ab forward FOLD_TRAIN_KV_BOUNDS=0,FOLD_FWD_KV_NOMEMSET=1 120
ab bwd_ab backward FOLD_BWD_KV_BOUNDS=0 150
echo "== round 6 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"; cat "$OUT/fwd_ab.txt" "$OUT/bwd_ab.txt"
