#!/usr/bin/env bash
# Session 38, round 5: library s38c (its training kernels are main's). Session 26/27's lead on the
# backward's CTA chunk (FOLD_BWD_HB_CHUNK, KV head x request per chunk; scheduling only): one run
# had +2-3% at the non-causal S <= 2048 shapes with chunks of 2-8 and losses elsewhere. Repeated:
# eager, warm L2, median of 10, two processes with the arms in opposite orders; and the schedule
# bit test (chunks 1, 2, 4, 7, 9 against the default).
#   OUT=$OUT bash benchmarks/results/session38/scripts/round5.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s38c
X=$(L s38c)
chk sched_test 120 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py -k "schedule"
SH="8,2048,16,16,128;16,1024,32,8,128;8,2048,32,32,64;4,4096,32,8,128;2,8192,32,8,128"
step chunk_a 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_TIME_SHAPES="$SH" python3 scripts/time_backward_variants.py \
  default FOLD_BWD_HB_CHUNK=4 FOLD_BWD_HB_CHUNK=2
step chunk_b 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_TIME_SHAPES="$SH" python3 scripts/time_backward_variants.py \
  FOLD_BWD_HB_CHUNK=2 FOLD_BWD_HB_CHUNK=4 default
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in "$LOGS"/chunk_*.log; do echo "-- $(basename $f)"; grep -v "^\s*$" $f | tail -14; done
grep -hE "passed|failed" "$LOGS"/sched_test.log
