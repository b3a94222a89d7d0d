#!/usr/bin/env bash
# Session 28, round 1: the forward's K / V bounds for the backward (library k1, branch kvb).
# - GPU tests: the new tests/python/test_gpu_kv_bounds.py and the training suite (every
#   autograd forward on CUDA now takes the bounds).
# - compute-sanitizer racecheck, synccheck and memcheck on scripts/gpu_smoke.py --training-only
#   (its forwards take the bounds: the scanning instances at D 64 / 96 / 128).
# - Backward protocol A/B: default (the forward's bounds) against FOLD_BWD_KV_BOUNDS=0 (ignored:
#   the preprocess reads K and V as before). Prediction: +3-4% at the G 1 shapes, ~1% at G 4.
# - Forward protocol A/B: default (the scan) against FOLD_TRAIN_KV_BOUNDS=0 (the plain forward,
#   main's code) and FOLD_FWD_KV_BOUNDS=pass (the separate pass). Prediction: the scan within
#   1% of the plain forward.
#   OUT=$OUT bash benchmarks/results/session28/scripts/round1_kvb.sh checks|bench
# (two calls: each stays under the device's 10-minute limit)
set -u
part=${1:-checks}
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh k1
X=$(L k1)
ab() {  # ab NAME MODULE VARIANTS SECONDS
  step $1 $4 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=$3 python3 -m benchmarks.$2 \
    --shapes issue --masks both --flex none --rounds 6 --budget-s $(( $4 - 30 )) \
    --out "$OUT/t_$1" --no-repo-results
  find "$OUT/t_$1" -name '*.jsonl' -exec cp {} "$OUT/$1.jsonl" \; 2>/dev/null
  python3 scripts/ab_table.py "$OUT/$1.jsonl" > "$OUT/$1.txt" 2>&1
  rm -rf "$OUT/t_$1"
}
if [ "$part" = checks ]; then
chk kvb_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_kv_bounds.py
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
for tool in racecheck synccheck memcheck; do
  chk $tool 150 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --training-only
done
else
ab bwd_ab backward FOLD_BWD_KV_BOUNDS=0 150
ab fwd_ab forward FOLD_TRAIN_KV_BOUNDS=0,FOLD_FWD_KV_BOUNDS=pass 120
fi
echo "== round 1 ($part) checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"; cat "$OUT"/*_ab.txt 2>/dev/null
