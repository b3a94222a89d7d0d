#!/usr/bin/env bash
# Session 54, round 7: the front's slot placement through reference_z.h's mask functions (branch
# wip/shape-shared, library s54r): the same rule as round 5's s54s, now one definition shared with
# the host test; ptxas differs by 2 registers in some front instances, so the front's bit tests
# run again. Carrying .ab/s54r.*:  OUT=$OUT bash benchmarks/results/session54/scripts/round7_shape_shared.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s54r
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk front_tests 150 env FOLD_ATTENTION_LIBRARY=$(L s54r) python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode.py tests/python/test_gpu_decode_window_sinks.py \
  -k "heavy_lists or front or overlap or guard or match_cpu or window"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/front_tests.log
exit $fail
