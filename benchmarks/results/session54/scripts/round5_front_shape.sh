#!/usr/bin/env bash
# Session 54, round 5: the front's sample shape and slot keys computed by every warp in registers
# (branch wip/front-shape, library s54s) against main's device code (s54f). Carrying .ab/s54s.* and
# .ab/s54f.*:  OUT=$OUT bash benchmarks/results/session54/scripts/round5_front_shape.sh
# Steps: every decode GPU file on s54s (the new hand-made heavy-list test: output and LSE bit for
# bit against the CPU reference on the exact value path; the window tests: the WIN front), racecheck
# of the decode smoke (two barriers fewer in the front), then graphed per-kernel times of both
# libraries, dense and depth 16, two rounds in alternating order.
# Prediction (round 1's diagnostic: plan + slots 1.3k cycles at L >= 256, 3.0k at L 128): the
# front -0.2 to -0.4 µs at L 2K-8K and -0.8 to -1.2 µs at L 128; large batches within noise.
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s54s s54f
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk gpu_decode 220 env FOLD_ATTENTION_LIBRARY=$(L s54s) python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode*.py tests/python/test_gpu_sinks.py
chk racecheck 150 env FOLD_ATTENTION_LIBRARY=$(L s54s) compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
S="1,128,9,3,64;1,2048,9,3,64;1,8192,9,3,64;1,4096,32,8,128;4,4096,32,8,128;32,8192,9,3,64"
for r in 1 2; do
  for lib in $([ $r = 1 ] && echo "s54f s54s" || echo "s54s s54f"); do
    step kt_${lib}_r$r 90 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_kernel_times.py --shapes "$S"
  done
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed|SUMMARY" "$LOGS"/gpu_decode.log "$LOGS"/racecheck.log
for f in "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; grep -E "graphed|decode_front" $f; done
exit $fail
