#!/usr/bin/env bash
# Session 25, round 2 (library `trim`: main + the forward's opt-in FOLD_FWD_TRIM=1: v1.2 skips a
# consumer's GEMMs where its 64 rows all lie past the request's end, and multiplies P V over half
# of a last key block with at most half its keys in range): the training GPU tests with it for the
# whole run (and the new bit test: trim on = off), racecheck / memcheck of the training smoke with
# it, the forward protocol A/B (trim; and the tile order's chunk at 32 / 64 pairs, for D 64
# causal), then ncu of the forward, ours and cuDNN's, at (16, 1024, 32/8, 128) non-causal.
#   OUT=$OUT bash benchmarks/results/session25/scripts/round2_trim.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh trim
X=$(L trim)
chk train_tests_trim 240 env FOLD_ATTENTION_LIBRARY=$X FOLD_FWD_TRIM=1 python3 -m pytest -q -m gpu \
  -p no:logging tests/python/test_gpu_training.py
for c in "racecheck 1" "racecheck 3" "memcheck 2"; do
  set -- $c
  chk ${1}_trim$2 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_FWD_TRIM=1 FOLD_FWD_CTAS=$2 \
    compute-sanitizer --tool $1 --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
done
step fwd_ab 300 env FOLD_ATTENTION_LIBRARY=$X \
  FOLD_BENCH_VARIANTS=FOLD_FWD_TRIM=1,FOLD_FWD_HB_CHUNK=32,FOLD_FWD_HB_CHUNK=64 \
  python3 -m benchmarks.forward --shapes issue --masks both --flex none --rounds 6 --budget-s 240 \
  --out "$OUT/fab" --no-repo-results
find "$OUT/fab" -name '*.jsonl' -exec cp {} "$OUT/ab_forward.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/ab_forward.jsonl" > "$OUT/ab_forward.txt" 2>&1
rm -rf "$OUT/fab"
cat "$OUT/ab_forward.txt" >> "$OUT/summary.txt"
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats --section SchedulerStats --section Occupancy --print-details all"
step ncu_fold_d128 120 env FOLD_ATTENTION_LIBRARY=$X ncu --clock-control none --kernel-name regex:forward_v1 \
  --launch-skip 1 --launch-count 1 $SEC python3 scripts/profile_forward.py 16 1024 32 8 128 0
step ncu_cudnn_d128 120 ncu --clock-control none --kernel-name regex:fprop \
  --launch-skip 1 --launch-count 1 $SEC python3 scripts/profile_forward.py 16 1024 32 8 128 0 sdpa
echo "== round 2 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
