#!/usr/bin/env bash
# Session 46's second device call (carry [".ab"]): main's library f44 (its device code is main's),
# the package of the working tree (the chunk after a history: one decode call per run of groups,
# the lengths read once, the seven-op merge) against main's package (.ab/pyhead, commit in
# .ab/pyhead/commit).
#   OUT=$OUT bash benchmarks/results/session46/scripts/round2.sh
#     1. the chunk / pinned / truncate GPU files with the new package (bits of one call against
#        one group at a time, the CPU reference, float64);
#     2. time_serving_ops.py: new, main's package, new again (one process each);
#     3. profile_serving_op.py (new package): where a chunk's host time goes;
#     4. host_breakdown.py --profile: the C calls' runtime calls.
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh f44
F=$(L f44)
OLD="$PWD/.ab/pyhead/python:$PWD/scripts:$PWD"
chk chunk_tests 200 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode_chunk_after_history.py tests/python/test_gpu_decode_pinned_window.py \
  tests/python/test_gpu_decode_truncate.py
step serving_new 120 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/time_serving_ops.py
step serving_old 120 env FOLD_ATTENTION_LIBRARY=$F PYTHONPATH=$OLD python3 scripts/time_serving_ops.py
step serving_new2 120 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/time_serving_ops.py
step profile 120 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/profile_serving_op.py \
  --cases "4096,16;4096,128"
step host_breakdown 120 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/host_breakdown.py --profile
grep -hE "passed|failed" "$LOGS/chunk_tests.log" | tail -3
for f in serving_new serving_old serving_new2 host_breakdown; do
  echo "-- $f"; grep -v "^\s*$" "$LOGS/$f.log" | tail -40
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
echo "fail=$fail"
