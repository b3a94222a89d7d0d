#!/usr/bin/env bash
# Session 24, round 2 (library `d2`: the forward's D 64 default on three consumer warpgroups with
# 192 x 128 tiles, v1.2-2wg for the previous form; the decode front's unrolled form at small grids
# on by default, FOLD_DECODE_FRONT_UNROLL=0 for the loop): training and decode GPU tests, memcheck /
# racecheck / synccheck of the whole smoke (2 forward CTAs), the forward protocol (published), the
# front A/B again, ncu of the forward at (16, 1024, 32/8, 128) non-causal, ours and cuDNN's.
# Everything lands in $OUT/r2.tgz (the device returns a limited number of files).
#   OUT=$OUT bash benchmarks/results/session24/scripts/round2_defaults.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh d2
X=$(L d2)
R=$(mktemp -d)/r2 && mkdir -p "$R"
pack() { cp "$OUT/summary.txt" "$R/" 2>/dev/null; tar czf "$OUT/r2.tgz" -C "$(dirname "$R")" r2 -C "$(dirname "$LOGS")" logs; }
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
chk decode_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m "gpu or not gpu" -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_decode_step_checks.py
pack
for tool in memcheck racecheck synccheck; do
  chk ${tool} 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_FWD_CTAS=2 compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py
done
pack
step fwd_protocol 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m benchmarks.forward --shapes issue --masks both \
  --flex none --rounds 6 --budget-s 90 --out "$R/fwd" --no-repo-results
pack
step ab_unroll 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_FRONT_UNROLL \
  --values "0,-" --rounds 7 --shapes "1,2048,9,3,64;1,8192,9,3,64;1,32768,32,8,128"
pack
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats --section SchedulerStats --print-details all"
step ncu_fold_d128 90 env FOLD_ATTENTION_LIBRARY=$X ncu --clock-control none --kernel-name regex:forward_v1 \
  --launch-skip 1 --launch-count 1 $SEC python3 scripts/profile_forward.py 16 1024 32 8 128 0
step ncu_cudnn_d128 90 ncu --clock-control none --kernel-name regex:fprop \
  --launch-skip 1 --launch-count 1 $SEC python3 scripts/profile_forward.py 16 1024 32 8 128 0 sdpa
echo "== round 2 checks failed: $fail" >> "$OUT/summary.txt"
pack
rm -f "$OUT/logs.tgz"
tail -n 60 "$OUT/summary.txt"
