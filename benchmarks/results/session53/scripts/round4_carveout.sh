#!/usr/bin/env bash
# Session 53: does the shared memory carveout cost the B1 chain? (round 3: at B1 the four kernels'
# durations add up to the graphed attend, and pass 1, which returns at once, takes 2.9 us.) The
# knob FOLD_DECODE_CARVEOUT=N (branch wip/carveout, library s53c: main + the knob, read once per
# process) sets every decode kernel's preferred carveout to N percent: 100 gives every kernel the
# largest shared memory size, so no two kernels of a step ask an SM for different sizes; 28 asks
# for ~64 KB (the front and split2's size at B1), more where a kernel needs it. Graphed per-kernel
# times, dense and depth 16, arms unset / 100 / 28 in two rounds (the second reversed), then the
# decode smoke under 100 (scheduling only: the same outputs). Carry .ab/s53c.so.xz, .ab/s53c.commit:
#   OUT=$OUT bash benchmarks/results/session53/scripts/round4_carveout.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s53c
X=$(L s53c)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
S="1,512,9,3,64;1,2048,9,3,64;1,8192,9,3,64;1,4096,32,8,128;1,16384,32,8,128;4,4096,32,8,128"
S="$S;32,8192,9,3,64;32,8192,32,8,128"
for arms in "unset 100 28" "28 100 unset"; do
  for a in $arms; do
    r=$([ "$arms" = "unset 100 28" ] && echo 1 || echo 2)
    if [ $a = unset ]; then
      step kt_${a}_r$r 90 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_kernel_times.py --shapes "$S"
    else
      step kt_${a}_r$r 90 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_CARVEOUT=$a \
        python3 scripts/decode_kernel_times.py --shapes "$S"
    fi
  done
done
chk smoke 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_CARVEOUT=100 python3 scripts/gpu_smoke.py --decode-only
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; grep -E "graphed" $f; done
exit $fail
