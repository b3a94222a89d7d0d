#!/usr/bin/env bash
# Session 24, round 1 (library `fx`: main + the decode front's opt-in FOLD_DECODE_FRONT_UNROLL, the forward's opt-in v1.2-er, O rescaled while S runs,
# v1.2-3wg / v1.2-3wg-er, three consumer warpgroups at D 64 with 192 x 128 tiles, and v1.2-dq, two
# Q buffers so that the next tile's Q loads during this one): the training
# GPU tests (default, and with v1.2-3wg for the whole run), memcheck / racecheck / synccheck of the
# training smoke with each new variant, the forward protocol A/B against the default, ncu of the forward
# (ours and cuDNN's) at D 64 (8, 2048, 32/32) and D 128 (16, 1024, 32/8) non-causal: pipes,
# warp states, issue; the decode attend's kernels at B1 (captures' shape, L32K) and B4 L16K; the
# decode front's opt-in FOLD_DECODE_FRONT_UNROLL: bits, front time, graphed A/B.
#   OUT=$OUT bash benchmarks/results/session24/scripts/round1_fwd_variants.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh fx
X=$(L fx)
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
chk train_tests_3wg 200 env FOLD_ATTENTION_LIBRARY=$X FOLD_FWD_VARIANT=v1.2-3wg python3 -m pytest -q -m gpu \
  -p no:logging tests/python/test_gpu_training.py
for var in v1.2-3wg-er v1.2-dq; do
  for tool in memcheck racecheck synccheck; do
    chk ${tool}_$var 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_FWD_VARIANT=$var FOLD_FWD_CTAS=2 \
      compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
  done
done
step fwd_ab 300 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=FOLD_FWD_VARIANT=v1.2-er,FOLD_FWD_VARIANT=v1.2-3wg,FOLD_FWD_VARIANT=v1.2-dq \
  python3 -m benchmarks.forward --shapes issue --masks both --flex none --rounds 6 --budget-s 200 \
  --out "$OUT/fab" --no-repo-results
find "$OUT/fab" -name '*.jsonl' -exec cp {} "$OUT/ab_forward.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/ab_forward.jsonl" > "$OUT/ab_forward.txt" 2>&1
rm -rf "$OUT/fab"
cat "$OUT/ab_forward.txt" >> "$OUT/summary.txt"
B1="1,2048,9,3,64;1,8192,9,3,64;1,32768,32,8,128;4,16384,32,8,128"
step kt_b1 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_kernel_times.py --shapes "$B1"
cp "$LOGS/kt_b1.log" "$OUT/kt_b1.txt"
# The decode front's opt-in UNROLL form (FOLD_DECODE_FRONT_UNROLL=1: every sample tile's key loads
# before the first MMA, where the front's grid fits in one block per SM): same bits (hashes), the
# front's time, graphed A/B of the attend.
for v in 0 1; do
  step hash_unroll$v 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_UNROLL=$v python3 scripts/decode_hashes.py \
    --depths none,16 --quick
  cp "$LOGS/hash_unroll$v.log" "$OUT/hash_unroll$v.txt"
done
if cmp -s <(grep -v "^==" "$OUT/hash_unroll0.txt") <(grep -v "^==" "$OUT/hash_unroll1.txt"); then
  echo "== hashes unroll 0 = 1: same" >> "$OUT/summary.txt"
else
  echo "== hashes unroll 0 = 1: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
step kt_b1_unroll 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_UNROLL=1 python3 scripts/decode_kernel_times.py --shapes "$B1"
cp "$LOGS/kt_b1_unroll.log" "$OUT/kt_b1_unroll.txt"
step ab_unroll 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_FRONT_UNROLL \
  --values "-,1" --rounds 7 --shapes "$B1"
cp "$LOGS/ab_unroll.log" "$OUT/ab_unroll.txt"
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats --section SchedulerStats --section Occupancy --print-details all"
for c in "d64 8 2048 32 32 64 0" "d128 16 1024 32 8 128 0"; do
  set -- $c; n=$1; shift
  step ncu_fold_$n 120 env FOLD_ATTENTION_LIBRARY=$X ncu --clock-control none --kernel-name regex:forward_v1 \
    --launch-skip 1 --launch-count 1 $SEC python3 scripts/profile_forward.py "$@"
  cp "$LOGS/ncu_fold_$n.log" "$OUT/ncu_fold_$n.txt"
  step ncu_cudnn_$n 120 ncu --clock-control none --kernel-name regex:fprop \
    --launch-skip 1 --launch-count 1 $SEC python3 scripts/profile_forward.py "$@" sdpa
  cp "$LOGS/ncu_cudnn_$n.log" "$OUT/ncu_cudnn_$n.txt"
done
step ncu_src_d64 150 env FOLD_ATTENTION_LIBRARY=$X ncu --kernel-name regex:forward_v1 --launch-skip 1 \
  --launch-count 1 --set full --import-source yes -f -o "$OUT/fwd_d64" python3 scripts/profile_forward.py 8 2048 32 32 64 0
ncu -i "$OUT/fwd_d64.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/fwd_d64.src.csv.gz"
python3 scripts/ncu_stalls.py "$OUT/fwd_d64.src.csv.gz" 40 > "$OUT/fwd_d64.stalls.txt" 2>&1
rm -f "$OUT/fwd_d64.ncu-rep"
echo "== round 1 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
