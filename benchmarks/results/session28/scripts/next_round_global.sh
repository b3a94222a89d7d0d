#!/usr/bin/env bash
# Prepared in session 28, NOT RUN: the K / V scan reading global memory instead of the stages
# (patches/kv-scan-global-prepared.patch, `git am` on main at 1cea0aa or later; the device call
# runs from that working tree: its tests cover FOLD_FWD_KV_SCAN=global). Library: build it and
# carry it as .ab/k8.so.xz (session 28 built it as k8 from the patch's commit).
# Why: the stage-reading scan costs the forward 1-3% at G 1 (it holds its block's stages and
# takes part in every fill); the global reader holds nothing and counts in no barrier, at the
# price of reading K / V once more from L2 (paced behind the producer's Q issue, so mostly hits).
# Prediction: the forward within 1% of the plain forward at G 1; if so the rule can widen to KV
# groups (their step was even only because of the forward's cost).
#   OUT=$OUT bash benchmarks/results/session28/scripts/next_round_global.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh k8
X=$(L k8)
ab() {  # ab NAME MODULE VARIANTS SECONDS
  step $1 $4 env FOLD_ATTENTION_LIBRARY=$X FOLD_TRAIN_KV_BOUNDS=1 FOLD_BENCH_VARIANTS=$3 \
    python3 -m benchmarks.$2 --shapes issue --masks both --flex none --rounds 6 \
    --budget-s $(( $4 - 30 )) --out "$OUT/t_$1" --no-repo-results
  find "$OUT/t_$1" -name '*.jsonl' -exec cp {} "$OUT/$1.jsonl" \; 2>/dev/null
  python3 scripts/ab_table.py "$OUT/$1.jsonl" > "$OUT/$1.txt" 2>&1
  rm -rf "$OUT/t_$1"
}
chk kvb_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_kv_bounds.py
for tool in racecheck memcheck; do
  chk $tool 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_TRAIN_KV_BOUNDS=1 FOLD_FWD_KV_SCAN=global \
    compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
done
# Every shape with the bounds forced on: the stage scan (default) / the global scan / none.
ab fwd_ab forward FOLD_FWD_KV_SCAN=global,FOLD_TRAIN_KV_BOUNDS=0 150
echo "== next round checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"; cat "$OUT/fwd_ab.txt"
