#!/usr/bin/env bash
# Prepared in session 53 (its device time had run out): the SMALL front quantises its first q row
# beside the sample's row and scale lookups (patches/front-overlap-prepared.patch: warps 1-7 take
# the sample's slots, warp 0 none, and the barrier between the lookups and the quantisation goes;
# the first row step's barrier orders both before the tiles). Library s54f (main 922d550 + the
# patch) against s53e (built at c4b6192: the same device code as main 922d550). Here, if .ab/
# lacks them: `bash notes/prepared/build_ab.sh s53e s54f
# benchmarks/results/session53/patches/front-overlap-prepared.patch`. On the device, carrying
# .ab/s54f.so.xz, .ab/s54f.commit, .ab/s53e.so.xz, .ab/s53e.commit:
#   OUT=$OUT bash benchmarks/results/session53/scripts/next_front_overlap.sh
# Prediction: the front's chain at B1 loses min(quantisation, the two lookups), ~0.2-0.5 µs of the
# graphed attend, dense and depth 16 alike; nothing at B4 and up (the 8-row forms are unchanged).
# Steps: the decode GPU files on s54f (every attend test compares with the CPU reference or bits),
# racecheck of the decode smoke on s54f (a barrier was removed), then graphed per-kernel times of
# both libraries, two rounds in alternating order.
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s54f s53e
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk gpu_decode 200 env FOLD_ATTENTION_LIBRARY=$(L s54f) python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode*.py tests/python/test_gpu_sinks.py
chk racecheck 150 env FOLD_ATTENTION_LIBRARY=$(L s54f) compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
S="1,128,9,3,64;1,2048,9,3,64;1,8192,9,3,64;1,4096,32,8,128;1,16384,32,8,128;4,4096,32,8,128"
for r in 1 2; do
  for lib in $([ $r = 1 ] && echo "s53e s54f" || echo "s54f s53e"); do
    step kt_${lib}_r$r 60 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_kernel_times.py --shapes "$S"
  done
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed|SUMMARY" "$LOGS"/gpu_decode.log "$LOGS"/racecheck.log
for f in "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; grep -E "graphed|decode_front" $f; done
exit $fail
