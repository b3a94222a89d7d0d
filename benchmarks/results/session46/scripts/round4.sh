#!/usr/bin/env bash
# Session 46's fourth device call (carry [".ab"]): library f44 (main's device code), the working
# tree's final package (round 2's plus the one-read value check, the history returned without a
# copy) against main's package (.ab/pyhead).
#   OUT=$OUT bash benchmarks/results/session46/scripts/round4.sh
#     1. the chunk / pinned / truncate GPU files and the serving examples, new package;
#     2. time_serving_ops.py: new, main's package, new again;
#     3. profile_serving_op.py --cpu-only (the chunk's host ops, n 16);
#     4. benchmarks/micro/launch_cost.cu (.ab/launch_cost): a launch's host cost by its shape.
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh f44
F=$(L f44)
OLD="$PWD/.ab/pyhead/python:$PWD/scripts:$PWD"
chk chunk_tests 200 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode_chunk_after_history.py tests/python/test_gpu_decode_pinned_window.py \
  tests/python/test_gpu_decode_truncate.py
for ex in speculative_decoding prefix_sharing; do
  chk ex_$ex 40 env FOLD_ATTENTION_LIBRARY=$F python3 examples/python/$ex.py --device cuda
done
step launch_cost 60 ./.ab/launch_cost
step serving_new 120 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/time_serving_ops.py
step serving_old 120 env FOLD_ATTENTION_LIBRARY=$F PYTHONPATH=$OLD python3 scripts/time_serving_ops.py
step serving_new2 120 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/time_serving_ops.py
step serving_old2 120 env FOLD_ATTENTION_LIBRARY=$F PYTHONPATH=$OLD python3 scripts/time_serving_ops.py
step profile 120 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/profile_serving_op.py \
  --cases "4096,16" --rows 30 --cpu-only
grep -hE "passed|failed" "$LOGS/chunk_tests.log" | tail -3
for f in launch_cost serving_new serving_old serving_new2 serving_old2; do
  echo "-- $f"; grep -v "^\s*$" "$LOGS/$f.log" | head -9
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
echo "fail=$fail"
