#!/usr/bin/env bash
# Session 53: pass 1 leaving at once where no group was flagged, and its statistics' request
# index by a 32-bit division (branch wip/p1exit, library s53e = main + those two commits) against
# main (s53m). Round 5's ncu of pass 1 at B1: 19% of its samples on the way to its last
# instruction (the trigger, past the inlined split and combine: a cold instruction fetch) and the
# 64-bit division before it; the statistics' 64-bit divisions are calls to far code too.
# Graphed per-kernel times at B1 (and B4), dense and depth 16, two rounds in alternating order;
# then every decode GPU file on s53e
# (the guard's tests run pass 1 with flagged groups). Carry .ab/s53e.* and .ab/s53m.*:
#   OUT=$OUT bash benchmarks/results/session53/scripts/round6_p1exit.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s53e s53m
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
S="1,512,9,3,64;1,2048,9,3,64;1,8192,9,3,64;1,4096,32,8,128;1,16384,32,8,128;4,4096,32,8,128"
for r in 1 2; do
  for lib in $([ $r = 1 ] && echo "s53m s53e" || echo "s53e s53m"); do
    step kt_${lib}_r$r 60 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_kernel_times.py --shapes "$S"
  done
done
chk gpu_decode 200 env FOLD_ATTENTION_LIBRARY=$(L s53e) python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode*.py tests/python/test_gpu_sinks.py
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/gpu_decode.log
for f in "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; grep -E "graphed|decode_split_kernel" $f; done
exit $fail
