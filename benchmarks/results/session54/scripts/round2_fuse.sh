#!/usr/bin/env bash
# Session 54, round 2: pass 0's combine fused into split2's PAIR kernel (each group's last split
# block combines it; FOLD_DECODE_FUSE_COMBINE, on by default, "0" launches the combine kernel).
# Library s54c (branch wip/fuse-combine). On the device, carrying .ab/s54c.so.xz and .ab/s54c.commit:
#   OUT=$OUT bash benchmarks/results/session54/scripts/round2_fuse.sh
# Steps: every decode GPU file (the new bit tests against FOLD_DECODE_FUSE_COMBINE=0 and the
# flagged-group test among them), racecheck and synccheck of the decode smoke (the tail's barriers
# run after the second warp group has exited), then graphed per-kernel times with the knob on and
# off, two rounds in alternating order (the same library: a per-call switch).
# Prediction: the B1 screened attends lose the combine kernel (3.6-3.9 µs) and gain the ticket and
# the combine's chain in split2 (~1.5-2 µs): -1.5 to -2.5 µs.
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s54c
X=$(L s54c)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk gpu_decode 220 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode*.py tests/python/test_gpu_sinks.py
chk racecheck 150 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
chk synccheck 150 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool synccheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
S="1,128,9,3,64;1,2048,9,3,64;1,8192,9,3,64;1,4096,32,8,128;1,16384,32,8,128;4,4096,32,8,128"
for r in 1 2; do
  for f in $([ $r = 1 ] && echo "0 1" || echo "1 0"); do
    step kt_fuse${f}_r$r 60 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FUSE_COMBINE=$f \
      python3 scripts/decode_kernel_times.py --screened-only --shapes "$S"
  done
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed|SUMMARY|ERROR" "$LOGS"/gpu_decode.log "$LOGS"/racecheck.log "$LOGS"/synccheck.log | head -20
for f in "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; grep -E "graphed|split2|combine" $f; done
exit $fail
