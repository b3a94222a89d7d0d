#!/usr/bin/env bash
# Session 54, round 3: the combine kernels load the request's length and their rows' Z before
# their PDL wait (library s54p, branch wip/combine-prewait) against main's device code (s54f: main
# 057cc33's, the front-overlap patch merged). Carrying .ab/s54p.* and .ab/s54f.*:
#   OUT=$OUT bash benchmarks/results/session54/scripts/round3_prewait.sh
# Steps: every decode GPU file on s54p (windows and sinks: the EXT combines; the overlap and
# guard tests), then graphed per-kernel times of both libraries, dense and depth 16, two rounds
# in alternating order.
# Prediction: two dependent L2 round trips fewer after the combine's wait: -0.3 to -0.6 µs per B1
# attend, dense and screened; large batches unchanged.
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s54p s54f
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk gpu_decode 220 env FOLD_ATTENTION_LIBRARY=$(L s54p) python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode*.py tests/python/test_gpu_sinks.py
S="1,128,9,3,64;1,2048,9,3,64;1,8192,9,3,64;1,4096,32,8,128;1,16384,32,8,128;4,4096,32,8,128;32,8192,9,3,64"
for r in 1 2; do
  for lib in $([ $r = 1 ] && echo "s54f s54p" || echo "s54p s54f"); do
    step kt_${lib}_r$r 90 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_kernel_times.py --shapes "$S"
  done
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/gpu_decode.log
for f in "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; grep -E "graphed|combine" $f; done
exit $fail
